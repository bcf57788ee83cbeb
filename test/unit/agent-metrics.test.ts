/**
 * The agent's hand-written /metrics (agent-metrics.ts, process-metrics.ts, prom-text.ts):
 *  - a real parser accepts it: `promtool check metrics` (Debian package `prometheus`),
 *    with no lint finding beyond the three prom-client's own default names carry;
 *  - it has exactly the families prom-client exposed for the agent before, with the same
 *    types, HELP texts and label names (prom-client, configured as the agent configured
 *    it, is the reference);
 *  - the agent's own values follow its calls.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { AgentMetrics } from '../../agent/agent-metrics.ts';
import { ManualClock } from '../../lib/clock.ts';
import { renderFamilies, Histogram as TextHistogram } from '../../lib/prom-text.ts';

interface FamilyShape {
  type: string;
  help: string;
  labels: string[];
}

/** name -> type, HELP and the label names seen on its samples (le/quantile excluded). */
function families(text: string): Map<string, FamilyShape> {
  const out = new Map<string, FamilyShape>();
  let current: FamilyShape | undefined;
  for (const line of text.split('\n')) {
    const help = /^# HELP (\S+) (.*)$/.exec(line);
    if (help) {
      current = { type: '', help: help[2] as string, labels: [] };
      out.set(help[1] as string, current);
      continue;
    }
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type && current) {
      current.type = type[2] as string;
      continue;
    }
    const sample = /^[a-zA-Z_:][a-zA-Z0-9_:]*\{([^}]*)\}/.exec(line);
    if (sample && current) {
      for (const [, name] of (sample[1] as string).matchAll(/([a-zA-Z_]\w*)="/g)) {
        if (name !== 'le' && !current.labels.includes(name as string)) current.labels.push(name as string);
      }
    }
  }
  for (const f of out.values()) f.labels.sort();
  return out;
}

/**
 * What agent-metrics.ts registered with prom-client before issue 14 (plus the witness
 * families of issue 28, as prom-client would have them), fed the same calls.
 */
async function referenceText(): Promise<string> {
  const registry = new Registry();
  collectDefaultMetrics({
    register: registry,
    prefix: 'leasehold_agent_',
    eventLoopMonitoringPrecision: 1000,
  });
  const registers = [registry];
  new Counter({ name: 'leasehold_agent_renewals_total', help: 'Successful lease renewals', registers }).inc();
  new Counter({
    name: 'leasehold_agent_renew_failures_total',
    help: 'Failed renewal attempts by reason',
    labelNames: ['reason'],
    registers,
  }).inc({ reason: 'timeout' });
  new Histogram({
    name: 'leasehold_agent_renew_duration_seconds',
    help: 'Latency of successful renewal requests',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4],
    registers,
  }).observe(0.012);
  new Counter({
    name: 'leasehold_agent_renew_hedges_total',
    help: 'Hedged requests sent: a second renewal request on a fresh connection while the first was in flight',
    registers,
  }).inc(2);
  new Counter({
    name: 'leasehold_agent_renew_hedge_wins_total',
    help: 'Renewals proven by a hedged request',
    registers,
  }).inc();
  new Gauge({
    name: 'leasehold_agent_seconds_since_last_renewal',
    help: 'Seconds since the last successful renewal was sent (-1 before the first)',
    registers,
  }).set(0.5);
  new Gauge({
    name: 'leasehold_agent_lease_held',
    help: '1 while this agent holds the lease',
    registers,
  }).set(1);
  new Gauge({ name: 'leasehold_agent_fenced', help: '1 once this agent has fenced', registers }).set(0);
  new Gauge({
    name: 'leasehold_agent_serving_on_promises',
    help: '1 while the lease is proven by witness promises only (the last renewal is older than T)',
    registers,
  }).set(0);
  new Counter({
    name: 'leasehold_agent_witness_answers_total',
    help: 'Answers of witnesses, by request (promise, clearance) and answer',
    labelNames: ['request', 'answer'],
    registers,
  }).inc({ request: 'promise', answer: 'promised' });
  return registry.metrics();
}

function exercised(): { metrics: AgentMetrics; clock: ManualClock } {
  const clock = new ManualClock(50_000);
  const metrics = new AgentMetrics(clock);
  metrics.renewed(clock.now(), 0, false); // the acquisition: no renewal counted
  clock.advance(2_000);
  metrics.renewed(clock.now(), 12, true);
  metrics.failed('timeout');
  metrics.failed('http_503');
  metrics.failed('timeout');
  metrics.hedged();
  metrics.hedged();
  metrics.hedgeWon();
  metrics.setHeld(true);
  metrics.witnessAnswered('promise', 'promised');
  clock.advance(500);
  return { metrics, clock };
}

