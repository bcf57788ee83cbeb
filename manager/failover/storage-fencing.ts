/**
 * Whether the storage under a share can fence a node that lost its attachment, and what
 * a failover may do when it cannot (issue 11). Pure: the caller passes the PV's driver,
 * the CSIDriver object it read (or that it could not), what it read of the lost Node and
 * the policy; nothing here reads the API or a clock. The failover driver runs this gate
 * on every stale verdict, after the storm guard and before the delinquent mark
 * (failover-transitions.ts: `checkingStorage`, `awaitingNodeDown`); the reads are the
 * executor's (execute-failover.ts `readStorageGate`).
 *
 * Why it matters: the lease protocol fences a server that RUNS (the agent stops it within
 * T of its last renewal, the kubelet's liveness probe backs that up), but no lease stops
 * a process that was paused (a frozen VM, a stopped container runtime) from writing once
 * when it resumes, before its agent runs. Only storage that refuses a detached node's I/O
 * can (ControllerUnpublish: cloud-disk force-detach, iSCSI/RBD blocklisting), and the
 * volume handoff (volume-handoff.ts) orders that revocation before the attach elsewhere.
 * On storage without an attach step (CSIDriver attachRequired: false: NFS-backed CSI
 * drivers, hostPath-like drivers, most RWX file drivers) there is no detach, so nothing
 * revokes the old node: a paused old server's records land after the replacement's first
 * when it fails over on the lease alone (shown on the sim by the removed
 * storage-fencing.test.ts; docs/testing.md).
 *
 * Classification (`classifyStorage`):
 *  - `fences`: a CSI PV whose CSIDriver says attachRequired true (or omits it: the API's
 *    default is true) — the handoff's detach is the fence. NB: this trusts the driver's
 *    word: that its ControllerUnpublish really cuts the node off is the driver's promise
 *    (a driver may say attachRequired true and revoke nothing: the testbed's driver
 *    outside its fencing mode, dev/csi/README.md);
 *  - `cannot-fence`: a CSI PV whose CSIDriver says attachRequired false;
 *  - `unknown`: the claim unbound or gone, not a CSI PV (hostPath, local, in-tree
 *    plugins), no CSIDriver object, or it could not be read. NB: the ADC treats a CSI PV
 *    without a CSIDriver object as attachable, so its detach still runs; but whether the
 *    driver's ControllerUnpublish revokes anything is not ours to know, so `unknown` is
 *    never counted as fencing.
 *
 * Policy (`decideNonFencingGate`, LEASEHOLD_NONFENCING_STORAGE):
 *  - `require-node-down` (default): on storage that does not fence, the failover
 *    proceeds only on evidence that the old node's processes cannot run again without a
 *    reboot: the Node carries the `node.kubernetes.io/out-of-service` taint put there by
 *    someone else than leasehold (an operator or a node-fencing controller that powered
 *    it off: that is what the taint means), or the Node object is gone (deleted by the
 *    cloud controller with its machine). Until then the share waits (serving nowhere,
 *    which is safe; its lease is not marked, so a holder that comes back renews and
 *    serves on) with the condition StorageFencing=False, reason AwaitingNodeDown, naming
 *    what would unblock it. A NotReady node or a silent heartbeat is NOT such evidence:
 *    a frozen node is NotReady and silent too, and that is exactly the case the storage
 *    would have to fence. Nor is leasehold's own out-of-service taint
 *    (LEASEHOLD_OUT_OF_SERVICE_TAINT, annotation leasehold.dev/out-of-service-by): it
 *    rests on those same observations. A lost node that is not known at all (the lease
 *    names no node and its pod is unknown) is never "gone".
 *  - `lease-only`: fail over on the lease protocol alone (leasehold's behaviour before
 *    this; fast), accepting that a paused old server may write once more on resume;
 *    the condition says StorageFencing=False, reason LeaseOnly.
 *  - `fences` storage always proceeds (StorageFencing=True, reason StorageFences).
 * Not guaranteed: the out-of-service taint is trusted as the operator's word; nothing
 * checks the machine is really off.
 */
import type { V1Node } from '@kubernetes/client-node';
import type { NonFencingPolicy } from '../config.ts';
import { OUT_OF_SERVICE_TAINT_KEY, taintStateOf } from '../node-handling/decide-out-of-service.ts';

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

/** A claim without a PV to classify (unbound, or gone): `unknown`, never fencing. */
export function unclassifiable(claim: string, why: string): StorageFencing {
  return { kind: 'unknown', reason: `PVC ${claim} ${why}: what the old server wrote to is unknown` };
}

export const OUT_OF_SERVICE_TAINT = OUT_OF_SERVICE_TAINT_KEY;

