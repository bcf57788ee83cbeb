/**
 * `spec.consumer` (pure): what one reconcile pass does about the RWX PersistentVolume +
 * PersistentVolumeClaim through which workloads use a share like any RWX claim (their
 * builders, ownership and drift: consumer-objects.ts).
 *
 * Guarantees:
 *  - Opt-in and for the shipped NFS server only: resolveSpec refuses `spec.consumer`
 *    with `spec.server` (we know neither the protocol nor the export of a user's server).
 *  - Never adopts. An object counts as ours only when it carries ANNOTATION_OWNER_UID
 *    equal to the ShareManager's UID. A PV or claim of the same name without it is never
 *    written nor deleted: condition ConsumerClaim=False (ClaimTaken / VolumeTaken) names
 *    it and the rule.
 *  - The claim first, the PV second, the PV pre-bound to the claim's UID. So the share is
 *    never offered to a claim we did not create: a foreign claim of that name stops us
 *    before any PV exists, and `claimRef.uid` lets the PV controller bind it to exactly
 *    our claim.
 *  - The PV: `nfs: { server: <Service ClusterIP>, path: <export path> }`, ReadWriteMany,
 *    mountOptions = status.export's, reclaim policy Retain (deleting it never deletes the
 *    data), storageClassName "" and capacity = the backing claim's. The claim: in the
 *    ShareManager's namespace, ReadWriteMany, storageClassName "" (no provisioner takes
 *    it), volumeName pre-bound, a controller ownerReference to the ShareManager.
 *  - Drift of what we set and the API lets us change is repaired by an update carrying
 *    the resourceVersion read (CAS): labels, annotations, capacity, access modes, mount
 *    options, reclaim policy, class and claimRef of the PV; labels, annotations and the
 *    ownerReference of the claim. A PV's source is immutable: when the export moved
 *    (spec.volume.mountPath changed, the Service was re-created) the PV is re-created
 *    only once it is no longer bound to our current claim; while it is, condition
 *    ConsumerClaim=False (ImmutableFieldChanged) says to delete the claim (its pods keep
 *    it until they end), and the manager then re-creates both.
 *  - Cleanup by a finalizer (FINALIZER_CONSUMER) on the ShareManager, added before the
 *    claim is created and removed only after the PV and claim of this ShareManager were
 *    deleted (the ShareManager is deleted or `spec.consumer` removed). Why a finalizer:
 *    a cluster-scoped PV cannot have a namespaced owner (the garbage collector treats
 *    such an ownerReference as unresolvable and never collects the PV), and a label
 *    alone is not acted on while no manager runs; the finalizer makes the deletion wait
 *    for a manager. The claim's ownerReference is a second path for the claim.
 *
 * Not guaranteed: a ShareManager whose finalizer is set is deleted only while a manager
 * runs (uninstall the chart last, or remove the finalizer by hand); a PV or claim whose
 * labels were removed by hand is still found by name while wanted, but the cleanup finds
 * claims by label (the claim's ownerReference still lets the garbage collector take it
 * when the ShareManager goes).
 */
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { ExportStatus } from '../share-model/nfs-server-preset.ts';
import type { ShareManager } from '../share-model/share-manager-spec.ts';
import {
  type ConsumerKind,
  claimRepair,
  claimSpecDrift,
  consumerClaim,
  consumerVolume,
  consumerVolumeName,
  FINALIZER_CONSUMER,
  isOurs,
  notOursBecause,
  sourceDrift,
  volumeRepair,
} from './consumer-objects.ts';

export const CONDITION_CONSUMER = 'ConsumerClaim';
/** How long a name found taken is left alone before it is tried again. */
export const TAKEN_RETRY_MS = 30_000;

/** A create met an object of the same name that is not ours (found by the executor). */
export interface TakenObject {
  kind: ConsumerKind;
  /** `name` for the PV, `namespace/name` for the claim. */
  object: string;
  /** Why it is not ours, e.g. "it carries no leasehold.dev/share-manager-uid annotation". */
  why: string;
  /** Monotonic time after which creating it is tried again. */
  retryAt: number;
}

/** The backing claim's size, as the executor read it. */
export type VolumeSize =
  | { pvc: string; storage: string }
  | { pvc: string; storage?: undefined; missing: string; retryAt: number };

