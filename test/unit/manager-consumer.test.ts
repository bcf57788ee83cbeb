import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { fromWire } from '../../lib/lease-record.ts';
import {
  ANNOTATION_OWNER_UID,
  consumerClaim,
  consumerVolume,
  consumerVolumeName,
  FINALIZER_CONSUMER,
  LABEL_CONSUMER_NAMESPACE,
  LABEL_CONSUMER_OF,
} from '../../manager/reconciliation/consumer-objects.ts';
import {
  type ConsumerAction,
  type ConsumerObjects,
  type ConsumerSnapshot,
  decideConsumer,
} from '../../manager/reconciliation/decide-consumer.ts';
import { decideShareManager, fencingCondition } from '../../manager/reconciliation/decide-reconcile.ts';
import { exportStatus } from '../../manager/share-model/nfs-server-preset.ts';
import { resolveSpec, type ShareManager } from '../../manager/share-model/share-manager-spec.ts';

const defaults = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };
const exported = exportStatus('10.96.0.20', '/export');
const PV = 'leasehold.apps.vol';

function shareManager(over: { finalizer?: boolean; claimName?: string | null; conditions?: unknown[] } = {}) {
  const claimName = over.claimName === undefined ? 'shared' : over.claimName;
  const sm: ShareManager = {
    metadata: {
      name: 'vol',
      namespace: 'apps',
      uid: 'sm-uid',
      generation: 1,
      resourceVersion: '7',
      finalizers: over.finalizer === false ? [] : ['other.example/keep', FINALIZER_CONSUMER],
    },
    spec: { volume: { pvc: 'data' }, ...(claimName === null ? {} : { consumer: { claimName } }) },
    status: { conditions: (over.conditions ?? []) as never },
  };
  return sm;
}

/** Our claim, as the API server returns it (a UID, phase Bound). */
function ourClaim(sm: ShareManager, name = 'shared'): V1PersistentVolumeClaim {
  const claim = consumerClaim(sm, name, '10Gi');
  return {
    ...claim,
    metadata: { ...claim.metadata, uid: `claim-uid-${name}`, resourceVersion: '11' },
    status: { phase: 'Bound' },
  };
}

function ourVolume(sm: ShareManager, claim = ourClaim(sm)): V1PersistentVolume {
  const volume = consumerVolume(sm, exported, '10Gi', { name: 'shared', uid: claim.metadata?.uid ?? '' });
  // NB: the API server drops the PV's empty storageClassName.
  const { storageClassName: _dropped, ...spec } = volume.spec ?? {};
  return {
    ...volume,
    metadata: { ...volume.metadata, uid: 'pv-uid', resourceVersion: '12' },
    spec,
    status: { phase: 'Bound' },
  };
}

function snap(
  sm: ShareManager,
  objects: Partial<ConsumerObjects> = {},
  over: Partial<ConsumerSnapshot> = {},
) {
  const resolved = resolveSpec(sm.spec, defaults);
  return {
    sm,
    deleting: false,
    wanted: resolved.ok ? resolved.consumer : undefined,
    export: exported,
    objects: {
      volume: undefined,
      claims: [],
      taken: undefined,
      size: { pvc: 'data', storage: '10Gi' },
      ...objects,
    },
    now: 1000,
    ...over,
  } satisfies ConsumerSnapshot;
}

const kinds = (actions: ConsumerAction[]) => actions.map((a) => a.kind);
const conditionOf = (actions: ConsumerAction[]) => {
  const set = actions.find((a) => a.kind === 'setConsumerCondition');
  return set?.kind === 'setConsumerCondition' ? set : undefined;
};

