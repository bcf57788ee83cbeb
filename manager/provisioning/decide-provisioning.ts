/**
 * What the provisioner does next for one claim UID (pure): Kubernetes' external-
 * provisioner protocol for claims of a leasehold StorageClass, with a ShareManager as
 * the volume.
 *
 * Provisioning, one step per pass, each idempotent (a create that finds its object
 * made is done), so a manager killed between any two steps, or two managers in a
 * leadership handover, leave nothing half-made once one runs again:
 *   1. the claim names us (volume.kubernetes.io/storage-provisioner), is unbound, and,
 *      with WaitForFirstConsumer, has a selected node; its class's parameters and the
 *      claim itself pass every rule (else ProvisioningFailed naming it, nothing made);
 *   2. the backing claim (event Provisioning), 3. the ShareManager,
 *   4. once the ShareManager has status.export: the PV pre-bound to the claim (event
 *      ProvisioningSucceeded); the PV controller binds them.
 * A ShareManager that ends in state Error (a refusal only the API server's dry run can
 * give) is reported and taken down with its backing claim: nothing half-made stays.
 *
 * Deletion (reclaim policy Delete: the claim is gone and the PV Released, or the PV
 * itself deleted) and clean-up of a claim deleted before its PV existed, in this
 * order: the ShareManager (foreground: it is gone only after its pods are, so the
 * server has stopped), then the backing claim, then the PV (our finalizer removed).
 * With Retain, nothing is deleted. The order holds across restarts: each step is
 * chosen from what exists, not from memory.
 *
 * A bound PV of ours whose claim asks for more: decide-expansion.ts.
 *
 * Not guaranteed: deletion of a share whose pod is on a node that never comes back
 * waits for that pod to be deleted (the failover's force-delete does it while the
 * ShareManager still exists; after that, `kubectl delete pod --force`).
 */
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import type { ClaimEventReason } from '../events.ts';
import type { ShareManager } from '../share-model/share-manager-spec.ts';
import { type ParsedParameters, PROVISIONER_NAME } from './class-parameters.ts';
import { decideExpansion, type ExpansionAction } from './decide-expansion.ts';
import {
  ANNOTATION_BETA_STORAGE_PROVISIONER,
  ANNOTATION_SELECTED_NODE,
  ANNOTATION_STORAGE_PROVISIONER,
  backingClaim,
  FINALIZER_PROVISIONED,
  provisionedFor,
  provisionedShare,
  provisionedVolume,
  requestedStorage,
} from './provisioned-objects.ts';

export interface ProvisionSnapshot {
  uid: string;
  /** The user's claim of that UID; undefined once it is gone. */
  claim: V1PersistentVolumeClaim | undefined;
  /** The claim's StorageClass; undefined when it names none or it does not exist. */
  storageClass: V1StorageClass | undefined;
  /** The class's parameters read (class-parameters.ts); undefined without a class. */
  settings: ParsedParameters | undefined;
  /** Ours for this UID (LABEL_PROVISIONED_FOR), as cached. */
  share: ShareManager | undefined;
  backing: V1PersistentVolumeClaim | undefined;
  volume: V1PersistentVolume | undefined;
}

export type ProvisionAction =
  | { kind: 'event'; type: 'Normal' | 'Warning'; reason: ClaimEventReason; message: string }
  | { kind: 'createBackingClaim'; body: V1PersistentVolumeClaim }
  | { kind: 'createShare'; body: ShareManager }
  | { kind: 'createVolume'; body: V1PersistentVolume }
  | { kind: 'deleteShare'; namespace: string; name: string; uid: string }
  | { kind: 'deleteBackingClaim'; namespace: string; name: string; uid: string }
  | { kind: 'deleteVolume'; name: string; uid: string; removeFinalizer: boolean }
  | ExpansionAction;

const ACCESS_MODES = new Set(['ReadWriteMany', 'ReadWriteOnce', 'ReadOnlyMany']);

/** True when the claim asks this provisioner (the PV controller's annotation). */
export function asksUs(claim: V1PersistentVolumeClaim): boolean {
  const a = claim.metadata?.annotations ?? {};
  return (a[ANNOTATION_STORAGE_PROVISIONER] ?? a[ANNOTATION_BETA_STORAGE_PROVISIONER]) === PROVISIONER_NAME;
}

