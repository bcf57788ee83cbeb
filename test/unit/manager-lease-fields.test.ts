import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Lease, V1Pod } from '@kubernetes/client-node';
import { fromWire, toWire } from '../../lib/lease-record.ts';
import {
  agentDurationMs,
  durationFloorMs,
  effectiveDurationMs,
  MAX_TIMER_MS,
  shareManagerDurationMs,
  timerDelayMs,
} from '../../manager/detection/lease-duration.ts';
import { inspectLease, OddFieldMemory } from '../../manager/detection/lease-fields.ts';
import { judge, observe } from '../../manager/detection/staleness.ts';
import type { ShareManager } from '../../manager/share-model/share-manager-spec.ts';

const defaults = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };

function wire(spec: Record<string, unknown> = {}, annotations: Record<string, unknown> = {}): V1Lease {
  return {
    metadata: {
      namespace: 'ns',
      name: 'vol',
      resourceVersion: '7',
      labels: { 'leasehold.dev/share-manager': 'vol' },
      annotations: { 'leasehold.dev/holder-node': 'node-a', ...annotations } as Record<string, string>,
    },
    spec: {
      holderIdentity: 'vol-abc12',
      leaseDurationSeconds: 6,
      acquireTime: '2026-01-01T00:00:00.000000Z' as unknown as Date,
      renewTime: '2026-01-01T00:00:02.000000Z' as unknown as Date,
      leaseTransitions: 3,
      ...spec,
    } as V1Lease['spec'],
  };
}

test('a well-formed lease passes unchanged, with nothing odd', () => {
  const raw = fromWire(wire());
  const { lease, odd } = inspectLease(raw, 6000);
  assert.deepEqual(odd, []);
  assert.deepEqual({ ...lease, wire: undefined }, { ...raw, wire: undefined });
});

/** [case, wire, field expected odd, check of the cleaned record]. */
const HOSTILE: [string, V1Lease, string, (l: ReturnType<typeof inspectLease>['lease']) => void][] = [
  [
    'duration huge (int32 max): honoured, said',
    wire({ leaseDurationSeconds: 2 ** 31 - 1 }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 2 ** 31 - 1),
  ],
  [
    'duration beyond int32',
    wire({ leaseDurationSeconds: 2 ** 31 }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 0),
  ],
  [
    'duration zero',
    wire({ leaseDurationSeconds: 0 }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 0),
  ],
  [
    'duration negative',
    wire({ leaseDurationSeconds: -6 }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 0),
  ],
  [
    'duration missing',
    wire({ leaseDurationSeconds: undefined }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 0),
  ],
  [
    'duration fractional',
    wire({ leaseDurationSeconds: 6.5 }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 0),
  ],
  [
    'duration NaN',
    wire({ leaseDurationSeconds: Number.NaN }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 0),
  ],
  [
    'duration a string',
    wire({ leaseDurationSeconds: '6' }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 0),
  ],
  [
    'duration shorter than the floor',
    wire({ leaseDurationSeconds: 1 }),
    'spec.leaseDurationSeconds',
    (l) => assert.equal(l.durationSeconds, 1),
  ],
  [
    'holder not a pod name',
    wire({ holderIdentity: 'Not A/Pod' }),
    'spec.holderIdentity',
    (l) => assert.equal(l.holder, 'Not A/Pod'),
  ],
  [
    'holder not a string',
    wire({ holderIdentity: 42 }),
    'spec.holderIdentity',
    (l) => assert.equal(l.holder, '(not a string) 42'),
  ],
  [
    'holder-node missing',
    wire({}, { 'leasehold.dev/holder-node': undefined }),
    'metadata.annotations[leasehold.dev/holder-node]',
    (l) => assert.equal(l.holderNode, ''),
  ],
  [
    'holder-node garbage',
    wire({}, { 'leasehold.dev/holder-node': 'Node_A!' }),
    'metadata.annotations[leasehold.dev/holder-node]',
    (l) => assert.equal(l.holderNode, ''),
  ],
  [
    'holder-node 300 characters',
    wire({}, { 'leasehold.dev/holder-node': 'a'.repeat(300) }),
    'metadata.annotations[leasehold.dev/holder-node]',
    (l) => assert.equal(l.holderNode, ''),
  ],
  [
    'delinquent garbage: still delinquent',
    wire({}, { 'leasehold.dev/delinquent': 'yes', 'leasehold.dev/failover-by': 'mgr-1' }),
    'metadata.annotations[leasehold.dev/delinquent]',
    (l) => {
      assert.equal(l.delinquentSince, 'yes');
      assert.equal(l.failoverBy, 'mgr-1');
    },
  ],
  [
    'delinquent, failover-by missing',
    wire({}, { 'leasehold.dev/delinquent': '2026-01-01T00:00:00.000Z' }),
    'metadata.annotations[leasehold.dev/failover-by]',
    (l) => assert.equal(l.failoverBy, undefined),
  ],
  [
    'delinquent, failover-by naming nobody',
    wire({}, { 'leasehold.dev/delinquent': '2026-01-01T00:00:00.000Z', 'leasehold.dev/failover-by': ' ?? ' }),
    'metadata.annotations[leasehold.dev/failover-by]',
    (l) => assert.equal(l.failoverBy, undefined),
  ],
  [
    'failover-by garbage, not delinquent',
    wire({}, { 'leasehold.dev/failover-by': 'Bad Name' }),
    'metadata.annotations[leasehold.dev/failover-by]',
    (l) => assert.equal(l.failoverBy, undefined),
  ],
  [
    'failover-by-node not a node name',
    wire(
      {},
      {
        'leasehold.dev/delinquent': '2026-01-01T00:00:00.000Z',
        'leasehold.dev/failover-by': 'mgr-1',
        'leasehold.dev/failover-by-node': 'mgr-1@Not A Node',
      },
    ),
    'metadata.annotations[leasehold.dev/failover-by-node]',
    (l) => {
      assert.equal(l.failoverBy, 'mgr-1');
      assert.equal(l.failoverByNode, undefined);
    },
  ],
  [
    'renewTime garbage',
    wire({ renewTime: 'yesterday' }),
    'spec.renewTime',
    (l) => assert.equal(l.renewTime, undefined),
  ],
  [
    'acquireTime garbage',
    wire({ acquireTime: 'soon' }),
    'spec.acquireTime',
    (l) => assert.equal(l.acquireTime, undefined),
  ],
  [
    'leaseTransitions negative',
    wire({ leaseTransitions: -1 }),
    'spec.leaseTransitions',
    (l) => assert.equal(l.transitions, 0),
  ],
  [
    'leaseTransitions fractional',
    wire({ leaseTransitions: 1.5 }),
    'spec.leaseTransitions',
    (l) => assert.equal(l.transitions, 0),
  ],
];