describe('consumer objects (builders)', () => {
  it('the PV: nfs to the ClusterIP and export path, RWX, Retain, the recommended options, pre-bound by UID', () => {
    const sm = shareManager();
    const volume = consumerVolume(sm, exported, '10Gi', { name: 'shared', uid: 'c-1' });
    assert.equal(volume.metadata?.name, PV);
    assert.equal(consumerVolumeName(sm), PV);
    assert.deepEqual(volume.spec?.nfs, { server: '10.96.0.20', path: '/export' });
    assert.deepEqual(volume.spec?.accessModes, ['ReadWriteMany']);
    assert.equal(volume.spec?.persistentVolumeReclaimPolicy, 'Retain');
    assert.equal(volume.spec?.storageClassName, '');
    assert.deepEqual(volume.spec?.capacity, { storage: '10Gi' });
    assert.deepEqual(volume.spec?.mountOptions, [
      'nfsvers=4.1',
      'proto=tcp',
      'hard',
      'timeo=20',
      'retrans=2',
      'noresvport',
    ]);
    assert.deepEqual(volume.spec?.claimRef, {
      apiVersion: 'v1',
      kind: 'PersistentVolumeClaim',
      namespace: 'apps',
      name: 'shared',
      uid: 'c-1',
    });
    assert.equal(volume.metadata?.labels?.[LABEL_CONSUMER_OF], 'vol');
    assert.equal(volume.metadata?.labels?.[LABEL_CONSUMER_NAMESPACE], 'apps');
    assert.equal(volume.metadata?.annotations?.[ANNOTATION_OWNER_UID], 'sm-uid');
    assert.equal(
      volume.metadata?.ownerReferences,
      undefined,
      'a cluster-scoped PV cannot have a namespaced owner',
    );
  });

  it('the claim: in the ShareManager namespace, class "", pre-bound to the PV, owned by the ShareManager', () => {
    const claim = consumerClaim(shareManager(), 'shared', '10Gi');
    assert.equal(claim.metadata?.namespace, 'apps');
    assert.equal(claim.spec?.storageClassName, '');
    assert.equal(claim.spec?.volumeName, PV);
    assert.deepEqual(claim.spec?.accessModes, ['ReadWriteMany']);
    assert.deepEqual(claim.spec?.resources?.requests, { storage: '10Gi' });
    assert.deepEqual(claim.metadata?.ownerReferences, [
      {
        apiVersion: 'leasehold.dev/v1alpha1',
        kind: 'ShareManager',
        name: 'vol',
        uid: 'sm-uid',
        controller: true,
      },
    ]);
  });
});

