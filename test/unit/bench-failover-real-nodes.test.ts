/**
 * The real-node failover benchmark's pure parts: its command line
 * (bench/failover/real-node-args.ts), the side-by-side table (real-node-table.ts) and
 * the stock mode's judgement of a capped sample and its reasons (real-stock-cap.ts).
 *   node --import tsx --test test/unit/bench-failover-real-nodes.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRealNodeBenchArgs } from '../../bench/failover/real-node-args.ts';
import { realNodeTable } from '../../bench/failover/real-node-table.ts';
import { judgeStockSample, stockCapReasons, stockResumePath } from '../../bench/failover/real-stock-cap.ts';
import { resumedAt, resumedGapMs } from '../../bench/failover/stats.ts';

test('real-node bench args: defaults 5 crashes on 2 nodes, the Kubernetes defaults', () => {
  assert.deepEqual(parseRealNodeBenchArgs([]), {
    runs: 5,
    nodes: 2,
    adcSync: '1m',
    nodeMonitorGracePeriod: '40s',
    budgetS: 150,
    settleS: 0,
    modes: ['leasehold'],
    stockBudgetS: 600,
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
      modes: ['leasehold'],
      stockBudgetS: 600,
    },
  );
  const both = parseRealNodeBenchArgs(['--modes', 'leasehold,stock', '--stock-budget', '300']);
  assert.ok(!('problem' in both));
  assert.deepEqual([both.modes, both.stockBudgetS], [['leasehold', 'stock'], 300]);
  const stockFirst = parseRealNodeBenchArgs(['--modes=stock,leasehold']);
  assert.ok(!('problem' in stockFirst));
  assert.deepEqual(stockFirst.modes, ['stock', 'leasehold'], 'the order given is the order run');
  const all = parseRealNodeBenchArgs(['--modes=longhorn,leasehold-va,leasehold-oos,leasehold,stock']);
  assert.ok(!('problem' in all));
  assert.deepEqual(all.modes, ['longhorn', 'leasehold-va', 'leasehold-oos', 'leasehold', 'stock']);
});

test('real-node bench args: bad values and unknown options rejected, named', () => {
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
  assert.match(
    problem(['--modes', 'nfs']),
    /--modes=nfs: "nfs" is not a real-node mode \(leasehold, leasehold-va, longhorn, leasehold-oos, leasehold-witnesses, stock/,
  );
  assert.match(problem(['--modes', 'leasehold,,stock']), /--modes=leasehold,,stock: "" is not/);
  assert.match(problem(['--modes', 'stock,stock']), /--modes=stock,stock: a mode may be named once/);
  assert.match(
    problem(['--modes', 'leasehold,leasehold-witnesses']),
    /leasehold-witnesses needs --nodes 3 or more/,
  );
  const witnesses = parseRealNodeBenchArgs(['--nodes', '3', '--modes', 'leasehold,leasehold-witnesses']);
  assert.ok(!('problem' in witnesses), JSON.stringify(witnesses));
  assert.match(problem(['--stock-budget', '30']), /--stock-budget=30: .*>= 60/);
  assert.match(problem(['--stock-budget', 'x']), /--stock-budget=x/);
  // Options the real kubelet's heartbeat or the one system make meaningless: unknown.
  assert.match(problem(['--share', 'toy']), /--share/);
  assert.match(problem(['--heartbeat', '2s']), /--heartbeat/);
});

test('judgeStockSample: measured only from a resumed flow after the crash, within the budget; else capped or rejected', () => {
  const flow = (fromMs: number, n = 20) => Array.from({ length: n }, (_, i) => fromMs + i * 20);
  assert.deepEqual(judgeStockSample(1_000, [...flow(0, 5), ...flow(73_500)], 450_000, 20), {
    outcome: 'measured',
    writesResumedS: 72.5,
  });
  // The first real run: one write in flight at the crash acknowledged 0.02 s after it, then none.
  assert.deepEqual(judgeStockSample(1_000, [...flow(0, 50), 1_020], 450_000, 20), {
    outcome: 'capped',
    reason: 'not served again within 450 s',
  });
  assert.deepEqual(
    judgeStockSample(1_000, [1_020, ...flow(200_000)], 450_000, 20),
    { outcome: 'measured', writesResumedS: 199 },
    'the lone in-flight ack is not the resumption; the flow after the stall is',
  );
  assert.equal(judgeStockSample(1_000, flow(1_000, 19), 450_000, 20).outcome, 'capped', '19 of 20 acks');
  assert.equal(judgeStockSample(1_000, flow(452_000), 450_000, 20).outcome, 'capped', 'a flow after the cap');
  const split = [...flow(5_000, 10), ...flow(9_000, 10)];
  assert.equal(resumedAt(split, 1_000, 20), undefined, 'a stall over the tolerance restarts the count');
  assert.equal(resumedGapMs([...flow(0, 3), 1_020, 200_000], 200_000), 198_980);
  assert.ok(Number.isNaN(resumedGapMs([5], 5)));
});

test('stockCapReasons: Multi-Attach, a pod stuck Terminating and the attachment on the dead node, each named', () => {
  const reasons = stockCapReasons({
    deadNode: 'real-1',
    budgetS: 450,
    events: [
      { reason: 'Scheduled', message: 'assigned', object: 'stockreal-b' },
      {
        reason: 'FailedAttachVolume',
        message: 'Multi-Attach error for volume "pv-stockreal" Volume is already used by pod(s) stockreal-a',
        object: 'stockreal-b',
      },
    ],
    pods: [
      { name: 'stockreal-a', node: 'real-1', terminating: true, phase: 'Running' },
      { name: 'stockreal-b', node: 'real-2', terminating: false, phase: 'Pending' },
    ],
    attachments: [{ node: 'real-1', attached: true, deleting: false }],
  });
  assert.match(reasons[0] ?? '', /capped: not served again within 450 s of the crash of real-1/);
  assert.ok(reasons.some((r) => /event FailedAttachVolume \(stockreal-b: Multi-Attach error/.test(r)));
  assert.ok(
    reasons.some((r) => /1 pod\(s\) stuck Terminating on the dead node real-1 \(stockreal-a\)/.test(r)),
  );
  assert.ok(reasons.some((r) => /1 replacement\(s\) Pending \(stockreal-b on real-2\)/.test(r)));
  assert.ok(reasons.some((r) => /VolumeAttachment still on the dead node real-1 \(attached true/.test(r)));
  assert.ok(!reasons.some((r) => /Scheduled/.test(r)), 'only attach and scheduling reasons');
  const none = stockCapReasons({ deadNode: 'real-1', budgetS: 60, events: [], pods: [], attachments: [] });
  assert.match(none.at(-1) ?? '', /the API shows no reason/);
});

test('stockResumePath: a force-detach line names that path; else the detach seen, or none', () => {
  assert.match(
    stockResumePath({
      evictedS: 70,
      oldAttachmentGoneS: 431,
      controllerLog: [
        'I1202 ... attacherDetacher.DetachVolume started: node "real-1" ... This volume is not safe to detach, but maxWaitForUnmountDuration 6m0s expired, force detaching',
      ],
    }),
    /force-detach .* maxWaitForUnmountDuration \(6 min\), old attachment gone 431 s/,
  );
  assert.match(
    stockResumePath({ evictedS: 70, oldAttachmentGoneS: 95, controllerLog: [] }),
    /removed 95 s after the crash without a force-detach line .* eviction at 70 s/,
  );
  assert.match(stockResumePath({ controllerLog: [] }), /no detach of the old node seen/);
});

test('realNodeTable: the modes side by side, capped counted, missing figures as -', () => {
  const s = (p50?: number, p95?: number) => ({ n: p50 === undefined ? 0 : 2, p50, p95 });
  const lines = realNodeTable([
    {
      label: 'leasehold, real nodes (this run)',
      detection: s(4.8, 6),
      crashToServing: s(9, 9.7),
      clientWriteGap: s(8.9, 9.7),
      measured: 2,
      total: 2,
      capped: 0,
      budgetS: 150,
    },
    {
      label: 'stock, real nodes (this run)',
      detection: s(41, 42),
      crashToServing: s(),
      clientWriteGap: s(),
      measured: 0,
      total: 2,
      capped: 2,
      budgetS: 450,
    },
  ]);
  assert.equal(lines.length, 3);
  assert.match(
    lines[0] ?? '',
    /^run +detection p50\/p95 +crash-to-serving p50\/p95 +clientWriteGap p50\/p95 +measured$/,
  );
  assert.match(
    lines[1] ?? '',
    /^leasehold, real nodes \(this run\) +4\.80 +6\.00 +9\.00 +9\.70 +8\.90 +9\.70 +2\/2$/,
  );
  assert.match(
    lines[2] ?? '',
    /^stock, real nodes \(this run\) +41\.00 +42\.00 +- +- +- +- +0\/2, 2 capped at 450 s$/,
  );
  // The columns line up: each figure right-aligned in 6 characters.
  assert.equal((lines[1] ?? '').indexOf('4.80') + 4, (lines[2] ?? '').indexOf('41.00') + 5);
});
