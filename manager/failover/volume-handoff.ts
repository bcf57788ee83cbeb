/**
 * How a failover hands the share's volume from the lost node to the replacement (pure:
 * `decideHandoff` takes a snapshot, with the monotonic times of our own observations it
 * needs, and returns one action; execute-failover.ts does the I/O). Runs in the failover's `detaching` step, i.e. only after the lease
 * protocol proved the old holder fenced (stale by our own observation for D, our
 * delinquent mark won by CAS on the version the verdict was about) and the lost pod was
 * force-deleted.
 *
 * Modes (LEASEHOLD_VOLUME_HANDOFF):
 *  - `volumes-in-use` (default): remove this one volume from the lost node's
 *    `status.volumesInUse` (JSON patch: `test` the entry at its index, `remove` it).
 *  - `volume-attachment`: delete the volume's VolumeAttachment on the lost node (the
 *    behaviour before; the attach-detach controller (ADC) learns it only at its state
 *    sync, 1 min by default, and refuses to attach elsewhere until then: Multi-Attach).
 *  - `none`: leave the volume to Kubernetes (the ADC force-detaches after 6 min, or
 *    at once with the out-of-service taint).
 *
 * Why `volumes-in-use` works, from the v1.36 ADC (pkg/controller/volume/attachdetach):
 *  - Once the pod is gone the volume is no longer desired on the lost node. The
 *    reconciler (every 100 ms) then detaches it unless it is `MountedByNode`, which is
 *    exactly "listed in that node's status.volumesInUse" (processVolumesInUse on every
 *    Node update event). A crashed kubelet never clears it, so without us the detach
 *    waits for maxWaitForUnmountDuration (6 min, and only while the node is NotReady)
 *    or the node-wide out-of-service taint.
 *  - Without the entry the reconciler starts a normal ("safe") detach: the operation
 *    re-reads the Node from the API and refuses if the entry is back
 *    (verifyVolumeIsSafeToDetach), then deletes the VolumeAttachment and waits until it
 *    is gone, i.e. until the external-attacher ran ControllerUnpublish and removed its
 *    finalizer. Only then does the ADC's actual state drop the old node, and only then
 *    does it attach an RWO/RWOP volume anywhere else. That is the handoff order: the old
 *    node's access is revoked before the new node gets any, enforced by the ADC itself.
 *  - For a PV whose access modes allow multi-attach (RWX/ROX) the ADC does not order
 *    detach before attach: the executor then waits for the old VolumeAttachment to be
 *    gone before the replacement is created (`waitDetached`), also when this step does
 *    nothing itself (mode `none`, the lost Node object already gone): such storage
 *    fences only once the old attachment is gone.
 *
 * What it touches: one entry of one Node's status. Nothing else of the node: its other
 * volumes stay in volumesInUse (the patch removes one index after testing its value),
 * its other pods are not deleted, no taint is added. The entry only matters to the ADC
 * for a volume that is attached there and no longer desired there, i.e. ours.
 *
 * Evidence and races:
 *  - The old holder is fenced by the lease protocol, not by this step; the volume's
 *    detach only adds a second fence (storage that revokes a detached node's I/O).
 *  - Node heartbeat (our own observation of its kube-node-lease Lease): a heartbeat
 *    seen after the old holder's renew deadline had passed (holder silent since S, seen
 *    at h > S + T) proves the node's kubelet alive after the agent gave up. The kubelet
 *    then is the authority on volumesInUse: it saw the force-deletion, unmounts and
 *    clears the entry itself, and the ADC detaches normally. So we leave it
 *    (`leaveToKubelet`) — unless it still lists the entry
 *    LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT (30 s) after the force-delete while the
 *    replacement waits (`unmountOverdue`, the driver's unmount check, `unmountCheckAt`;
 *    it also follows a `releaseInUse`, whose entry a live kubelet may put back before
 *    the ADC started the detach, see "A node that was alive after all" below):
 *    then the lost pod's processes did not stop (a frozen cgroup, uninterruptible I/O),
 *    the kubelet cannot unmount under them, and on a healthy node the ADC never
 *    force-detaches (its 6 min timeout applies to a NotReady node only), so the share
 *    would wait for as long as they hang. We remove the entry as for a dead node. Safe
 *    for the same reason: the lease protocol already gave the volume away (the hung
 *    server, if it ever runs again, finds its lease lost and its agent fences it), and
 *    the detach revokes the node's access on storage that fences (the only storage the
 *    gate lets fail over at once: storage-fencing.ts). NB: a heartbeat sent before a crash but delivered to us late
 *    (after a watch gap) counts too; the volume then waits for the ADC's own timeout
 *    (6 min on a NotReady node) or the out-of-service taint: slower, never unsafe.
 *    NB: with the default 10 s heartbeat the absence of a heartbeat
 *    in the few seconds before the verdict does not prove the node dead; it is no
 *    evidence of life, which is all this step needs (see next point).
 *  - A node that was alive after all (or only partitioned): its kubelet re-adds the
 *    entry at its next status update while the volume is still mounted (it computes
 *    volumesInUse from its own volume manager and patches the list whole). If that lands
 *    before the ADC's detach started, the ADC does not detach and waits for the kubelet
 *    to unmount (the pod is deleted, so it will). If after, the volume is detached under
 *    a mount whose server the lease protocol already fenced (a force-deletion does not
 *    wait for the kubelet, so that mount may still exist): the same as deleting the
 *    VolumeAttachment, which the `volume-attachment` mode does unconditionally. When
 *    the partition heals, the kubelet finds no pod, unmounts, and may list the entry
 *    until then; the ADC ignores it (the volume is attached elsewhere and desired only
 *    there), and nothing schedules the share back (anti-affinity, Multi-Attach for RWO).
 *  - Our patch races the ADC's own status writes (volumesAttached only) and the kubelet
 *    (see above): a JSON patch `test` on the entry makes ours remove exactly that entry
 *    or fail with 422, after which the executor reads the Node again and decides again.
 *
 * Not guaranteed: storage without an attach step (no VolumeAttachment, CSIDriver
 * attachRequired false) has nothing to detach and cannot fence; in-tree (non-CSI) PVs
 * fall back to deleting the VolumeAttachment (their unique volume names are plugin-
 * specific); a PV the ADC never saw attached is left alone.
 */