function promtool(text: string): { status: number | null; output: string } {
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (run.error) throw new Error(`promtool not runnable (apt-get install prometheus): ${run.error.message}`);
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

describe('agent metrics exposition', () => {
  it('promtool parses it and finds only the lint prom-client defaults also have', async () => {
    const ours = promtool(await exercised().metrics.registry.metrics());
    const reference = promtool(await referenceText());
    assert.doesNotMatch(ours.output, /error|parsing/i, ours.output);
    const lint = (o: string) => o.split('\n').filter(Boolean).sort();
    assert.deepEqual(lint(ours.output), lint(reference.output));
    assert.equal(lint(ours.output).length, 3, 'the three *_total gauges of the process defaults');
  });

  it('promtool does reject a malformed exposition (the check above can fail)', () => {
    const bad = promtool('# HELP x y\n# TYPE x gauge\nx{a="1" 2\n');
    assert.notEqual(bad.status, 0);
    assert.match(bad.output, /parsing error/);
  });

  it('has the families prom-client exposed, with the same types, HELP and label names', async () => {
    const ours = families(await exercised().metrics.registry.metrics());
    const reference = families(await referenceText());
    assert.deepEqual([...ours.keys()].sort(), [...reference.keys()].sort());
    for (const [name, shape] of reference) {
      const mine = ours.get(name);
      assert.equal(mine?.type, shape.type, `${name}: type`);
      assert.equal(mine?.help, shape.help, `${name}: HELP`);
      // A family without samples on one side (e.g. no GC yet) says nothing about labels.
      if (shape.labels.length > 0 && (mine?.labels.length ?? 0) > 0)
        assert.deepEqual(mine?.labels, shape.labels, `${name}: labels`);
    }
    assert.ok(reference.size >= 36, `reference has ${reference.size} families`);
  });

  it('values follow the calls', async () => {
    const { metrics } = exercised();
    const text = await metrics.registry.metrics();
    assert.equal(metrics.registry.contentType, 'text/plain; version=0.0.4; charset=utf-8');
    assert.match(text, /^leasehold_agent_renewals_total 1$/m);
    assert.match(text, /^leasehold_agent_renew_failures_total\{reason="timeout"\} 2$/m);
    assert.match(text, /^leasehold_agent_renew_failures_total\{reason="http_503"\} 1$/m);
    assert.match(text, /^leasehold_agent_renew_duration_seconds_bucket\{le="0.01"\} 0$/m);
    assert.match(text, /^leasehold_agent_renew_duration_seconds_bucket\{le="0.025"\} 1$/m);
    assert.match(text, /^leasehold_agent_renew_duration_seconds_bucket\{le="\+Inf"\} 1$/m);
    assert.match(text, /^leasehold_agent_renew_duration_seconds_sum 0.012$/m);
    assert.match(text, /^leasehold_agent_renew_duration_seconds_count 1$/m);
    assert.match(text, /^leasehold_agent_seconds_since_last_renewal 0.5$/m);
    assert.match(text, /^leasehold_agent_renew_hedges_total 2$/m);
    assert.match(text, /^leasehold_agent_renew_hedge_wins_total 1$/m);
    assert.match(text, /^leasehold_agent_lease_held 1$/m);
    assert.match(text, /^leasehold_agent_fenced 0$/m);
    assert.match(text, /^leasehold_agent_process_resident_memory_bytes [1-9]\d{6,}$/m);
    assert.match(
      text,
      /^leasehold_agent_nodejs_version_info\{version="v\d+\.\d+\.\d+",major="\d+",minor="\d+",patch="\d+"\} 1$/m,
    );
    metrics.setFenced();
    metrics.setHeld(false);
    const after = await metrics.registry.metrics();
    assert.match(after, /^leasehold_agent_fenced 1$/m);
    assert.match(after, /^leasehold_agent_lease_held 0$/m);
  });

  it('before any renewal: -1 seconds since, an empty latency histogram with every bucket, failures at 0', async () => {
    const text = await new AgentMetrics(new ManualClock(0)).registry.metrics();
    assert.match(text, /^leasehold_agent_seconds_since_last_renewal -1$/m);
    assert.equal(text.match(/^leasehold_agent_renew_duration_seconds_bucket\{le="[^"]+"\} 0$/gm)?.length, 11);
    // The fixed reasons at 0 (an increase() sees their first failure), no http_<status> yet.
    for (const reason of ['timeout', 'unreachable', 'conflict', 'server_check'])
      assert.match(text, new RegExp(`^leasehold_agent_renew_failures_total\\{reason="${reason}"\\} 0$`, 'm'));
    assert.doesNotMatch(text, /^leasehold_agent_renew_failures_total\{reason="http_/m);
  });

  it('escapes HELP and label values as the format requires; promtool reads them back', () => {
    const hist = new TextHistogram([0.1, 1]);
    hist.observe(0.5, { kind: 'a "quoted"\nvalue \\ here' });
    const text = renderFamilies([
      {
        name: 'x_info',
        help: 'back\\slash and\nnewline',
        type: 'gauge',
        samples: [{ labels: { v: 'say "hi"' }, value: 1 }],
      },
      { name: 'x_seconds', help: 'h', type: 'histogram', samples: hist.samples() },
      {
        name: 'x_inf',
        help: 'h',
        type: 'gauge',
        samples: [{ value: Number.POSITIVE_INFINITY }, { labels: { a: 'n' }, value: Number.NaN }],
      },
    ]);
    assert.match(text, /^# HELP x_info back\\\\slash and\\nnewline$/m);
    assert.match(text, /^x_info\{v="say \\"hi\\""\} 1$/m);
    assert.match(text, /^x_seconds_bucket\{kind="a \\"quoted\\"\\nvalue \\\\ here",le="1"\} 1$/m);
    assert.match(text, /^x_inf \+Inf$/m);
    const verdict = promtool(text);
    assert.equal(verdict.status, 0, verdict.output);
    assert.throws(() => new TextHistogram([1, 1]), /buckets must increase/);
  });
});
