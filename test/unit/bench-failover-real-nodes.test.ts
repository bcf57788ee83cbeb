/**
 * The real-node failover benchmark's pure parts: its command line
 * (bench/failover/real-node-args.ts) and the sim figure printed beside it, taken from
 * the newest sim result file on the same timings (bench/failover/sim-reference.ts).
 *   node --import tsx --test test/unit/bench-failover-real-nodes.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRealNodeBenchArgs } from '../../bench/failover/real-node-args.ts';
import { simReferenceOf } from '../../bench/failover/sim-reference.ts';

test('real-node bench args: defaults 5 crashes on 2 nodes, the Kubernetes defaults', () => {
  assert.deepEqual(parseRealNodeBenchArgs([]), {
    runs: 5,
    nodes: 2,
    adcSync: '1m',
    nodeMonitorGracePeriod: '40s',
    budgetS: 150,
    settleS: 0,
  });
  assert.deepEqual(
    parseRealNodeBenchArgs(['--runs', '3', '--nodes=3', '--adc-sync', '2s', '--budget', '90']),
    {
      runs: 3,
      nodes: 3,
      adcSync: '2s',
      nodeMonitorGracePeriod: '40s',
      budgetS: 90,
      settleS: 0,
    },
  );
});

test('real-node bench args: bad values and the sim-only options rejected, named', () => {
  const problem = (argv: string[]) => {
    const r = parseRealNodeBenchArgs(argv);
    assert.ok('problem' in r, `${argv.join(' ')} rejected: ${JSON.stringify(r)}`);
    return r.problem;
  };
  assert.match(problem(['--runs', '0']), /--runs=0: .*1 to 50/);
  assert.match(problem(['--runs', '51']), /--runs=51/);
  assert.match(problem(['--nodes', '1']), /--nodes=1: .*surviving node/);
  assert.match(problem(['--adc-sync', '1h']), /--adc-sync=1h/);
  assert.match(problem(['--node-monitor-grace', 'x']), /--node-monitor-grace=x/);
  assert.match(problem(['--budget', '5']), /--budget=5: .*>= 10/);
  assert.match(problem(['--settle=-1']), /--settle=-1: .*0 to 600/);
  assert.match(problem(['--modes', 'stock']), /--modes/);
  assert.match(problem(['--heartbeat', '2s']), /--heartbeat/);
});

const file = (date: string, adc: string, nmg: string, cts: number, mode = 'leasehold') =>
  JSON.stringify({
    date,
    runs: 10,
    adcSync: adc,
    nodeMonitorGracePeriod: nmg,
    load: { oneMinute: { mean: 1.45 } },
    results: [
      {
        mode,
        detection: { n: 10, p50: 5.07, p95: 5.63 },
        crashToServing: { n: 10, p50: cts, p95: cts + 2 },
        clientWriteGap: { n: 10, p50: cts, p95: cts + 2 },
      },
    ],
  });

test('simReferenceOf: the newest sim NFS-client file on the same timings with a leasehold result', () => {
  const ref = simReferenceOf(
    [
      {
        file: 'failover-nfs-client-v3-adc-1m-nmg-40s-hb-10s-leasehold.json',
        content: file('2026-12-01T18:58:23Z', '1m', '40s', 6.82),
      },
      {
        file: 'failover-nfs-client-v3-adc-1m-nmg-40s-hb-10s-five-modes.json',
        content: file('2026-12-01T10:00:00Z', '1m', '40s', 9.9),
      },
      {
        file: 'failover-nfs-client-v3-adc-2s-nmg-40s-hb-10s-leasehold.json',
        content: file('2026-12-01T20:00:00Z', '2s', '40s', 5.5),
      },
      {
        file: 'failover-nfs-client-v3-adc-1m-nmg-40s-hb-10s-stock.json',
        content: file('2026-12-01T21:00:00Z', '1m', '40s', 70, 'stock'),
      },
      {
        file: 'failover-real-nodes-nfs-client-v3-adc-1m-nmg-40s-leasehold.json',
        content: file('2026-12-01T22:00:00Z', '1m', '40s', 1),
      },
      { file: 'failover-nfs-client-v3-broken.json', content: '{not json' },
    ],
    { adcSync: '1m', nodeMonitorGracePeriod: '40s' },
  );
  assert.equal(ref?.file, 'failover-nfs-client-v3-adc-1m-nmg-40s-hb-10s-leasehold.json');
  assert.equal(ref?.crashToServing.p50, 6.82);
  assert.equal(ref?.loadMean, 1.45);
  assert.equal(simReferenceOf([], { adcSync: '1m', nodeMonitorGracePeriod: '40s' }), undefined);
});