import type { VolumeHandoffMode } from '../config.ts';

export interface HandoffPv {
  name: string;
  /** spec.csi, when the PV is a CSI volume. */
  csi: { driver: string; volumeHandle: string } | undefined;
  /** RWX or ROX: the ADC allows attachments on several nodes at once. */
  multiAttach: boolean;
}

export interface HandoffInput {
  mode: VolumeHandoffMode;
  lostNode: string;
  /** The PVC's bound PV; undefined when the PVC is gone or unbound. */
  pv: HandoffPv | undefined;
  /** The lost Node's status.volumesInUse; undefined when the Node object is gone. */
  volumesInUse: readonly string[] | undefined;
  /** VolumeAttachments of the PV on the lost node (names). */
  attachments: readonly string[];
  /** A live pod of this share manager other than the lost one on the lost node. */
  newerPodOnNode: string | undefined;
  /**
   * Our monotonic time of the last change of the node's heartbeat Lease we actually saw
   * (a watch reset does not move it); undefined = never seen.
   */
  heartbeatChangedAt: number | undefined;
  /** Our monotonic time of the lost holder's last observed renewal (the verdict's); undefined after a takeover. */
  holderSilentSince: number | undefined;
  /** The old holder's renew deadline T: by S + T it renewed or fenced itself. */
  renewDeadlineMs: number;
  /**
   * The kubelet was left to clear the entry and still lists it LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT
   * after the force-delete (the driver's unmount check): the heartbeat rule no longer applies.
   */
  unmountOverdue?: boolean;
}

export type HandoffDecision =
  /** `waitDetached`: a multi-attach PV still attached there: the replacement waits for that attachment to go. */
  | { kind: 'nothing'; reason: string; waitDetached?: boolean }
  /** `kubeletAlive`: left because the node's heartbeat proved its kubelet alive (the unmount check then watches it). */
  | { kind: 'leaveToKubelet'; reason: string; waitDetached: boolean; kubeletAlive: boolean }
  | { kind: 'releaseInUse'; uniqueName: string; index: number; waitDetached: boolean }
  | { kind: 'deleteAttachments'; names: readonly string[]; reason: string; waitDetached: boolean };

/** As the kubelet and the ADC name a CSI volume: kubernetes.io/csi/<driver>^<volumeHandle>. */
export function csiUniqueVolumeName(driver: string, volumeHandle: string): string {
  return `kubernetes.io/csi/${driver}^${volumeHandle}`;
}