for (const [name, w, field, check] of HOSTILE) {
  test(`hostile lease: ${name}`, () => {
    const { lease, odd } = inspectLease(fromWire(w), 6000);
    assert.deepEqual(
      odd.map((o) => o.field),
      [field],
      `exactly one odd field: ${JSON.stringify(odd)}`,
    );
    assert.ok((odd[0]?.instead.length ?? 0) > 10, 'says what the manager does instead');
    check(lease);
    // The cleaned record can always be judged and written back (no throw, no invalid value).
    const obs = observe(undefined, lease, 0, 6000).observation;
    assert.ok(Number.isFinite(obs.durationMs) && obs.durationMs >= 6000);
    judge(obs, { healthy: true, healthySince: 0 }, 1e9);
    const back = JSON.parse(JSON.stringify(toWire(lease))) as V1Lease;
    const d = back.spec?.leaseDurationSeconds;
    assert.ok(d === undefined || (Number.isInteger(d) && d > 0), `written duration ${d}`);
    const t = back.spec?.leaseTransitions;
    assert.ok(t === undefined || (Number.isInteger(t) && t >= 0), `written transitions ${t}`);
  });
}

test('a free lease needs no holder node', () => {
  const { odd } = inspectLease(
    fromWire(wire({ holderIdentity: '' }, { 'leasehold.dev/holder-node': undefined })),
    6000,
  );
  assert.deepEqual(odd, []);
});

test('each odd value is reported once per lease; a new odd value is reported again; forget resets', () => {
  const memory = new OddFieldMemory();
  const odd = inspectLease(fromWire(wire({ leaseDurationSeconds: 1 })), 6000).odd;
  assert.equal(memory.fresh('ns/vol', odd).length, 1);
  assert.equal(memory.fresh('ns/vol', odd).length, 0);
  assert.equal(memory.fresh('ns/other', odd).length, 1, 'per lease');
  const two = inspectLease(fromWire(wire({ leaseDurationSeconds: 2 })), 6000).odd;
  assert.equal(memory.fresh('ns/vol', two).length, 1, 'per odd value');
  memory.forget('ns/vol');
  assert.equal(memory.fresh('ns/vol', odd).length, 1);
});

test('a lease changing its odd value on every event is logged a bounded number of times', () => {
  const memory = new OddFieldMemory();
  let lines = 0;
  for (let i = 0; i < 1000; i++)
    lines += memory.fresh(
      'ns/vol',
      inspectLease(fromWire(wire({ renewTime: `garbage-${i}` })), 6000).odd,
    ).length;
  assert.equal(lines, OddFieldMemory.LIMIT + 1, 'the limit, then one line saying so');
});

// ---- the duration floor ----

function sm(lease?: Record<string, string>, extra: Record<string, unknown> = {}): ShareManager {
  return {
    metadata: { namespace: 'ns', name: 'vol' },
    spec: { volume: { pvc: 'p' }, server: { image: 'i' }, ...(lease ? { lease } : {}), ...extra },
  } as ShareManager;
}