describe('decideConsumer', () => {
  it('creates nothing before the finalizer is there', () => {
    assert.deepEqual(decideConsumer(snap(shareManager({ finalizer: false }))), [
      { kind: 'addConsumerFinalizer' },
    ]);
  });

  it('waits for the ClusterIP, then reads the backing claim size, and waits while it is missing', () => {
    const sm = shareManager();
    const noIp = decideConsumer(snap(sm, {}, { export: undefined }));
    assert.deepEqual(kinds(noIp), ['setConsumerCondition']);
    assert.equal(conditionOf(noIp)?.condition?.reason, 'AwaitingClusterIP');
    assert.deepEqual(decideConsumer(snap(sm, { size: undefined })), [
      { kind: 'readVolumeSize', pvc: 'data' },
    ]);
    const missing = { pvc: 'data', missing: 'backing claim apps/data not found', retryAt: 5000 };
    const waiting = decideConsumer(snap(sm, { size: missing }));
    assert.deepEqual(kinds(waiting), ['requeueAfter', 'setConsumerCondition']);
    assert.equal(conditionOf(waiting)?.condition?.reason, 'AwaitingVolumeSize');
    assert.deepEqual(decideConsumer(snap(sm, { size: missing }, { now: 5000 })), [
      { kind: 'readVolumeSize', pvc: 'data' },
    ]);
    // spec.volume.pvc changed: the size is read again.
    assert.deepEqual(decideConsumer(snap(sm, { size: { pvc: 'old', storage: '1Gi' } })), [
      { kind: 'readVolumeSize', pvc: 'data' },
    ]);
  });

  it('the claim first; the PV only once the claim UID is known, pre-bound to it; then Published', () => {
    const sm = shareManager();
    const first = decideConsumer(snap(sm));
    assert.deepEqual(kinds(first), ['createConsumerClaim']);
    const claim = ourClaim(sm);
    const second = decideConsumer(snap(sm, { claims: [claim] }));
    assert.deepEqual(kinds(second), ['createConsumerVolume']);
    const created = second[0];
    assert.ok(created?.kind === 'createConsumerVolume');
    assert.equal(created.volume.spec?.claimRef?.uid, 'claim-uid-shared');
    const done = decideConsumer(snap(sm, { claims: [claim], volume: ourVolume(sm) }));
    assert.deepEqual(kinds(done), ['setConsumerCondition']);
    const published = conditionOf(done);
    assert.equal(published?.condition?.status, 'True');
    assert.equal(published?.condition?.reason, 'Published');
    assert.match(
      published?.condition?.message ?? '',
      /leasehold\.apps\.vol \(nfs 10\.96\.0\.20:\/export, Retain\).*apps\/shared/,
    );
    assert.equal(published?.warn, false);
    // Level-based: the condition is current, so nothing more to do.
    const settled = shareManager({ conditions: [published?.condition] });
    assert.deepEqual(
      decideConsumer(snap(settled, { claims: [ourClaim(settled)], volume: ourVolume(settled) })),
      [],
    );
  });

  it("someone else's claim of that name: never written, ClaimTaken names it and the rule, and no PV", () => {
    const sm = shareManager();
    const foreign: V1PersistentVolumeClaim = {
      metadata: {
        name: 'shared',
        namespace: 'apps',
        uid: 'x',
        labels: { [LABEL_CONSUMER_OF]: 'vol', [LABEL_CONSUMER_NAMESPACE]: 'apps' },
        annotations: { [ANNOTATION_OWNER_UID]: 'another-uid', 'leasehold.dev/share-manager': 'apps/other' },
      },
      spec: { storageClassName: 'fast' },
    };
    const actions = decideConsumer(snap(sm, { claims: [foreign] }));
    assert.deepEqual(kinds(actions), ['setConsumerCondition']);
    const set = conditionOf(actions);
    assert.equal(set?.condition?.reason, 'ClaimTaken');
    assert.equal(set?.warn, true);
    assert.match(
      set?.condition?.message ?? '',
      /PersistentVolumeClaim apps\/shared exists and was not created by this ShareManager/,
    );
    assert.match(set?.condition?.message ?? '', /another-uid \(ShareManager apps\/other\)/);
    assert.match(set?.condition?.message ?? '', /never adopts/);

    // Found by a create that met 409 (not labelled, so not in the cache): left alone until retryAt.
    const taken = {
      kind: 'PersistentVolumeClaim' as const,
      object: 'apps/shared',
      why: `it carries no ${ANNOTATION_OWNER_UID} annotation`,
      retryAt: 31_000,
    };
    const waiting = decideConsumer(snap(sm, { taken }));
    assert.deepEqual(kinds(waiting), ['requeueAfter', 'setConsumerCondition']);
    assert.equal(conditionOf(waiting)?.condition?.reason, 'ClaimTaken');
    assert.match(
      conditionOf(waiting)?.condition?.message ?? '',
      /carries no leasehold\.dev\/share-manager-uid/,
    );
    assert.deepEqual(kinds(decideConsumer(snap(sm, { taken }, { now: 31_000 }))), ['createConsumerClaim']);
    // Only that name: after spec.consumer.claimName changed, the new name is tried at once.
    const renamed = shareManager({ claimName: 'other' });
    assert.deepEqual(kinds(decideConsumer(snap(renamed, { taken }))), ['createConsumerClaim']);
  });

  it("someone else's PV of that name: never written nor deleted, VolumeTaken", () => {
    const sm = shareManager();
    const foreign: V1PersistentVolume = {
      metadata: { name: PV, uid: 'pv-x', labels: { [LABEL_CONSUMER_NAMESPACE]: 'apps' } },
      spec: { nfs: { server: '192.0.2.1', path: '/theirs' } },
    };
    for (const wanted of [true, false]) {
      const s = wanted ? sm : shareManager({ claimName: null, finalizer: false });
      const actions = decideConsumer(snap(s, { claims: [ourClaim(sm)], volume: foreign }));
      assert.ok(
        !actions.some((a) => a.kind.includes('Volume') && a.kind !== 'readVolumeSize'),
        JSON.stringify(actions),
      );
      if (wanted) assert.equal(conditionOf(actions)?.condition?.reason, 'VolumeTaken');
    }
  });

  it("someone else's PV of that name that would fit: no claim is made to meet it, and one of ours is deleted", () => {
    const sm = shareManager();
    const squatter: V1PersistentVolume = {
      metadata: { name: PV, uid: 'pv-squat' },
      spec: {
        nfs: { server: '192.0.2.9', path: '/theirs' },
        accessModes: ['ReadWriteMany'],
        capacity: { storage: '10Gi' },
        storageClassName: '',
      },
      status: { phase: 'Available' },
    };
    const before = decideConsumer(snap(sm, { volume: squatter }));
    assert.ok(
      !kinds(before).includes('createConsumerClaim'),
      `no claim to bind to it: ${JSON.stringify(before)}`,
    );
    assert.equal(conditionOf(before)?.condition?.reason, 'VolumeTaken');
    for (const phase of ['Pending', 'Bound']) {
      const claim = { ...ourClaim(sm), status: { phase } };
      const actions = decideConsumer(snap(sm, { claims: [claim], volume: squatter }));
      const deleted = actions.find((a) => a.kind === 'deleteConsumerClaim');
      assert.ok(deleted, `our ${phase} claim deleted: ${JSON.stringify(actions)}`);
      assert.equal(conditionOf(actions)?.condition?.reason, 'VolumeTaken');
      assert.ok(!actions.some((a) => a.kind.includes('Volume') && a.kind !== 'readVolumeSize'));
    }
  });

  it('repairs drift of the PV fields we own, keeping the resourceVersion and what we do not own', () => {
    const sm = shareManager();
    const claim = ourClaim(sm);
    const volume = ourVolume(sm, claim);
    const drifted: V1PersistentVolume = {
      ...volume,
      metadata: { ...volume.metadata, labels: { keep: 'me' } },
      spec: {
        ...volume.spec,
        persistentVolumeReclaimPolicy: 'Delete',
        mountOptions: ['soft'],
        claimRef: { ...volume.spec?.claimRef, uid: 'an-old-claim', resourceVersion: '3' },
      },
    };
    const actions = decideConsumer(snap(sm, { claims: [claim], volume: drifted }));
    const update = actions.find((a) => a.kind === 'updateConsumerVolume');
    assert.ok(update?.kind === 'updateConsumerVolume');
    assert.deepEqual(update.fields, [
      `metadata.labels[${LABEL_CONSUMER_OF}]`,
      `metadata.labels[${LABEL_CONSUMER_NAMESPACE}]`,
      'spec.mountOptions',
      'spec.persistentVolumeReclaimPolicy',
      'spec.claimRef',
    ]);
    assert.equal(update.volume.metadata?.resourceVersion, '12', 'a CAS on the version read');
    assert.equal(update.volume.metadata?.labels?.keep, 'me');
    assert.equal(update.volume.spec?.persistentVolumeReclaimPolicy, 'Retain');
    assert.deepEqual(update.volume.spec?.mountOptions, volume.spec?.mountOptions);
    assert.equal(update.volume.spec?.claimRef?.uid, 'claim-uid-shared');
    assert.equal(update.volume.spec?.claimRef?.resourceVersion, undefined);
    assert.deepEqual(update.volume.status, { phase: 'Bound' });
  });

  it('repairs the claim metadata and ownerReference; an immutable claim field is a condition', () => {
    const sm = shareManager();
    const claim = ourClaim(sm);
    const stripped = { ...claim, metadata: { ...claim.metadata, labels: {}, ownerReferences: [] } };
    const actions = decideConsumer(snap(sm, { claims: [stripped], volume: ourVolume(sm) }));
    const update = actions.find((a) => a.kind === 'updateConsumerClaim');
    assert.ok(update?.kind === 'updateConsumerClaim');
    assert.deepEqual(update.fields, [
      `metadata.labels[${LABEL_CONSUMER_OF}]`,
      `metadata.labels[${LABEL_CONSUMER_NAMESPACE}]`,
      'metadata.ownerReferences',
    ]);
    assert.equal(update.claim.metadata?.ownerReferences?.[0]?.uid, 'sm-uid');
    const elsewhere = { ...claim, spec: { ...claim.spec, volumeName: 'another-pv' } };
    const immutable = decideConsumer(snap(sm, { claims: [elsewhere] }));
    assert.equal(conditionOf(immutable)?.condition?.reason, 'ImmutableFieldChanged');
    assert.match(conditionOf(immutable)?.condition?.message ?? '', /spec\.volumeName \(another-pv\)/);
    assert.ok(!immutable.some((a) => a.kind === 'createConsumerVolume'));
  });

  it('a moved export: the PV bound to our claim stays (condition); once unbound it is re-created', () => {
    const sm = shareManager();
    const claim = ourClaim(sm);
    const moved = snap(
      sm,
      { claims: [claim], volume: ourVolume(sm, claim) },
      { export: exportStatus('10.96.0.99', '/export') },
    );
    const bound = decideConsumer(moved);
    assert.ok(!bound.some((a) => a.kind === 'deleteConsumerVolume'));
    const set = conditionOf(bound);
    assert.equal(set?.condition?.reason, 'ImmutableFieldChanged');
    assert.match(
      set?.condition?.message ?? '',
      /spec\.nfs\.server \(10\.96\.0\.20, now 10\.96\.0\.99\).*delete claim apps\/shared/,
    );
    // The user deleted the claim; ours was re-created (a new UID): the old PV goes.
    const newClaim = { ...claim, metadata: { ...claim.metadata, uid: 'claim-uid-2' } };
    const unbound = decideConsumer({ ...moved, objects: { ...moved.objects, claims: [newClaim] } });
    assert.deepEqual(
      unbound.map((a) => (a.kind === 'deleteConsumerVolume' ? [a.kind, a.name, a.uid] : a.kind)),
      [['deleteConsumerVolume', PV, 'pv-uid']],
    );
  });

  it('waits while our claim or PV is being deleted', () => {
    const sm = shareManager();
    const claim = ourClaim(sm);
    const deletingClaim = { ...claim, metadata: { ...claim.metadata, deletionTimestamp: new Date() } };
    assert.equal(
      conditionOf(decideConsumer(snap(sm, { claims: [deletingClaim] })))?.condition?.reason,
      'ClaimDeleting',
    );
    const volume = ourVolume(sm, claim);
    const deletingVolume = { ...volume, metadata: { ...volume.metadata, deletionTimestamp: new Date() } };
    const actions = decideConsumer(snap(sm, { claims: [claim], volume: deletingVolume }));
    assert.deepEqual(kinds(actions), ['setConsumerCondition']);
    assert.equal(conditionOf(actions)?.condition?.reason, 'VolumeDeleting');
  });

  it('field removed: clean up (which removes the finalizer last) and drop the condition', () => {
    const published = { type: 'ConsumerClaim', status: 'True', reason: 'Published', message: 'x' };
    const removed = shareManager({ claimName: null, conditions: [published] });
    assert.deepEqual(
      decideConsumer(snap(removed, { claims: [ourClaim(removed)], volume: ourVolume(removed) })),
      [
        { kind: 'cleanUpConsumer', reason: 'spec.consumer was removed' },
        { kind: 'setConsumerCondition', condition: null, warn: false },
      ],
    );
    // Cleaned up (no finalizer): only the condition, once; then nothing.
    assert.deepEqual(
      kinds(
        decideConsumer(snap(shareManager({ claimName: null, finalizer: false, conditions: [published] }))),
      ),
      ['setConsumerCondition'],
    );
    assert.deepEqual(decideConsumer(snap(shareManager({ claimName: null, finalizer: false }))), []);
  });

  it('ShareManager deleted: clean up, no status write', () => {
    assert.deepEqual(decideConsumer(snap(shareManager(), {}, { deleting: true })), [
      { kind: 'cleanUpConsumer', reason: 'the ShareManager is being deleted' },
    ]);
    assert.deepEqual(decideConsumer(snap(shareManager({ finalizer: false }), {}, { deleting: true })), []);
  });

  it('claimName changed: the old claim of ours is deleted, the new one created', () => {
    const sm = shareManager({ claimName: 'renamed' });
    const actions = decideConsumer(snap(sm, { claims: [ourClaim(sm, 'shared')] }));
    assert.deepEqual(
      actions.map((a) => (a.kind === 'deleteConsumerClaim' ? [a.kind, a.name, a.uid] : a.kind)),
      [['deleteConsumerClaim', 'shared', 'claim-uid-shared'], 'createConsumerClaim'],
    );
  });
});

