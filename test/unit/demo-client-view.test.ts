/**
 * The real-node demo's reading of the NFS client and its verdict (dev/demo/client-view.ts):
 * the stall and resume in seconds since the crash, the client's steps placed in time
 * order in the failover timeline, and a verdict that fails on each broken guarantee
 * (two ganesha at once, a missed server, the share left on the crashed node, writes
 * never resumed, an acknowledged write lost, a duplicate, a stale handle).
 *   node --import tsx --test test/unit/demo-client-view.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  type ClientView,
  clientErrorsLine,
  clientViewOf,
  demoVerdict,
  kernelClientViewOf,
  withClientSteps,
} from '../../dev/demo/client-view.ts';
import { checkReadBack, expectedRecord, stallOf } from '../../dev/kernel-client/workload-analysis.ts';
import type { WriteRunReport } from '../../dev/nfs-client/write-analysis.ts';

const CRASH = 1_000_000;

function report(over: Partial<WriteRunReport> = {}): WriteRunReport {
  return {
    writer: 1,
    recordSize: 64,
    acked: 500,
    clientWriteGaps: [
      {
        faultMs: CRASH,
        lastAck: { seq: 200, ms: CRASH - 30 },
        firstAck: { seq: 201, ms: CRASH + 7_235 },
        gapMs: 7_265,
        resumedAfterMs: 7_235,
      },
    ],
    ackedWritesLost: 0,
    lost: [],
    duplicates: [],
    outOfOrder: [],
    corrupt: [],
    trailingBytes: 0,
    ackSequenceBreaks: [],
    staleHandles: 0,
    errors: { timeout: 3, stale: 0, grace: 0, connection: 1, other: 0 },
    violations: [],
    ...over,
  };
}

test('clientViewOf: the stall and the resume in seconds since the crash, the gap between', () => {
  assert.deepEqual(clientViewOf(report(), CRASH), {
    stalledS: -0.03,
    resumedS: 7.24,
    gapS: 7.27,
    acked: 500,
    lost: 0,
    duplicates: 0,
    staleHandles: 0,
    violations: [],
  });
  const never = clientViewOf(
    report({ clientWriteGaps: [{ faultMs: CRASH, lastAck: { seq: 9, ms: CRASH - 5 } }] }),
    CRASH,
  );
  assert.equal(never.resumedS, undefined);
  assert.equal(never.gapS, undefined);
});

test('withClientSteps: the stall before the detection, the resume after the serving; an unknown at the end', () => {
  const steps = [
    { step: 'node real-1 crashed', seconds: 0, source: 'RealNode.crash' },
    { step: 'stale lease detected', seconds: 4.1, source: 'status.lastFailover' },
    { step: 'volume attached to real-2', seconds: undefined, source: 'CSI controller record' },
    { step: 'share served from real-2', seconds: 6.9, source: 'NFS server log: serving' },
    { step: 'NFS client writes resumed', seconds: 7.2, source: 'nfs-writer' },
  ];
  const view = clientViewOf(report(), CRASH);
  assert.deepEqual(
    withClientSteps(steps, view).map((s) => [s.step.slice(0, 28), s.seconds]),
    [
      ["NFS client's last acknowledg", -0.03],
      ['node real-1 crashed', 0],
      ['stale lease detected', 4.1],
      ['volume attached to real-2', undefined],
      ['share served from real-2', 6.9],
      ["NFS client's first acknowled", 7.24],
    ],
  );
  const unresumed: ClientView = { ...view, resumedS: undefined };
  assert.equal(withClientSteps(steps, unresumed).at(-1)?.seconds, undefined);
});

const good = { crashedNode: 'real-1', newNode: 'real-2', ganeshaOverlaps: 0, ganeshaSeen: 2 };

test('demoVerdict: ok for a safe failover', () => {
  assert.deepEqual(
    demoVerdict({ ...good, clients: [{ name: 'NFS client', view: clientViewOf(report(), CRASH) }] }),
    {
      ok: true,
      problems: [],
    },
  );
});

test('demoVerdict: each broken guarantee fails the demo, named', () => {
  const view = clientViewOf(report(), CRASH);
  const client = [{ name: 'NFS client', view }];
  const one = (v: typeof view) => [{ name: 'NFS client', view: v }];
  const fails = (f: Parameters<typeof demoVerdict>[0], re: RegExp) => {
    const v = demoVerdict(f);
    assert.equal(v.ok, false, JSON.stringify(f));
    assert.ok(
      v.problems.some((p) => re.test(p)),
      `${re} in ${JSON.stringify(v.problems)}`,
    );
  };
  fails({ ...good, ganeshaOverlaps: 1, clients: client }, /two servers at once/);
  fails({ ...good, ganeshaSeen: 1, clients: client }, /tracker missed a server/);
  fails({ ...good, newNode: 'real-1', clients: client }, /still on the crashed node real-1/);
  fails({ ...good, clients: one({ ...view, resumedS: undefined }) }, /never resumed/);
  fails({ ...good, clients: one({ ...view, lost: 3 }) }, /3 acknowledged writes lost/);
  fails({ ...good, clients: one({ ...view, duplicates: 2 }) }, /2 records written twice/);
  fails({ ...good, clients: one({ ...view, staleHandles: 1 }) }, /1 stale file handles/);
  fails(
    {
      ...good,
      clients: one(
        clientViewOf(report({ ackedWritesLost: 1, violations: ['1 acknowledged records lost'] }), CRASH),
      ),
    },
    /NFS client: 1 acknowledged records lost/,
  );
  fails({ ...good, clients: [] }, /no NFS client was watched/);
  fails(
    { ...good, clients: [...client, { name: 'kc2', view: { ...view, lost: 1 } }] },
    /kc2: 1 acknowledged writes lost/,
  );
});

test("clientErrorsLine: the client's failures from the crash to its resume, runs of one kind compacted", () => {
  const err = (ms: number, op: string, kind: 'timeout' | 'connection') =>
    ({ event: 'error', ms: CRASH + ms, seq: 1, kind, op, rc: -1, message: '' }) as const;
  const events = [
    err(-500, 'write', 'timeout'),
    { event: 'ack', ms: CRASH + 10, seq: 1, sentMs: CRASH } as const,
    err(2_010, 'write', 'timeout'),
    err(4_100, 'mount', 'timeout'),
    err(6_200, 'mount', 'timeout'),
    err(8_300, 'mount', 'connection'),
    err(99_000, 'write', 'timeout'),
  ];
  assert.equal(
    clientErrorsLine(events, CRASH, CRASH + 10_000),
    '2.01 s write timeout, 4.10..6.20 s mount timeout x2, 8.30 s mount connection',
  );
  assert.equal(clientErrorsLine([], CRASH, CRASH + 1), 'none');
});

test('kernelClientViewOf: the kernel writer stalled and resumed in seconds since the crash; ESTALE counts as stale handles', () => {
  const events = [
    { kind: 'ack', tag: 'kc1-write', seq: 7, atMs: CRASH - 40 },
    { kind: 'err', tag: 'kc1-write', n: 8, errno: 'ESTALE', op: 'write', atMs: CRASH + 900 },
    { kind: 'ack', tag: 'kc1-write', seq: 8, atMs: CRASH + 10 },
    { kind: 'ack', tag: 'kc1-write', seq: 9, atMs: CRASH + 18_330 },
  ] as const;
  // The ack 10 ms after the crash was in flight: no resumption (the replacement served at +7 s).
  const readBack = checkReadBack(
    [
      { kind: 'ack', tag: 'kc1-write', seq: 1, atMs: 0 },
      { kind: 'ack', tag: 'kc1-write', seq: 2, atMs: 0 },
    ],
    Buffer.concat([expectedRecord(1, 64), Buffer.alloc(64)]),
    64,
  );
  const view = kernelClientViewOf(stallOf(events, CRASH), stallOf(events, CRASH + 7_000), readBack, CRASH, [
    'lock granted to kc2',
  ]);
  assert.deepEqual(view, {
    acked: 2,
    lost: 1,
    duplicates: 0,
    staleHandles: 1,
    violations: ['lock granted to kc2'],
    stalledS: -0.04,
    resumedS: 18.33,
    gapS: 18.37,
  });
});