function podWithAgentDuration(value: string | undefined): V1Pod {
  return {
    spec: {
      initContainers: [
        { name: 'agent', env: value === undefined ? [] : [{ name: 'LEASEHOLD_LEASE_DURATION', value }] },
      ],
      containers: [{ name: 'server' }],
    },
  };
}

test('the floor: the ShareManager duration, the default when unknown, never below the holder pod agent', () => {
  assert.equal(shareManagerDurationMs(undefined, defaults), 6000, 'unknown ShareManager: the default');
  assert.equal(shareManagerDurationMs(sm(), defaults), 6000, 'unset: the default');
  assert.equal(
    shareManagerDurationMs(sm({ duration: '20s', renewInterval: '5s', renewDeadline: '15s' }), defaults),
    20_000,
  );
  // An invalid spec (D < T): the larger of the default and the duration it names.
  assert.equal(shareManagerDurationMs(sm({ duration: '3s', renewDeadline: '10s' }), defaults), 6000);
  assert.equal(shareManagerDurationMs(sm({ duration: '30s', renewDeadline: '40s' }), defaults), 30_000);
  assert.equal(shareManagerDurationMs({ metadata: {} } as ShareManager, defaults), 6000, 'no spec at all');
  assert.equal(
    shareManagerDurationMs(sm({ duration: 20 } as unknown as Record<string, string>), defaults),
    6000,
    'a spec of the wrong shape: the default, no throw',
  );
  assert.equal(agentDurationMs(podWithAgentDuration('12s')), 12_000);
  assert.equal(agentDurationMs(podWithAgentDuration('garbage')), undefined);
  assert.equal(agentDurationMs(podWithAgentDuration(undefined)), undefined);
  assert.equal(agentDurationMs(undefined), undefined);
  // A pod created before the spec was shortened keeps its agent's longer D.
  assert.equal(durationFloorMs(sm({ duration: '6s' }), podWithAgentDuration('20s'), defaults), 20_000);
  assert.equal(
    durationFloorMs(sm({ duration: '10s', renewDeadline: '8s' }), podWithAgentDuration('6s'), defaults),
    10_000,
  );
});

test('effective duration: the floor unless the Lease names a longer valid one; timers are clamped', () => {
  const table: [unknown, number][] = [
    [1, 6000],
    [6, 6000],
    [7, 7000],
    [2 ** 31 - 1, (2 ** 31 - 1) * 1000],
    [2 ** 31, 6000],
    [0, 6000],
    [-1, 6000],
    [1.5, 6000],
    [Number.NaN, 6000],
    [Number.POSITIVE_INFINITY, 6000],
    ['60', 6000],
    [undefined, 6000],
    [null, 6000],
  ];
  for (const [seconds, ms] of table) assert.equal(effectiveDurationMs(seconds, 6000), ms, String(seconds));
  assert.equal(timerDelayMs(1e13), MAX_TIMER_MS);
  assert.equal(timerDelayMs(-5), 0);
  assert.equal(timerDelayMs(Number.NaN), MAX_TIMER_MS);
  assert.equal(timerDelayMs(1234), 1234);
});

test('failover-by-node counts only when written for the manager failover-by names, and round-trips', () => {
  const marked = {
    'leasehold.dev/delinquent': '2026-01-01T00:00:00.000Z',
    'leasehold.dev/failover-by': 'mgr-1',
  };
  const own = fromWire(wire({}, { ...marked, 'leasehold.dev/failover-by-node': 'mgr-1@node-b' }));
  assert.equal(own.failoverByNode, 'node-b');
  assert.deepEqual(inspectLease(own, 6000).odd, []);
  // An earlier owner's value, left by a manager that does not write it: not this owner's node.
  assert.equal(
    fromWire(wire({}, { ...marked, 'leasehold.dev/failover-by-node': 'mgr-0@node-a' })).failoverByNode,
    undefined,
  );
  assert.equal(
    fromWire(wire({}, { ...marked, 'leasehold.dev/failover-by-node': 'node-a' })).failoverByNode,
    undefined,
  );
  assert.equal(
    fromWire(wire({}, { 'leasehold.dev/failover-by-node': 'mgr-1@node-b' })).failoverByNode,
    undefined,
  );
  // Written as <manager>@<node>; a takeover's new owner replaces both.
  const taken = toWire({ ...own, failoverBy: 'mgr-2', failoverByNode: 'node-c' });
  assert.equal(taken.metadata?.annotations?.['leasehold.dev/failover-by-node'], 'mgr-2@node-c');
  assert.equal(fromWire(taken).failoverByNode, 'node-c');
  const cleared = toWire({ ...own, failoverByNode: undefined });
  assert.equal(cleared.metadata?.annotations?.['leasehold.dev/failover-by-node'], undefined);
});