describe('spec.consumer in resolveSpec and decideShareManager', () => {
  it('refused with spec.server (naming the rule) and as the backing claim', () => {
    const own = resolveSpec(
      { volume: { pvc: 'data' }, server: { image: 'img' }, consumer: { claimName: 'c' } },
      defaults,
    );
    assert.equal(own.ok, false);
    assert.match(own.ok ? '' : own.message, /spec\.consumer: applies only to the shipped NFS server/);
    const same = resolveSpec({ volume: { pvc: 'data' }, consumer: { claimName: 'data' } }, defaults);
    assert.match(
      same.ok ? '' : same.message,
      /spec\.consumer\.claimName="data": must differ from spec\.volume\.pvc/,
    );
    const good = resolveSpec({ volume: { pvc: 'data' }, consumer: { claimName: 'c' } }, defaults);
    assert.deepEqual(good.ok ? good.consumer : undefined, { claimName: 'c', backingClaim: 'data' });
  });

  const base = (sm: ShareManager, consumer: ConsumerObjects | undefined) => {
    const resolved = resolveSpec(sm.spec, defaults);
    const conditions = resolved.ok ? [fencingCondition(resolved.fenceAction)] : [];
    return decideShareManager({
      sm: { ...sm, status: { ...sm.status, conditions } },
      resolved,
      lease: fromWire({ metadata: { namespace: 'apps', name: 'vol', resourceVersion: '1' }, spec: {} }),
      service: { metadata: { name: 'svc' }, spec: { clusterIP: '10.96.0.20' } },
      endpointSlice: undefined,
      serviceDrift: [],
      pods: [],
      now: 1000,
      podRequestSeenAt: undefined,
      podCreateTimeoutMs: 30_000,
      failoverRunning: false,
      newRequestId: 'r',
      consumer,
    });
  };
  const objects: ConsumerObjects = { volume: undefined, claims: [], taken: undefined, size: undefined };

  it('a ShareManager being deleted cleans up even with a spec in Error; an Error spec otherwise touches nothing', () => {
    const deleting = shareManager();
    deleting.metadata.deletionTimestamp = new Date();
    deleting.spec.server = { image: 'img' };
    assert.deepEqual(
      base(deleting, objects).map((a) => a.kind),
      ['cleanUpConsumer', 'setStatus'],
    );
    const invalid = shareManager();
    invalid.spec.server = { image: 'img' };
    assert.ok(!base(invalid, objects).some((a) => a.kind.includes('Consumer')));
  });

  it('the consumer step runs after the rest, and not at all without the consumer caches', () => {
    const actions = base(shareManager(), objects);
    assert.equal(actions.at(-1)?.kind, 'readVolumeSize');
    assert.ok(!base(shareManager(), undefined).some((a) => a.kind === 'readVolumeSize'));
  });
});
