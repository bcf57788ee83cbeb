/**
 * PROPOSAL, not wired in (issue 11): whether the storage under a share can fence a node
 * that lost its attachment, and what a failover may do when it cannot. Pure: the caller
 * passes the PV's driver, the CSIDriver object it read (or that it could not), the lost
 * Node and our own monotonic observations; nothing here reads the API or a clock.
 *
 * Why it matters: the lease protocol fences a server that RUNS (the agent stops it within
 * T of its last renewal, the kubelet's liveness probe backs that up), but no lease stops
 * a process that was paused (a frozen VM, a stopped container runtime) from writing once
 * when it resumes, before its agent runs. Only storage that refuses a detached node's I/O
 * can (ControllerUnpublish: cloud-disk force-detach, iSCSI/RBD blocklisting), and the
 * volume handoff (volume-handoff.ts) orders that revocation before the attach elsewhere.
 * On storage without an attach step (CSIDriver attachRequired: false: NFS-backed CSI
 * drivers, hostPath-like drivers, most RWX file drivers) there is no detach, so nothing
 * revokes the old node: test/e2e/storage-fencing.test.ts shows its old server's records
 * landing after the replacement's first.
 *
 * Classification (`classifyStorage`):
 *  - `fences`: a CSI PV whose CSIDriver says attachRequired true (or omits it: the API's
 *    default is true) — the handoff's detach is the fence;
 *  - `cannot-fence`: a CSI PV whose CSIDriver says attachRequired false;
 *  - `unknown`: not a CSI PV, no CSIDriver object, or it could not be read. NB: the
 *    ADC treats a CSI PV without a CSIDriver object as attachable, so its detach still
 *    runs; but whether the driver's ControllerUnpublish revokes anything is not ours to
 *    know, so `unknown` is never counted as fencing.
 *
 * Policy (`decideNonFencingGate`, proposed setting LEASEHOLD_NONFENCING_STORAGE):
 *  - `require-node-down` (proposed default): on storage that does not fence, the
 *    failover proceeds only on evidence that the old node's processes cannot run again
 *    without a reboot: the Node carries the `node.kubernetes.io/out-of-service` taint
 *    (put there by an operator or a node-fencing controller that powered it off: that
 *    is what the taint means), or the Node object is gone (deleted by the cloud
 *    controller with its machine). Until then the share waits (serving nowhere, which is
 *    safe) with the condition StorageFencing=False, reason AwaitingNodeDown, naming what
 *    would unblock it. A NotReady node or a silent heartbeat is NOT such evidence: a
 *    frozen node is NotReady and silent too, and that is exactly the case the storage
 *    would have to fence.
 *  - `lease-only`: fail over on the lease protocol alone (leasehold's behaviour before
 *    this; fast), accepting that a paused old server may write once more on resume;
 *    the condition says StorageFencing=False, reason LeaseOnly.
 *  - `fences` storage always proceeds (StorageFencing=True).
 * Not guaranteed: the out-of-service taint is trusted as the operator's word; nothing
 * checks the machine is really off.
 */

export type StorageFencingKind = 'fences' | 'cannot-fence' | 'unknown';

export interface StorageFencing {
  kind: StorageFencingKind;
  reason: string;
}

export type CsiDriverRead =
  | { kind: 'found'; attachRequired: boolean | undefined }
  | { kind: 'missing' }
  | { kind: 'unreadable'; error: string };

export function classifyStorage(
  pv: { name: string; csiDriver: string | undefined },
  driver: CsiDriverRead,
): StorageFencing {
  if (pv.csiDriver === undefined)
    return {
      kind: 'unknown',
      reason: `PV ${pv.name} is not a CSI volume: whether its detach revokes access is unknown`,
    };
  const d = pv.csiDriver;
  switch (driver.kind) {
    case 'missing':
      return { kind: 'unknown', reason: `CSIDriver ${d} (of PV ${pv.name}) does not exist` };
    case 'unreadable':
      return {
        kind: 'unknown',
        reason: `CSIDriver ${d} (of PV ${pv.name}) could not be read: ${driver.error}`,
      };
    case 'found':
      return driver.attachRequired === false
        ? {
            kind: 'cannot-fence',
            reason: `CSIDriver ${d} has attachRequired: false: no detach, nothing revokes the old node's access to PV ${pv.name}`,
          }
        : {
            kind: 'fences',
            reason: `CSIDriver ${d} attaches PV ${pv.name}: its detach revokes the old node's access`,
          };
  }
}

export const NONFENCING_POLICIES = ['require-node-down', 'lease-only'] as const;
export type NonFencingPolicy = (typeof NONFENCING_POLICIES)[number];

export const OUT_OF_SERVICE_TAINT = 'node.kubernetes.io/out-of-service';

export interface GateInput {
  storage: StorageFencing;
  policy: NonFencingPolicy;
  lostNode: string;
  /** The lost Node's taint keys; undefined when the Node object is gone. */
  nodeTaints: readonly string[] | undefined;
}

export interface FencingCondition {
  type: 'StorageFencing';
  status: 'True' | 'False';
  reason: 'StorageFences' | 'AwaitingNodeDown' | 'NodeDown' | 'LeaseOnly';
  message: string;
}

export type GateDecision =
  | { kind: 'proceed'; condition: FencingCondition }
  | { kind: 'wait'; condition: FencingCondition };

export function decideNonFencingGate(input: GateInput): GateDecision {
  const { storage, lostNode } = input;
  if (storage.kind === 'fences')
    return {
      kind: 'proceed',
      condition: { type: 'StorageFencing', status: 'True', reason: 'StorageFences', message: storage.reason },
    };
  if (input.policy === 'lease-only')
    return {
      kind: 'proceed',
      condition: {
        type: 'StorageFencing',
        status: 'False',
        reason: 'LeaseOnly',
        message: `${storage.reason}; failing over on the lease alone (policy lease-only): a paused old server on ${lostNode} may write once more when it resumes`,
      },
    };
  const down =
    input.nodeTaints === undefined
      ? `node ${lostNode} is gone (Node object deleted)`
      : input.nodeTaints.includes(OUT_OF_SERVICE_TAINT)
        ? `node ${lostNode} has the ${OUT_OF_SERVICE_TAINT} taint`
        : undefined;
  if (down)
    return {
      kind: 'proceed',
      condition: {
        type: 'StorageFencing',
        status: 'False',
        reason: 'NodeDown',
        message: `${storage.reason}; ${down}`,
      },
    };
  return {
    kind: 'wait',
    condition: {
      type: 'StorageFencing',
      status: 'False',
      reason: 'AwaitingNodeDown',
      message: `${storage.reason}; waiting for evidence that node ${lostNode} is down (the ${OUT_OF_SERVICE_TAINT} taint, or its Node deleted) before failing over (policy require-node-down; lease-only fails over on the lease alone)`,
    },
  };
}
