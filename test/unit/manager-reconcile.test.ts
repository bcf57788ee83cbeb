import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { fromWire } from '../../lib/lease-record.ts';
import { decideShareManager, type ShareManagerSnapshot } from '../../manager/reconcile-share-manager.ts';
import { resolveSpec, type ShareManager } from '../../manager/share-manager-spec.ts';

const defaults = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };
const sm: ShareManager = {
  metadata: { name: 'vol', namespace: 'ns', uid: 'u', generation: 1 },
  spec: { volume: { pvc: 'pvc' }, server: { image: 'img' } },
};
const lease = (holder: string, delinquent?: string) =>
  fromWire({
    metadata: {
      namespace: 'ns',
      name: 'vol',
      resourceVersion: '5',
      annotations: delinquent ? { 'leasehold.dev/delinquent': delinquent } : {},
    },
    spec: { holderIdentity: holder, leaseDurationSeconds: 6 },
  });
const pod = (name: string, phase = 'Running', node = 'n1', request?: string): V1Pod => ({
  metadata: {
    name,
    uid: `${name}-uid`,
    annotations: request ? { 'leasehold.dev/pod-request': request } : {},
  },
  spec: { containers: [], nodeName: node },
  status: { phase },
});

function snap(over: Partial<ShareManagerSnapshot> = {}): ShareManagerSnapshot {
  const s = over.sm ?? sm;
  return {
    sm: s,
    resolved: resolveSpec(s.spec, defaults),
    lease: lease('vol-a'),
    serviceKnown: true,
    pods: [pod('vol-a')],
    now: 1000,
    podRequestSeenAt: undefined,
    podCreateTimeoutMs: 30_000,
    failoverRunning: false,
    newRequestId: 'req-2',
    ...over,
  };
}

test('a running share manager whose status is current needs nothing', () => {
  const current = {
    ...sm,
    status: {
      state: 'Running' as const,
      message: '',
      node: 'n1',
      pod: 'vol-a',
      leaseHolder: 'vol-a',
      observedGeneration: 1,
    },
  };
  assert.deepEqual(decideShareManager(snap({ sm: current })), []);
});

test('a new share manager gets a lease, a service, a pod claim and status Pending', () => {
  const actions = decideShareManager(snap({ lease: undefined, serviceKnown: false, pods: [] }));
  assert.deepEqual(
    actions.map((a) => a.kind),
    ['createLease', 'ensureService', 'claimPodCreation', 'setStatus'],
  );
  assert.deepEqual(actions[0], { kind: 'createLease', durationSeconds: 6 });
  assert.equal(actions[3]?.kind === 'setStatus' && actions[3].status.state, 'Pending');
});

test('an outstanding pod request by another manager is waited for, then retried after the timeout', () => {
  const requested = { ...sm, status: { podRequest: { id: 'req-1', by: 'm2' } } };
  const waiting = decideShareManager(snap({ sm: requested, pods: [], podRequestSeenAt: 0, now: 10_000 }));
  assert.deepEqual(waiting[0], {
    kind: 'requeueAfter',
    ms: 20_000,
    reason: 'pod request req-1 by m2 pending',
  });
  const retried = decideShareManager(snap({ sm: requested, pods: [], podRequestSeenAt: 0, now: 31_000 }));
  assert.deepEqual(retried[0], { kind: 'claimPodCreation', requestId: 'req-2' });
  const fulfilledThenEnded = decideShareManager(
    snap({ sm: requested, pods: [pod('vol-a', 'Failed', 'n1', 'req-1')], now: 1 }),
  );
  assert.deepEqual(
    fulfilledThenEnded.map((a) => a.kind),
    ['deletePod', 'claimPodCreation', 'setStatus'],
  );
});

test('during a failover no pod is created or deleted', () => {
  const actions = decideShareManager(
    snap({ lease: lease('vol-a', '2026-01-01T00:00:00Z'), pods: [pod('vol-a', 'Failed')] }),
  );
  assert.deepEqual(
    actions.map((a) => a.kind),
    ['setStatus'],
  );
  assert.equal(actions[0]?.kind === 'setStatus' && actions[0].status.state, 'FailingOver');
});

test('an invalid spec sets status Error and touches nothing else', () => {
  const bad = { ...sm, spec: { ...sm.spec, lease: { duration: '3s' } } };
  const actions = decideShareManager(snap({ sm: bad, lease: undefined, serviceKnown: false, pods: [] }));
  assert.equal(actions.length, 1);
  assert.equal(actions[0]?.kind, 'setStatus');
  assert.equal(actions[0]?.kind === 'setStatus' && actions[0].status.state, 'Error');
});

test('a pod not holding the lease is Starting; nothing is decided before the lease cache syncs', () => {
  const actions = decideShareManager(snap({ lease: lease('') }));
  assert.equal(actions[0]?.kind === 'setStatus' && actions[0].status.state, 'Starting');
  assert.deepEqual(decideShareManager(snap({ lease: 'unknown' })), []);
});
