import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Pod, V1Service } from '@kubernetes/client-node';
import { fromWire, toWire } from '../../lib/lease-record.ts';
import {
  decideShareManager,
  fencingCondition,
  type ShareManagerSnapshot,
} from '../../manager/reconciliation/decide-reconcile.ts';
import { serviceDrift, servicePorts, serviceSpec } from '../../manager/reconciliation/service-spec.ts';
import { resolveSpec, type ShareManager } from '../../manager/share-model/share-manager-spec.ts';

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

/** The share's own Service at `clusterIP` as the API server would return it. */
const ownService = (clusterIP: string): V1Service => ({
  metadata: { name: 'vol', namespace: 'ns', resourceVersion: '7' },
  spec: { clusterIP },
});

/** A snapshot; the ShareManager's Fencing condition is current unless `over.sm` has conditions. */
function snap(over: Partial<ShareManagerSnapshot> = {}): ShareManagerSnapshot {
  const given = over.sm ?? sm;
  const resolved = resolveSpec(given.spec, defaults);
  const conditions =
    given.status?.conditions ?? (resolved.ok ? [fencingCondition(resolved.fenceAction)] : []);
  const s = { ...given, status: { ...given.status, conditions } };
  return {
    resolved,
    lease: lease('vol-a'),
    service: ownService('10.96.0.20'),
    serviceDrift: [],
    endpointSlice: undefined,
    pods: [pod('vol-a')],
    now: 1000,
    podRequestSeenAt: undefined,
    podCreateTimeoutMs: 30_000,
    failoverRunning: false,
    newRequestId: 'req-2',
    ...over,
    sm: s,
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
  const actions = decideShareManager(snap({ lease: undefined, service: undefined, pods: [] }));
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
    snap({ sm: requested, lease: lease(''), pods: [pod('vol-a', 'Failed', 'n1', 'req-1')], now: 1 }),
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
  const actions = decideShareManager(snap({ sm: bad, lease: undefined, service: undefined, pods: [] }));
  assert.equal(actions.length, 1);
  assert.equal(actions[0]?.kind, 'setStatus');
  assert.equal(actions[0]?.kind === 'setStatus' && actions[0].status.state, 'Error');
});

test('a pod not holding the lease is Starting; nothing is decided before the lease cache syncs', () => {
  const actions = decideShareManager(snap({ lease: lease('') }));
  assert.equal(actions[0]?.kind === 'setStatus' && actions[0].status.state, 'Starting');
  assert.deepEqual(decideShareManager(snap({ lease: 'unknown' })), []);
});

const ended = (name: string, phase: 'Failed' | 'Succeeded', running: string[] = []): V1Pod => {
  const state = (c: string) =>
    running.includes(c)
      ? { running: { startedAt: new Date(0) } }
      : { terminated: { exitCode: phase === 'Failed' ? 1 : 0 } };
  const p = pod(name, phase);
  p.status = {
    phase,
    initContainerStatuses: [
      { name: 'agent', image: 'a', imageID: '', ready: false, restartCount: 0, state: state('agent') },
    ],
    containerStatuses: [
      { name: 'server', image: 's', imageID: '', ready: false, restartCount: 0, state: state('server') },
    ],
  };
  return p;
};

test('the lease of a holder pod the kubelet reported ended is freed by CAS; the pod is deleted after', () => {
  for (const phase of ['Failed', 'Succeeded'] as const) {
    const held = lease('vol-a');
    const actions = decideShareManager(snap({ lease: held, pods: [ended('vol-a', phase)] }));
    assert.deepEqual(
      actions.map((a) => a.kind),
      ['releaseLease', 'claimPodCreation', 'setStatus'],
      phase,
    );
    assert.deepEqual(actions[0], { kind: 'releaseLease', lease: held, pod: 'vol-a', phase });
    // exactly the version seen: the executor's CAS
    assert.equal(actions[0]?.kind === 'releaseLease' && actions[0].lease.resourceVersion, '5');
    // freed: the next pass deletes the ended pod and frees nothing
    const next = decideShareManager(snap({ lease: lease(''), pods: [ended('vol-a', phase)] }));
    assert.deepEqual(
      next.map((a) => a.kind),
      ['deletePod', 'claimPodCreation', 'setStatus'],
      phase,
    );
  }
});

