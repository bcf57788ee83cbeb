/**
 * test/support/metric-catalogue.ts on the real components' expositions, rendered in
 * process (the agent's AgentMetrics, the manager's prom-client registry): what it reads
 * from them, and each kind of problem it reports, each named; the NFS server's families
 * (server/nfs-ganesha/nfs-metrics.ts) rendered from a good scrape's observations.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { AgentMetrics } from '../../agent/agent-metrics.ts';
import { ManualClock } from '../../lib/clock.ts';
import { renderFamilies } from '../../lib/prom-text.ts';
import { createManagerMetrics } from '../../manager/manager-metrics.ts';
import { nfsFamilies } from '../../server/nfs-ganesha/nfs-metrics.ts';
import { addScrape, type Catalogue, parseExposition, problemsOf } from '../support/metric-catalogue.ts';

async function catalogue(): Promise<Catalogue> {
  const registry = new Registry();
  createManagerMetrics(registry);
  const c: Catalogue = new Map();
  addScrape(c, 'manager', await registry.metrics(), ['job', 'instance', 'namespace', 'pod']);
  addScrape(c, 'agent', new AgentMetrics(new ManualClock(0)).render(), ['job', 'pod', 'share', 'node']);
  const nfs = nfsFamilies({
    versions: ['4.1', '4.2'],
    stats: { ok: true, value: { io: [], requests: new Map(), ops: [], inGrace: false } },
    connections: 0,
    gracePeriodsStarted: 1,
    scrapeSeconds: 0.02,
  });
  addScrape(c, 'nfs-server', renderFamilies(nfs), ['job', 'pod', 'share', 'node']);
  return c;
}

describe('parseExposition', () => {
  it('reads names and label sets, unescaping values', () => {
    assert.deepEqual(parseExposition('# HELP a h\n# TYPE a gauge\na 1\nb{x="q\\"\\\\\\n",y="2"} 3\n\n'), [
      { name: 'a', labels: {} },
      { name: 'b', labels: { x: 'q"\\\n', y: '2' } },
    ]);
  });

  it('names the line it cannot read', () => {
    assert.throws(() => parseExposition('a 1\n{x="1"} 2'), /line 2 of the exposition is no sample/);
    assert.throws(() => parseExposition('a{x=1} 2'), /line 1 of the exposition has a malformed label/);
  });
});

describe('problemsOf', () => {
  it("accepts the NFS server's families, with its version and direction labels", async () => {
    assert.deepEqual(
      problemsOf(
        'nfs',
        'sum by (share, direction) (rate(leasehold_nfs_io_latency_seconds_total{direction="write",version="4.1"}[5m])) / sum by (share, direction) (rate(leasehold_nfs_io_operations_total[5m])) + max by (share) (leasehold_nfs_in_grace)',
        await catalogue(),
      ),
      [],
    );
    const [problem] = problemsOf('nfs', 'leasehold_nfs_io_operations_total{version="3"}', await catalogue());
    assert.match(problem ?? '', /matches no series nfs-server exports/);
  });

  it('accepts what the components export, with scraped and target labels', async () => {
    const c = await catalogue();
    assert.deepEqual(
      problemsOf(
        'ok',
        'sum by (share, reason) (increase(leasehold_agent_renew_failures_total{reason="timeout"}[5m])) + on (pod) sum by (pod) (leasehold_manager_failovers_total{result=~"replacement_lost|completed"})',
        c,
      ),
      [],
    );
  });

  it('names a metric no component exports, with the near names', async () => {
    const [problem, ...rest] = problemsOf(
      'alert A',
      'max(leasehold_manager_storm_guard_on) > 0',
      await catalogue(),
    );
    assert.deepEqual(rest, []);
    assert.match(problem ?? '', /^alert A: metric leasehold_manager_storm_guard_on is not exported/);
    assert.match(problem ?? '', /leasehold_manager_storm_guard_active/);
  });

  it('names a label the metric lacks, a value none of its series has, and a grouping label nothing carries', async () => {
    const c = await catalogue();
    assert.deepEqual(problemsOf('p', 'leasehold_manager_failovers_total{outcome="completed"}', c), [
      'p: leasehold_manager_failovers_total has no label "outcome" (manager exports result; the scrape adds job, instance, namespace, pod)',
    ]);
    const [value] = problemsOf('p', 'leasehold_manager_failovers_total{result="lost_replacement"}', c);
    assert.match(
      value ?? '',
      /matches no series manager exports \(values of result: completed, .*replacement_lost\)/,
    );
    assert.deepEqual(problemsOf('p', 'sum by (node) (leasehold_manager_leases_tracked)', c), [
      'p: groups by "node", a label none of its metrics carries',
    ]);
    // A regex matcher is tried against the scraped values (here: "60", not "60.0").
    assert.deepEqual(
      problemsOf('p', 'leasehold_manager_failover_phase_duration_seconds_bucket{le=~"60(\\\\.0)?"}', c),
      [],
    );
    assert.equal(
      problemsOf('p', 'leasehold_manager_failover_phase_duration_seconds_bucket{le="45"}', c).length,
      1,
    );
  });

  it('refuses a metric exported by two sources', async () => {
    const c = await catalogue();
    assert.throws(
      () => addScrape(c, 'other', 'leasehold_agent_fenced 0\n', []),
      /exported by both agent and other/,
    );
  });
});