/** What the caches and the executor know about this ShareManager's consumer objects. */
export interface ConsumerObjects {
  /** The PV named consumerVolumeName(sm), from the cache. */
  volume: V1PersistentVolume | undefined;
  /** Claims in the ShareManager's namespace labelled for it, from the cache. */
  claims: readonly V1PersistentVolumeClaim[];
  taken: TakenObject | undefined;
  size: VolumeSize | undefined;
}

export interface ConsumerSnapshot {
  sm: ShareManager;
  deleting: boolean;
  /** spec.consumer of a valid spec (claim name, backing claim); undefined when unset. */
  wanted: { claimName: string; backingClaim: string } | undefined;
  /** The export once the Service's ClusterIP is known. */
  export: ExportStatus | undefined;
  objects: ConsumerObjects;
  now: number;
}

export interface ConsumerCondition {
  type: typeof CONDITION_CONSUMER;
  status: 'True' | 'False';
  reason:
    | 'Published'
    | 'AwaitingClusterIP'
    | 'AwaitingVolumeSize'
    | 'ClaimTaken'
    | 'VolumeTaken'
    | 'ClaimDeleting'
    | 'VolumeDeleting'
    | 'ImmutableFieldChanged';
  message: string;
}

export type ConsumerAction =
  | { kind: 'addConsumerFinalizer' }
  /** Delete this ShareManager's PV and labelled claims (read fresh, ours only), then the finalizer. */
  | { kind: 'cleanUpConsumer'; reason: string }
  | { kind: 'readVolumeSize'; pvc: string }
  | { kind: 'createConsumerClaim'; claim: V1PersistentVolumeClaim }
  | { kind: 'createConsumerVolume'; volume: V1PersistentVolume }
  /** Update by CAS (the object carries the resourceVersion read); `fields` name what drifted. */
  | { kind: 'updateConsumerClaim'; claim: V1PersistentVolumeClaim; fields: string[] }
  | { kind: 'updateConsumerVolume'; volume: V1PersistentVolume; fields: string[] }
  | { kind: 'deleteConsumerClaim'; namespace: string; name: string; uid: string; reason: string }
  | { kind: 'deleteConsumerVolume'; name: string; uid: string; reason: string }
  /** null removes the condition; `warn`: also a Warning event with its message. */
  | { kind: 'setConsumerCondition'; condition: ConsumerCondition | null; warn: boolean }
  | { kind: 'requeueAfter'; ms: number; reason: string };

/**
 * One pass (pure). Steps, in order, each returning early when it must wait:
 *  1. deleting, or spec.consumer unset -> with our finalizer: cleanUpConsumer (which
 *     removes it last); without it nothing of ours exists. A leftover condition goes.
 *  2. no finalizer yet -> add it; nothing is created before it is there.
 *  3. claims of ours under another name (spec.consumer.claimName changed) -> delete.
 *  4. no ClusterIP yet -> wait (AwaitingClusterIP); the backing claim's size not read
 *     -> read it (AwaitingVolumeSize while it is missing).
 *  5. the claim: taken -> ClaimTaken; the PV's name taken -> VolumeTaken, no claim (one
 *     of ours deleted: it names that PV, which the PV controller would bind it to);
 *     missing -> create; ours but being deleted -> wait; ours -> repair its metadata; an
 *     immutable field changed -> ImmutableFieldChanged.
 *  6. the PV (only once our claim's UID is known): taken -> VolumeTaken; missing ->
 *     create; being deleted -> wait; an old source no longer bound to our claim ->
 *     delete it (re-created next pass); an old source still bound -> ImmutableFieldChanged;
 *     else repair its drift.
 *  7. all in place -> ConsumerClaim=True (Published).
 * The condition is written only when it changes; a change to a failure also warns.
 */