test('the lease is not freed for a running, deleted, absent or half-ended holder, nor when delinquent', () => {
  const deleting = pod('vol-a');
  deleting.metadata = { ...deleting.metadata, deletionTimestamp: new Date(0) };
  const cases: [string, Partial<ShareManagerSnapshot>][] = [
    ['running', { pods: [pod('vol-a')] }],
    ['deleted (force-deleted: containers may still run)', { pods: [deleting] }],
    ['gone from the cache', { pods: [] }],
    [
      'Failed but the sidecar reported running (pod GC, not the kubelet)',
      { pods: [ended('vol-a', 'Failed', ['agent'])] },
    ],
    ['Failed but the server reported running', { pods: [ended('vol-a', 'Failed', ['server'])] }],
    ['an ended pod that is not the holder', { lease: lease('vol-b'), pods: [ended('vol-a', 'Failed')] }],
    ['delinquent', { lease: lease('vol-a', '2026-01-01T00:00:00Z'), pods: [ended('vol-a', 'Failed')] }],
  ];
  for (const [what, over] of cases) {
    const kinds = decideShareManager(snap(over)).map((a) => a.kind);
    assert.ok(!kinds.includes('releaseLease'), what);
  }
  // A half-ended holder is not deleted either while the lease names it (its name is the evidence).
  const halfEnded = decideShareManager(snap({ pods: [ended('vol-a', 'Failed', ['agent'])] }));
  assert.ok(!halfEnded.some((a) => a.kind === 'deletePod'));
  const otherEnded = decideShareManager(snap({ lease: lease('vol-b'), pods: [ended('vol-a', 'Failed')] }));
  assert.equal(otherEnded[0]?.kind, 'deletePod');
});

test('a lease freed while this manager runs a failover machine (mark in flight) is still freed', () => {
  const actions = decideShareManager(snap({ failoverRunning: true, pods: [ended('vol-a', 'Failed')] }));
  assert.deepEqual(
    actions.map((a) => a.kind),
    ['releaseLease', 'setStatus'],
  );
});