export function decideProvisioning(s: ProvisionSnapshot): ProvisionAction[] {
  const volume = provisionedFor(s.volume, s.uid) ? s.volume : undefined;
  if (volume) return volumeActions(s, volume);
  if (!s.claim) return teardown(s, undefined);
  const claim = s.claim;
  if (!asksUs(claim) || claim.spec?.volumeName || claim.metadata?.deletionTimestamp) return [];
  const failed = (message: string): ProvisionAction => ({
    kind: 'event',
    type: 'Warning',
    reason: 'ProvisioningFailed',
    message,
  });
  const className = claim.spec?.storageClassName ?? '';
  if (!s.storageClass || !s.settings)
    return [failed(`StorageClass ${JSON.stringify(className)} not found; the claim waits for it`)];
  if (
    s.storageClass.volumeBindingMode === 'WaitForFirstConsumer' &&
    !claim.metadata?.annotations?.[ANNOTATION_SELECTED_NODE]
  )
    return [{ kind: 'wait', why: 'WaitForFirstConsumer: no node selected yet' }];
  const refusal = claimRefusal(claim);
  if (refusal) return [failed(refusal)];
  if (!s.settings.ok) return [failed(s.settings.message)];
  const settings = s.settings.settings;
  if (s.share?.status?.state === 'Error')
    return [
      failed(
        `ShareManager ${s.share.metadata.namespace}/${s.share.metadata.name} refused: ${s.share.status.message ?? '(no message)'}; removing what was made`,
      ),
      ...teardown(s, undefined),
    ];
  if (s.share?.metadata.deletionTimestamp || s.backing?.metadata?.deletionTimestamp)
    return [{ kind: 'wait', why: 'an earlier attempt is still being removed' }];
  if (!s.backing)
    return [
      {
        kind: 'event',
        type: 'Normal',
        reason: 'Provisioning',
        message: `leasehold: creating backing claim ${settings.backingNamespace}/pvc-${s.uid} (${settings.backingStorageClass ?? 'the default StorageClass'}) and its NFS share`,
      },
      { kind: 'createBackingClaim', body: backingClaim(claim, settings) },
    ];
  if (!s.share) return [{ kind: 'createShare', body: provisionedShare(claim, settings, s.storageClass) }];
  const exported = s.share.status?.export;
  if (!exported) return [{ kind: 'wait', why: 'the share has no Service address yet' }];
  const body = provisionedVolume(claim, s.storageClass, exported);
  return [
    { kind: 'createVolume', body },
    {
      kind: 'event',
      type: 'Normal',
      reason: 'ProvisioningSucceeded',
      message: `leasehold: provisioned volume ${body.metadata?.name} (NFS ${exported.source}, served by ShareManager ${s.share.metadata.namespace}/${s.share.metadata.name})`,
    },
  ];
}

/** What about the claim itself no share can serve. */
function claimRefusal(claim: V1PersistentVolumeClaim): string | undefined {
  const modes = claim.spec?.accessModes ?? [];
  const bad = modes.filter((m) => !ACCESS_MODES.has(m));
  if (bad.length > 0)
    return `accessModes ${bad.join(', ')}: not offered (a share serves ReadWriteMany, ReadWriteOnce and ReadOnlyMany)`;
  if (claim.spec?.volumeMode === 'Block') return 'volumeMode Block: a share is a file system (NFS)';
  const source = claim.spec?.dataSourceRef ?? claim.spec?.dataSource;
  if (source) return `dataSource ${source.kind}/${source.name}: cloning and snapshots are not offered`;
  if (!requestedStorage(claim)) return 'resources.requests.storage: required';
  return undefined;
}

/** Our PV exists: delete it all when reclaim policy Delete says so, else nothing. */
function volumeActions(s: ProvisionSnapshot, volume: V1PersistentVolume): ProvisionAction[] {
  const deleting = volume.metadata?.deletionTimestamp !== undefined;
  // Released is the PV controller's word that the claim is gone (it also waits out the
  // claim's pvc-protection, i.e. every pod using it).
  const released = volume.status?.phase === 'Released';
  if (deleting || (released && volume.spec?.persistentVolumeReclaimPolicy === 'Delete'))
    return teardown(s, volume);
  if (!s.claim || released) return [];
  return decideExpansion({ claim: s.claim, storageClass: s.storageClass, backing: s.backing, volume });
}

/** ShareManager (foreground) -> backing claim -> PV: one step at a time, in that order. */
function teardown(s: ProvisionSnapshot, volume: V1PersistentVolume | undefined): ProvisionAction[] {
  const share = provisionedFor(s.share, s.uid) ? s.share : undefined;
  if (share) {
    if (share.metadata.deletionTimestamp)
      return [{ kind: 'wait', why: 'the ShareManager is being deleted (its server stopping)' }];
    return [
      {
        kind: 'deleteShare',
        namespace: share.metadata.namespace ?? '',
        name: share.metadata.name ?? '',
        uid: share.metadata.uid ?? '',
      },
    ];
  }
  const backing = provisionedFor(s.backing, s.uid) ? s.backing : undefined;
  if (backing) {
    if (backing.metadata?.deletionTimestamp)
      return [{ kind: 'wait', why: 'the backing claim is being deleted' }];
    return [
      {
        kind: 'deleteBackingClaim',
        namespace: backing.metadata?.namespace ?? '',
        name: backing.metadata?.name ?? '',
        uid: backing.metadata?.uid ?? '',
      },
    ];
  }
  if (!volume) return [];
  return [
    {
      kind: 'deleteVolume',
      name: volume.metadata?.name ?? '',
      uid: volume.metadata?.uid ?? '',
      removeFinalizer: (volume.metadata?.finalizers ?? []).includes(FINALIZER_PROVISIONED),
    },
  ];
}