/**
 * What the executor read of the lost Node: `present` with whose out-of-service taint it
 * carries (`leasehold`: one with leasehold's out-of-service-by annotation), `gone` (404),
 * or `unknown` (the failover does not know the lost node's name: nothing was read).
 */
export type LostNodeRead =
  | { kind: 'present'; outOfService: 'none' | 'other' | 'leasehold' }
  | { kind: 'gone' }
  | { kind: 'unknown' };

/** The Node as read (undefined: 404) to what the gate needs of it. */
export function readLostNode(node: V1Node | undefined): LostNodeRead {
  if (!node) return { kind: 'gone' };
  switch (taintStateOf(node)) {
    case 'ours':
      return { kind: 'present', outOfService: 'leasehold' };
    case 'admin':
      return { kind: 'present', outOfService: 'other' };
    case 'markOnly':
      // Our mark, and an out-of-service taint that is not the one we add: someone else's.
      return {
        kind: 'present',
        outOfService: (node.spec?.taints ?? []).some((t) => t.key === OUT_OF_SERVICE_TAINT_KEY)
          ? 'other'
          : 'none',
      };
    case 'none':
      return { kind: 'present', outOfService: 'none' };
  }
}

export interface GateInput {
  storage: StorageFencing;
  policy: NonFencingPolicy;
  /** The lost node's name ('' when unknown). */
  lostNode: string;
  node: LostNodeRead;
}

export const FENCING_REASONS = [
  'StorageFences',
  'AwaitingNodeDown',
  'NodeDown',
  'LeaseOnly',
  'HolderReturned',
] as const;

export interface FencingCondition {
  type: 'StorageFencing';
  status: 'True' | 'False';
  reason: (typeof FENCING_REASONS)[number];
  message: string;
}

export type GateDecision =
  | { kind: 'proceed'; condition: FencingCondition }
  | { kind: 'wait'; condition: FencingCondition };

const condition = (
  status: FencingCondition['status'],
  reason: FencingCondition['reason'],
  message: string,
): FencingCondition => ({ type: 'StorageFencing', status, reason, message });

export function decideNonFencingGate(input: GateInput): GateDecision {
  const { storage, node } = input;
  const lostNode = input.lostNode || '(unknown)';
  if (storage.kind === 'fences')
    return { kind: 'proceed', condition: condition('True', 'StorageFences', storage.reason) };
  if (input.policy === 'lease-only')
    return {
      kind: 'proceed',
      condition: condition(
        'False',
        'LeaseOnly',
        `${storage.reason}; failing over on the lease alone (LEASEHOLD_NONFENCING_STORAGE=lease-only): a paused old server on node ${lostNode} may write once more when it resumes`,
      ),
    };
  if (node.kind === 'gone')
    return {
      kind: 'proceed',
      condition: condition(
        'False',
        'NodeDown',
        `${storage.reason}; node ${lostNode} is gone (Node object deleted)`,
      ),
    };
  if (node.kind === 'present' && node.outOfService === 'other')
    return {
      kind: 'proceed',
      condition: condition(
        'False',
        'NodeDown',
        `${storage.reason}; node ${lostNode} has the ${OUT_OF_SERVICE_TAINT} taint (trusted: its machine is off)`,
      ),
    };
  const why =
    node.kind === 'unknown'
      ? "the lost pod's node is not known, so no evidence can show it down"
      : node.outOfService === 'leasehold'
        ? `the ${OUT_OF_SERVICE_TAINT} taint on node ${lostNode} is leasehold's own (NotReady and a silent heartbeat, which a frozen node shows too), not evidence that it is off`
        : `node ${lostNode} is not known to be down`;
  return {
    kind: 'wait',
    condition: condition(
      'False',
      'AwaitingNodeDown',
      `${storage.reason}; not failing over until node ${lostNode} is known to be down (${why}): power it off and add the taint ${OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute, or delete its Node object; or set LEASEHOLD_NONFENCING_STORAGE=lease-only to fail over on the lease alone`,
    ),
  };
}

/**
 * The condition after the lease moved again while the share waited: its holder renewed,
 * or the reconciler freed it for a pod the kubelet reported ended (the node came back).
 */
export function holderReturned(storage: StorageFencing, lostNode: string): FencingCondition {
  return condition(
    'False',
    'HolderReturned',
    `${storage.reason}; the lease moved again while the share waited for node-down evidence (renewed by its holder on node ${lostNode || '(unknown)'}, or freed after the kubelet there reported the pod ended): no failover`,
  );
}

/** Whether `next` says something else than the condition the status holds (write only then). */
export function conditionChanged(
  current: { status?: string; reason?: string; message?: string } | undefined,
  next: FencingCondition,
): boolean {
  return (
    current?.status !== next.status || current.reason !== next.reason || current.message !== next.message
  );
}