test('the Fencing condition: set when missing or stale; an explicit none is False with a Warning event', () => {
  const running = {
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
  const missing = decideShareManager(
    snap({ sm: { ...running, status: { ...running.status, conditions: [] } } }),
  );
  assert.deepEqual(missing, [{ kind: 'setCondition', condition: fencingCondition('pod') }]);
  assert.equal(fencingCondition('pod').status, 'True');

  const unfenced = { ...running, spec: { ...running.spec, fence: { action: 'none' as const } } };
  const actions = decideShareManager(
    snap({ sm: { ...unfenced, status: { ...running.status, conditions: [fencingCondition('pod')] } } }),
  );
  assert.deepEqual(actions, [
    {
      kind: 'setCondition',
      condition: fencingCondition('none'),
      event: { type: 'Warning', reason: 'FenceDisabled' },
    },
  ]);
  assert.equal(fencingCondition('none').status, 'False');
  assert.equal(fencingCondition('none').reason, 'FenceDisabled');

  // Once the condition says so, nothing more (no event per pass).
  assert.deepEqual(decideShareManager(snap({ sm: unfenced })), []);
});

test('the NFS default publishes status.export once the ClusterIP is known, and only when it differs', () => {
  const nfs: ShareManager = { ...sm, spec: { volume: { pvc: 'pvc', mountPath: '/data' } } };
  const running = {
    state: 'Running' as const,
    message: '',
    node: 'n1',
    pod: 'vol-a',
    leaseHolder: 'vol-a',
    observedGeneration: 1,
  };
  const unknown = decideShareManager(snap({ sm: { ...nfs, status: running }, service: undefined }));
  assert.deepEqual(
    unknown.map((a) => a.kind),
    ['ensureService'],
    'no export (nor a status write) before the ClusterIP is known',
  );
  const known = decideShareManager(snap({ sm: { ...nfs, status: running } }));
  assert.equal(known.length, 1);
  const write = known[0];
  assert.ok(write?.kind === 'setStatus');
  assert.deepEqual(write.status.export, {
    clusterIP: '10.96.0.20',
    port: 2049,
    path: '/data',
    source: '10.96.0.20:/data',
    mountOptions: 'nfsvers=4.1,proto=tcp,hard,timeo=20,retrans=2,noresvport',
  });
  const published = { ...nfs, status: { ...running, export: write.status.export ?? undefined } };
  assert.deepEqual(decideShareManager(snap({ sm: published })), [], 'current: nothing to write');
  const moved = decideShareManager(snap({ sm: published, service: ownService('10.96.0.99') }));
  assert.equal(moved[0]?.kind === 'setStatus' && moved[0].status.export?.source, '10.96.0.99:/data');
});

test("a user's own server gets no status.export; a stale one is removed (null in the merge patch)", () => {
  const running = {
    state: 'Running' as const,
    message: '',
    node: 'n1',
    pod: 'vol-a',
    leaseHolder: 'vol-a',
    observedGeneration: 1,
  };
  assert.deepEqual(decideShareManager(snap({ sm: { ...sm, status: running } })), []);
  const stale = {
    ...sm,
    status: {
      ...running,
      export: {
        clusterIP: '10.96.0.20',
        port: 2049,
        path: '/export',
        source: '10.96.0.20:/export',
        mountOptions: 'hard',
      },
    },
  };
  const actions = decideShareManager(snap({ sm: stale }));
  assert.equal(actions.length, 1);
  assert.equal(actions[0]?.kind === 'setStatus' && actions[0].status.export, null);
});

test('the Service ports: the NFS default gets nfs 2049/TCP; a user server its own; none is headless', () => {
  assert.deepEqual(servicePorts({ ...sm, spec: { volume: { pvc: 'pvc' } } }), [
    { name: 'nfs', port: 2049, targetPort: 2049, protocol: 'TCP' },
  ]);
  assert.deepEqual(
    servicePorts({ ...sm, spec: { ...sm.spec, server: { image: 'img', ports: [{ containerPort: 8080 }] } } }),
    [{ name: 'port-0', port: 8080, targetPort: 8080, protocol: 'TCP' }],
  );
  assert.deepEqual(servicePorts(sm), []);
});

test('no pod starts behind the storage-fencing gate: AwaitingNodeDown and a holder not reported ended', () => {
  const gated = (conditionReason: string) => ({
    ...sm,
    status: {
      conditions: [
        fencingCondition('pod'),
        { type: 'StorageFencing', status: 'False', reason: conditionReason, message: 'm' },
      ],
    },
  });
  const terminating: V1Pod = {
    ...pod('vol-a'),
    metadata: { ...pod('vol-a').metadata, deletionTimestamp: new Date() },
  };
  const creates = (over: Partial<ShareManagerSnapshot>) =>
    decideShareManager(snap(over)).some((a) => a.kind === 'claimPodCreation');
  // The holder's pod evicted (terminating on a frozen node), or gone from the cache: no new pod.
  assert.equal(creates({ sm: gated('AwaitingNodeDown'), pods: [terminating] }), false);
  assert.equal(creates({ sm: gated('AwaitingNodeDown'), pods: [] }), false);
  // The check can fail: without the wait, or once the gate said proceed, the pod is created.
  assert.equal(creates({ sm: gated('NodeDown'), pods: [terminating] }), true);
  assert.equal(creates({ sm: sm, pods: [terminating] }), true);
  // It lifts when the lease is freed, or the kubelet reported the holder ended (released first).
  assert.equal(creates({ sm: gated('AwaitingNodeDown'), pods: [], lease: lease('') }), true);
  const afterEnd = decideShareManager(
    snap({ sm: gated('AwaitingNodeDown'), pods: [ended('vol-a', 'Failed')] }),
  );
  assert.deepEqual(
    afterEnd.filter((a) => a.kind === 'releaseLease' || a.kind === 'claimPodCreation').map((a) => a.kind),
    ['releaseLease', 'claimPodCreation'],
  );
});

test('the Service spec: ports, no selector (the manager publishes the endpoints); headless without ports', () => {
  const nfs = serviceSpec({ ...sm, spec: { volume: { pvc: 'pvc' } } });
  assert.equal(nfs.selector, undefined);
  assert.equal(nfs.publishNotReadyAddresses, undefined);
  assert.deepEqual(nfs.ports, [{ name: 'nfs', port: 2049, targetPort: 2049, protocol: 'TCP' }]);
  assert.equal(nfs.clusterIP, undefined);
  const own = serviceSpec({
    ...sm,
    spec: { ...sm.spec, server: { image: 'img', ports: [{ containerPort: 8080 }] } },
  });
  assert.equal(own.selector, undefined);
  assert.deepEqual(own.ports, [{ name: 'port-0', port: 8080, targetPort: 8080, protocol: 'TCP' }]);
  const headless = serviceSpec(sm);
  assert.equal(headless.clusterIP, 'None');
});

test('a Service changed by hand is put back: the drifted fields are named; the CAS uses the cached version', () => {
  const nfs: ShareManager = {
    metadata: { name: 'vol', namespace: 'ns', uid: 'u', generation: 1 },
    spec: { volume: { pvc: 'pvc' } },
  };
  // As the API server returns our own Service: defaults filled in, targetPort a number.
  const served = (): V1Service => ({
    metadata: { name: 'vol', namespace: 'ns', resourceVersion: '9' },
    spec: {
      ...serviceSpec(nfs),
      clusterIP: '10.96.0.20',
      type: 'ClusterIP',
      sessionAffinity: 'None',
      ports: [{ name: 'nfs', port: 2049, targetPort: 2049 as unknown as string, protocol: 'TCP' }],
    },
  });
  assert.deepEqual(serviceDrift(served(), nfs), [], 'the API server defaults are no drift');
  const edited = served();
  edited.spec = {
    ...edited.spec,
    selector: { app: 'other' },
    ports: [{ name: 'nfs', port: 2050, targetPort: 2050 as unknown as string, protocol: 'TCP' }],
    publishNotReadyAddresses: false,
  };
  assert.deepEqual(
    serviceDrift(edited, nfs),
    ['spec.selector', 'spec.ports'],
    'publishNotReadyAddresses is left alone',
  );
  const legacy = served();
  legacy.spec = {
    ...legacy.spec,
    selector: { 'leasehold.dev/share-manager': 'vol' },
    publishNotReadyAddresses: true,
  };
  assert.deepEqual(serviceDrift(legacy, nfs), ['spec.selector'], "the previous release's selector is drift");
  // Headless where an address is needed: not repairable in place, not reported.
  const headless = served();
  headless.spec = { ...headless.spec, clusterIP: 'None', ports: [] };
  assert.deepEqual(serviceDrift(headless, nfs), []);

  const running = {
    state: 'Running' as const,
    message: '',
    node: 'n1',
    pod: 'vol-a',
    leaseHolder: 'vol-a',
    observedGeneration: 1,
  };
  const actions = decideShareManager(
    snap({ sm: { ...nfs, status: running }, service: edited, serviceDrift: serviceDrift(edited, nfs) }),
  );
  const repair = actions.find((a) => a.kind === 'repairService');
  assert.ok(repair?.kind === 'repairService', JSON.stringify(actions.map((a) => a.kind)));
  assert.equal(repair.service.metadata?.resourceVersion, '9');
  assert.deepEqual(repair.fields, ['spec.selector', 'spec.ports']);
  assert.equal(
    decideShareManager(snap({ sm: { ...nfs, status: running }, service: undefined })).some(
      (a) => a.kind === 'ensureService',
    ),
    true,
    'a missing Service (deleted: the cache says so) is created again',
  );
});

test("a Pending share says why in the scheduler's words (a missing backing claim is no silent Pending)", () => {
  const pending: V1Pod = {
    metadata: { name: 'vol-a', uid: 'vol-a-uid', annotations: {} },
    spec: { containers: [] },
    status: {
      phase: 'Pending',
      conditions: [
        {
          type: 'PodScheduled',
          status: 'False',
          reason: 'Unschedulable',
          message: '0/3 nodes are available: persistentvolumeclaim "data" not found.',
        },
      ],
    },
  };
  const actions = decideShareManager(snap({ pods: [pending], lease: lease('') }));
  const write = actions.find((a) => a.kind === 'setStatus');
  assert.ok(write?.kind === 'setStatus', JSON.stringify(actions.map((a) => a.kind)));
  assert.equal(write.status.state, 'Pending');
  assert.equal(
    write.status.message,
    'pod vol-a: Unschedulable: 0/3 nodes are available: persistentvolumeclaim "data" not found.',
  ); // ... and the Scheduled condition with a Warning event; True again (and only then
  // written) once the pod has a node.
  const condition = actions.find((a) => a.kind === 'setCondition' && a.condition.type === 'Scheduled');
  assert.deepEqual(condition, {
    kind: 'setCondition',
    condition: {
      type: 'Scheduled',
      status: 'False',
      reason: 'Unschedulable',
      message: 'pod vol-a: 0/3 nodes are available: persistentvolumeclaim "data" not found.',
    },
    event: { type: 'Warning', reason: 'Unschedulable' },
  });
  const placed: V1Pod = { ...pending, spec: { ...pending.spec, containers: [], nodeName: 'n1' } };
  const healthy = decideShareManager(snap({ pods: [placed], lease: lease('') }));
  assert.ok(
    !healthy.some((a) => a.kind === 'setCondition' && a.condition.type === 'Scheduled'),
    'never failed: no write',
  );
  const said = snap({ pods: [placed], lease: lease('') });
  said.sm.status = {
    ...said.sm.status,
    conditions: [
      { ...(condition?.kind === 'setCondition' ? condition.condition : { type: '', status: '' }) },
    ],
  };
  const cleared = decideShareManager(said).find(
    (a) => a.kind === 'setCondition' && a.condition.type === 'Scheduled',
  );
  assert.deepEqual(cleared?.kind === 'setCondition' ? cleared.condition : undefined, {
    type: 'Scheduled',
    status: 'True',
    reason: 'Scheduled',
    message: 'pod vol-a on node n1',
  });
});

test('a holder that served on witness promises: ServedOnPromises from its Lease, with a Normal event once per period (issue 28)', () => {
  const period = '2026-12-07T10:00:00.000Z/2026-12-07T10:01:02.500Z';
  const served = fromWire({
    metadata: {
      namespace: 'ns',
      name: 'vol',
      resourceVersion: '7',
      annotations: { 'leasehold.dev/served-on-promises': period },
    },
    spec: { holderIdentity: 'vol-a', leaseDurationSeconds: 6 },
  });
  const action = decideShareManager(snap({ lease: served })).find(
    (a) => a.kind === 'setCondition' && a.condition.type === 'ServedOnPromises',
  );
  assert.deepEqual(action, {
    kind: 'setCondition',
    condition: {
      type: 'ServedOnPromises',
      status: 'True',
      reason: 'ApiUnreachable',
      message:
        'holder vol-a served on witness promises from 2026-12-07T10:00:00.000Z to 2026-12-07T10:01:02.500Z (62.5 s): the API server was unreachable for it and for a majority of its witnesses',
    },
    event: { type: 'Normal', reason: 'ServedOnPromises' },
  });
  // Said once: the same period again writes nothing; none without the annotation.
  const said = snap({ lease: served });
  said.sm.status = {
    ...said.sm.status,
    conditions: [
      ...(said.sm.status?.conditions ?? []),
      action?.kind === 'setCondition' ? action.condition : { type: '', status: '' },
    ],
  };
  assert.ok(
    !decideShareManager(said).some(
      (a) => a.kind === 'setCondition' && a.condition.type === 'ServedOnPromises',
    ),
  );
  assert.ok(
    !decideShareManager(snap()).some(
      (a) => a.kind === 'setCondition' && a.condition.type === 'ServedOnPromises',
    ),
  );
  // The annotation survives the manager's own Lease writes and a renewal; a new holder clears it.
  const wire = toWire(served);
  assert.equal(wire.metadata?.annotations?.['leasehold.dev/served-on-promises'], period);
  const taken = toWire({ ...served, holder: 'vol-b', servedOnPromises: '' });
  assert.equal(taken.metadata?.annotations?.['leasehold.dev/served-on-promises'], undefined);
});
