/**
 * Expansion of a provisioned share (pure), the way Kubernetes' external-resizer expands a
 * CSI volume, with the backing claim as the volume: a bound claim of ours whose request
 * grew past its PV's capacity.
 *
 *   1. the backing claim's request is raised to the new size (the claim shows condition
 *      Resizing, status.allocatedResources = the new size and allocatedResourceStatuses
 *      storage = ControllerResizeInProgress; event Resizing);
 *   2. wait until the backing claim's status.capacity reaches it: its CSI resizer grew the
 *      volume and, for a file system, the kubelet of the server's node grew the file
 *      system online, under the running server (the kubelet updates status.capacity only
 *      after NodeExpandVolume: that is our evidence that the export has grown);
 *   3. the PV's capacity is updated, then the claim's status.capacity, the condition and
 *      allocatedResourceStatuses cleared (event VolumeResizeSuccessful).
 * A backing class that cannot expand: the API server refuses step 1; the executor reports
 * VolumeResizeFailed with its words and sets allocatedResourceStatuses storage =
 * ControllerResizeInfeasible; nothing else changes.
 * Shrinking is not offered (Kubernetes refuses a smaller request of a bound claim).
 */
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import { storageBytes } from './storage-quantity.ts';

/** allocatedResourceStatuses values, as Kubernetes' resizers write them. */
export const IN_PROGRESS = 'ControllerResizeInProgress';
export const INFEASIBLE = 'ControllerResizeInfeasible';

export type ExpansionAction =
  | { kind: 'expandBacking'; namespace: string; name: string; size: string }
  | { kind: 'expandVolume'; name: string; size: string }
  | { kind: 'claimResized'; size: string }
  | { kind: 'wait'; why: string };

export interface ExpansionSnapshot {
  claim: V1PersistentVolumeClaim;
  storageClass: V1StorageClass | undefined;
  backing: V1PersistentVolumeClaim | undefined;
  volume: V1PersistentVolume;
}

export function decideExpansion(s: ExpansionSnapshot): ExpansionAction[] {
  if (s.volume.status?.phase !== 'Bound' || s.claim.spec?.volumeName !== s.volume.metadata?.name) return [];
  const wantText = String(s.claim.spec?.resources?.requests?.storage ?? '');
  const want = storageBytes(wantText);
  const pvText = String(s.volume.spec?.capacity?.storage ?? '');
  const pv = storageBytes(pvText);
  if (want === undefined || pv === undefined) return [];
  const claimStatus = storageBytes(String(s.claim.status?.capacity?.storage ?? ''));
  if (want <= pv) {
    // Done, or done but the claim's status not yet written (a kill between the two).
    const inProgress = s.claim.status?.allocatedResourceStatuses?.storage !== undefined;
    if ((claimStatus !== undefined && claimStatus < pv) || inProgress)
      return [{ kind: 'claimResized', size: pvText }];
    return [];
  }
  if (!s.storageClass?.allowVolumeExpansion) return [];
  if (!s.backing) return [{ kind: 'wait', why: 'the backing claim is not known' }];
  // Refused for this size (the backing class cannot expand): until the request changes.
  const allocated = s.claim.status?.allocatedResources?.storage;
  if (
    s.claim.status?.allocatedResourceStatuses?.storage === INFEASIBLE &&
    allocated !== undefined &&
    storageBytes(String(allocated)) === want
  )
    return [];
  const backingRequest = storageBytes(String(s.backing.spec?.resources?.requests?.storage ?? ''));
  if (backingRequest === undefined || backingRequest < want)
    return [
      {
        kind: 'expandBacking',
        namespace: s.backing.metadata?.namespace ?? '',
        name: s.backing.metadata?.name ?? '',
        size: wantText,
      },
    ];
  const backingCapacity = storageBytes(String(s.backing.status?.capacity?.storage ?? ''));
  if (backingCapacity === undefined || backingCapacity < want)
    return [{ kind: 'wait', why: 'the backing volume and its file system are being expanded' }];
  return [{ kind: 'expandVolume', name: s.volume.metadata?.name ?? '', size: wantText }];
}