export function decideHandoff(input: HandoffInput): HandoffDecision {
  const { mode, pv, attachments } = input;
  // A PV that allows multi-attach (RWX/ROX): the controller attaches it elsewhere without
  // detaching it first, so whatever this step does or leaves, nothing revokes the lost
  // node before the replacement serves unless the replacement waits for that attachment
  // to go. Counted as fencing only then (the gate's StorageFences trusts the detach).
  const multiAttached = pv?.multiAttach === true && attachments.length > 0;
  const awaitOld =
    ' (the PV allows multi-attach and is attached there: the replacement waits for that attachment to go)';
  if (mode === 'none')
    return multiAttached
      ? { kind: 'nothing', reason: `volume handoff disabled (mode none)${awaitOld}`, waitDetached: true }
      : { kind: 'nothing', reason: 'volume handoff disabled (mode none)' };
  if (input.lostNode === '') return { kind: 'nothing', reason: 'the lost pod had no node' };
  // NB: a newer pod of this share manager on that node (e.g. the node came back) may be
  // using the attachment: then it is not ours to release.
  if (input.newerPodOnNode)
    return { kind: 'nothing', reason: `pod ${input.newerPodOnNode} of this share manager runs on that node` };
  if (!pv) return { kind: 'nothing', reason: 'the claim has no bound volume' };
  const waitDetached = pv.multiAttach;
  if (mode === 'volume-attachment') {
    if (attachments.length === 0) return { kind: 'nothing', reason: 'no VolumeAttachment on that node' };
    return { kind: 'deleteAttachments', names: attachments, reason: 'mode volume-attachment', waitDetached };
  }
  if (!pv.csi) {
    if (attachments.length === 0) return { kind: 'nothing', reason: 'no VolumeAttachment on that node' };
    return {
      kind: 'deleteAttachments',
      names: attachments,
      reason: `PV ${pv.name} is not a CSI volume (its unique name is plugin-specific)`,
      waitDetached,
    };
  }
  // NB: a second look finds the kubelet re-listing a volume already detached there
  // (still mounted under the hung processes): nothing of ours is left on that node.
  if (input.unmountOverdue && attachments.length === 0)
    return { kind: 'nothing', reason: 'no VolumeAttachment left on that node: already detached' };
  const heard = input.heartbeatChangedAt;
  const silent = input.holderSilentSince;
  if (
    !input.unmountOverdue &&
    heard !== undefined &&
    silent !== undefined &&
    heard > silent + input.renewDeadlineMs
  )
    return {
      kind: 'leaveToKubelet',
      reason: `node ${input.lostNode} heartbeat seen ${Math.round(heard - silent)} ms after the holder's last renewal (renew deadline ${input.renewDeadlineMs} ms): its kubelet is alive and clears volumesInUse itself`,
      waitDetached,
      kubeletAlive: true,
    };
  if (input.volumesInUse === undefined)
    return multiAttached
      ? { kind: 'nothing', reason: `node ${input.lostNode} is gone${awaitOld}`, waitDetached: true }
      : { kind: 'nothing', reason: `node ${input.lostNode} is gone` };
  const uniqueName = csiUniqueVolumeName(pv.csi.driver, pv.csi.volumeHandle);
  const index = input.volumesInUse.indexOf(uniqueName);
  if (index < 0) {
    return attachments.length === 0
      ? { kind: 'nothing', reason: 'not attached to that node and not in use there' }
      : {
          kind: 'leaveToKubelet',
          reason: "not in that node's volumesInUse: the controller detaches it",
          waitDetached,
          kubeletAlive: false,
        };
  }
  return { kind: 'releaseInUse', uniqueName, index, waitDetached };
}

/**
 * When the unmount check looks at a volume left to a live kubelet, or released while
 * its kubelet may still put the entry back: the force-delete
 * plus LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT, then every UNMOUNT_RECHECK_MS after a forced
 * release, at most UNMOUNT_FORCE_ATTEMPTS times (the kubelet may re-add the entry
 * before the attach-detach controller started the detach); undefined: no more checks
 * (the check is off, or the attempts are spent).
 */
export function unmountCheckAt(
  podDeletedAt: number,
  timeoutMs: number,
  forcedSoFar: number,
): number | undefined {
  if (timeoutMs <= 0 || forcedSoFar >= UNMOUNT_FORCE_ATTEMPTS) return undefined;
  return podDeletedAt + timeoutMs + forcedSoFar * UNMOUNT_RECHECK_MS;
}
export const UNMOUNT_RECHECK_MS = 10_000;
export const UNMOUNT_FORCE_ATTEMPTS = 3;

/** The JSON patch that removes exactly `uniqueName` at `index` (422 when the list moved). */
export function releaseInUsePatch(uniqueName: string, index: number): object[] {
  return [
    { op: 'test', path: `/status/volumesInUse/${index}`, value: uniqueName },
    { op: 'remove', path: `/status/volumesInUse/${index}` },
  ];
}

/** One line for status.lastFailover.volumeHandoff and the VolumeHandoff event. */
export function describeHandoff(d: HandoffDecision, lostNode: string, pv: string | undefined): string {
  switch (d.kind) {
    case 'nothing':
      return `nothing to hand off: ${d.reason}`;
    case 'leaveToKubelet':
      return `left to Kubernetes: ${d.reason}`;
    case 'releaseInUse':
      return `removed ${d.uniqueName} (PV ${pv ?? '?'}) from node ${lostNode} status.volumesInUse; the attach-detach controller detaches it there before attaching it elsewhere`;
    case 'deleteAttachments':
      return `deleted VolumeAttachment ${d.names.join(', ')} on node ${lostNode} (${d.reason})`;
  }
}