export function decideConsumer(s: ConsumerSnapshot): ConsumerAction[] {
  const { sm, objects } = s;
  const hasFinalizer = (sm.metadata.finalizers ?? []).includes(FINALIZER_CONSUMER);
  const current = sm.status?.conditions?.find((c) => c.type === CONDITION_CONSUMER);
  if (s.deleting || s.wanted === undefined) {
    const actions: ConsumerAction[] = [];
    if (hasFinalizer)
      actions.push({
        kind: 'cleanUpConsumer',
        reason: s.deleting ? 'the ShareManager is being deleted' : 'spec.consumer was removed',
      });
    if (!s.deleting && current) actions.push({ kind: 'setConsumerCondition', condition: null, warn: false });
    return actions;
  }
  if (!hasFinalizer) return [{ kind: 'addConsumerFinalizer' }];

  const namespace = sm.metadata.namespace ?? '';
  const { claimName } = s.wanted;
  const actions: ConsumerAction[] = [];
  const finish = (condition: ConsumerCondition): ConsumerAction[] => {
    if (
      current?.status !== condition.status ||
      current.reason !== condition.reason ||
      current.message !== condition.message
    ) {
      const warn = condition.status === 'False' && isConsumerWarning(condition.reason);
      actions.push({ kind: 'setConsumerCondition', condition, warn });
    }
    return actions;
  };
  const waiting = (reason: ConsumerCondition['reason'], message: string) =>
    finish({ type: CONDITION_CONSUMER, status: 'False', reason, message });

  for (const old of objects.claims) {
    const name = old.metadata?.name ?? '';
    if (name !== claimName && isOurs(sm, old) && !old.metadata?.deletionTimestamp) {
      actions.push({
        kind: 'deleteConsumerClaim',
        namespace,
        name,
        uid: old.metadata?.uid ?? '',
        reason: `spec.consumer.claimName is now ${claimName}`,
      });
    }
  }

  if (!s.export) {
    return waiting(
      'AwaitingClusterIP',
      `waiting for the ClusterIP of Service ${namespace}/${sm.metadata.name}: the PersistentVolume points at it`,
    );
  }
  const size = objects.size;
  if (size?.pvc !== s.wanted.backingClaim || (size.storage === undefined && s.now >= size.retryAt)) {
    actions.push({ kind: 'readVolumeSize', pvc: s.wanted.backingClaim });
    return actions;
  }
  if (size.storage === undefined) {
    actions.push({ kind: 'requeueAfter', ms: size.retryAt - s.now, reason: 'backing claim size unknown' });
    return waiting('AwaitingVolumeSize', size.missing);
  }
  const storage = size.storage;

  // 5. The claim.
  const claimKey = `${namespace}/${claimName}`;
  // A name found taken is left alone until retryAt (only that name: a new claimName is tried at once).
  const stillTaken = (kind: ConsumerKind, object: string): ConsumerAction[] | undefined => {
    const taken = objects.taken;
    if (!taken || taken.kind !== kind || taken.object !== object || s.now >= taken.retryAt) return undefined;
    actions.push({ kind: 'requeueAfter', ms: taken.retryAt - s.now, reason: `${kind} ${object} taken` });
    return takenCondition(taken, waiting);
  };
  const claimTaken = stillTaken('PersistentVolumeClaim', claimKey);
  if (claimTaken) return claimTaken;
  const claim = objects.claims.find((c) => c.metadata?.name === claimName);
  if (claim && !isOurs(sm, claim)) {
    return takenCondition(
      { kind: 'PersistentVolumeClaim', object: claimKey, why: notOursBecause(claim), retryAt: 0 },
      waiting,
    );
  }
  // A PV of our name that is not ours must never meet our claim: the claim names it
  // (spec.volumeName), so the PV controller would bind the two and workloads would mount
  // someone else's storage. No claim while it is there; one of ours is deleted (bound to
  // it or not: a claim bound to a PV that is not ours is wrong either way).
  const volumeName = consumerVolumeName(sm);
  const squatter = objects.volume && !isOurs(sm, objects.volume) ? objects.volume : undefined;
  if (squatter) {
    if (claim && !claim.metadata?.deletionTimestamp)
      actions.push({
        kind: 'deleteConsumerClaim',
        namespace,
        name: claimName,
        uid: claim.metadata?.uid ?? '',
        reason: `PersistentVolume ${volumeName}, which it names, is not this ShareManager's`,
      });
    return takenCondition(
      { kind: 'PersistentVolume', object: volumeName, why: notOursBecause(squatter), retryAt: 0 },
      waiting,
    );
  }
  if (!claim) {
    actions.push({ kind: 'createConsumerClaim', claim: consumerClaim(sm, claimName, storage) });
    return actions;
  }
  if (claim.metadata?.deletionTimestamp) {
    return waiting(
      'ClaimDeleting',
      `claim ${claimKey} is being deleted (kubernetes.io/pvc-protection keeps it while pods use it); it is re-created once it is gone`,
    );
  }
  const claimFix = claimRepair(sm, claim);
  if (claimFix) actions.push({ kind: 'updateConsumerClaim', ...claimFix });
  const claimImmutable = claimSpecDrift(sm, claim);
  if (claimImmutable.length > 0) {
    return waiting(
      'ImmutableFieldChanged',
      `claim ${claimKey} has ${claimImmutable.join(', ')}, which cannot be changed in place: delete the claim (its pods keep it until they end) and the manager re-creates it`,
    );
  }

  // 6. The PV, pre-bound to exactly our claim.
  const desired = consumerVolume(sm, s.export, storage, { name: claimName, uid: claim.metadata?.uid ?? '' });
  const volumeTaken = stillTaken('PersistentVolume', volumeName);
  if (volumeTaken) return volumeTaken;
  const volume = objects.volume;
  if (volume && !isOurs(sm, volume)) {
    return takenCondition(
      { kind: 'PersistentVolume', object: volumeName, why: notOursBecause(volume), retryAt: 0 },
      waiting,
    );
  }
  if (!volume) {
    actions.push({ kind: 'createConsumerVolume', volume: desired });
    return actions;
  }
  if (volume.metadata?.deletionTimestamp) {
    return waiting(
      'VolumeDeleting',
      `PersistentVolume ${volumeName} is being deleted (kubernetes.io/pv-protection keeps it while a claim is bound to it); it is re-created once it is gone`,
    );
  }
  const immutable = sourceDrift(volume, desired);
  if (immutable.length > 0) {
    if (volume.spec?.claimRef?.uid !== claim.metadata?.uid) {
      actions.push({
        kind: 'deleteConsumerVolume',
        name: volumeName,
        uid: volume.metadata?.uid ?? '',
        reason: `its source is out of date (${immutable.join(', ')}) and it is not bound to claim ${claimKey}`,
      });
      return actions;
    }
    return waiting(
      'ImmutableFieldChanged',
      `PersistentVolume ${volumeName} has ${immutable.join(', ')}; a PersistentVolume's source cannot change: delete claim ${claimKey} (its pods keep it until they end) and the manager re-creates both`,
    );
  }
  const volumeFix = volumeRepair(sm, volume, desired);
  if (volumeFix) actions.push({ kind: 'updateConsumerVolume', ...volumeFix });
  return finish({
    type: CONDITION_CONSUMER,
    status: 'True',
    reason: 'Published',
    message: `PersistentVolume ${volumeName} (nfs ${s.export.source}, Retain) is pre-bound to claim ${claimKey}`,
  });
}

/** The condition reasons that also record a Warning event (when they begin). */
export type ConsumerWarning = 'ClaimTaken' | 'VolumeTaken' | 'ImmutableFieldChanged';
const WARN_REASONS: ReadonlySet<ConsumerCondition['reason']> = new Set<ConsumerWarning>([
  'ClaimTaken',
  'VolumeTaken',
  'ImmutableFieldChanged',
]);
export function isConsumerWarning(reason: ConsumerCondition['reason']): reason is ConsumerWarning {
  return WARN_REASONS.has(reason);
}

function takenCondition(
  taken: TakenObject,
  waiting: (reason: ConsumerCondition['reason'], message: string) => ConsumerAction[],
): ConsumerAction[] {
  const volume = taken.kind === 'PersistentVolume';
  const remedy = volume
    ? 'delete it (the name is leasehold.<namespace>.<ShareManager name>)'
    : 'delete it, or choose another spec.consumer.claimName';
  return waiting(
    volume ? 'VolumeTaken' : 'ClaimTaken',
    `${taken.kind} ${taken.object} exists and was not created by this ShareManager: ${taken.why}. leasehold never adopts or changes an object it did not create: ${remedy}`,
  );
}
