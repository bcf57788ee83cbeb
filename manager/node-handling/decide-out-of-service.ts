/**
 * The out-of-service taint decision (pure): whether this manager should put
 * `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` on a node, take it off, or
 * leave the node alone. The taint makes kube-controller-manager force-detach the node's
 * volumes at once (instead of at its next attach-detach state sync, 1 min by default)
 * and its pod GC force-delete the node's terminating pods. See docs/design.md,
 * "Handing the volume over".
 *
 * Add the taint only when ALL hold:
 *  - LEASEHOLD_OUT_OF_SERVICE_TAINT is on and the manager is not observe-only;
 *  - the node is the lost node of a failover this manager runs (a share Lease marked
 *    delinquent with failover-by = this manager, whose holder-node is that node);
 *  - the node is confirmed down BY OUR OBSERVATION: its Ready condition is not True AND
 *    its heartbeat Lease (kube-node-lease) has not changed for the node lease grace,
 *    and both have held for at least the lease duration D. "Since" times are this
 *    manager's monotonic clock; no remote timestamp is compared with it;
 *  - the node carries no out-of-service taint and no leasehold mark yet.
 * Remove it (taint and mark in one write) when the node is Ready with a fresh heartbeat
 * (changed within the grace), or when the setting is off.
 *
 * Invariants:
 *  - Only a taint that carries our mark (annotation leasehold.dev/out-of-service-by) is
 *    ever removed; a taint without it is an admin's and is never touched.
 *  - A mark without the taint (an admin removed our taint while the node was down) is
 *    not re-tainted: it is only cleared once the node returns or the setting is off.
 *  - Every write is a merge patch carrying the Node's metadata.resourceVersion (a CAS):
 *    of two managers adding at once, one gets 409 and sees the other's taint next pass.
 *
 * Not guaranteed: that the node is really powered off. The taint is node-wide (every
 * pod and volume on it), which is why it is opt-in; it relies on the same observations
 * the failover does, held longer.
 */
import type { V1Lease, V1Node, V1Taint } from '@kubernetes/client-node';
import {
  ANNOTATION_DELINQUENT,
  ANNOTATION_FAILOVER_BY,
  ANNOTATION_HOLDER_NODE,
  GROUP,
} from '../../lib/lease-record.ts';

export const OUT_OF_SERVICE_TAINT_KEY = 'node.kubernetes.io/out-of-service';
export const OUT_OF_SERVICE_TAINT: Readonly<V1Taint> = {
  key: OUT_OF_SERVICE_TAINT_KEY,
  value: 'nodeshutdown',
  effect: 'NoExecute',
};
export const ANNOTATION_OUT_OF_SERVICE_BY = `${GROUP}/out-of-service-by`;

/**
 * The taint as found on a Node:
 *  - none: no out-of-service taint, no mark;
 *  - ours: our taint and our mark (set by some leasehold manager);
 *  - markOnly: our mark without our taint (someone removed the taint);
 *  - admin: an out-of-service taint without our mark: never ours to touch.
 */
export type TaintState = 'none' | 'ours' | 'markOnly' | 'admin';

export interface ObservedNode {
  ready: boolean;
  /** Our monotonic time of the last heartbeat Lease change; undefined = never seen. */
  heartbeatObservedAt: number | undefined;
  /** Our monotonic time we first saw the Node not Ready (since its last Ready); undefined while Ready. */
  notReadyObservedAt: number | undefined;
}

export interface OutOfServiceInput {
  enabled: boolean;
  observeOnly: boolean;
  /** Monotonic ms, read once per pass. */
  now: number;
  /** LEASEHOLD_NODE_LEASE_GRACE: heartbeat unchanged this long = stale. */
  graceMs: number;
  /** LEASEHOLD_LEASE_DURATION (D): how long "down" must have held before we taint. */
  holdMs: number;
  /** undefined: no Node object is known. */
  node: ObservedNode | undefined;
  taint: TaintState;
  lostNodeOfOurFailover: boolean;
}

export type NothingReason =
  | 'no-node'
  | 'admin-taint'
  | 'awaiting-return'
  | 'disabled'
  | 'observe-only'
  | 'not-our-failover'
  | 'node-ready'
  | 'heartbeat-unobserved'
  | 'not-down-long-enough';

export type OutOfServiceDecision =
  | { kind: 'add-taint'; downForMs: number }
  | { kind: 'remove-taint'; reason: 'node-returned' | 'disabled' }
  /** recheckAfterMs: when the answer may change with time alone (no new event needed). */
  | { kind: 'nothing'; reason: NothingReason; recheckAfterMs?: number };

export function decideOutOfService(input: OutOfServiceInput): OutOfServiceDecision {
  const { node, taint, now } = input;
  if (!node) return { kind: 'nothing', reason: 'no-node' };
  if (taint === 'admin') return { kind: 'nothing', reason: 'admin-taint' };
  if (taint === 'ours' || taint === 'markOnly') {
    if (!input.enabled) return { kind: 'remove-taint', reason: 'disabled' };
    const fresh = node.heartbeatObservedAt !== undefined && now - node.heartbeatObservedAt <= input.graceMs;
    if (node.ready && fresh) return { kind: 'remove-taint', reason: 'node-returned' };
    return { kind: 'nothing', reason: 'awaiting-return' };
  }
  if (!input.enabled) return { kind: 'nothing', reason: 'disabled' };
  if (input.observeOnly) return { kind: 'nothing', reason: 'observe-only' };
  if (!input.lostNodeOfOurFailover) return { kind: 'nothing', reason: 'not-our-failover' };
  if (node.ready || node.notReadyObservedAt === undefined) return { kind: 'nothing', reason: 'node-ready' };
  if (node.heartbeatObservedAt === undefined) return { kind: 'nothing', reason: 'heartbeat-unobserved' };
  // Down since both signals held: the heartbeat went stale, and we saw the node not Ready.
  const downSince = Math.max(node.heartbeatObservedAt + input.graceMs, node.notReadyObservedAt);
  const downForMs = now - downSince;
  if (downForMs < input.holdMs) {
    return { kind: 'nothing', reason: 'not-down-long-enough', recheckAfterMs: input.holdMs - downForMs };
  }
  return { kind: 'add-taint', downForMs };
}

export function taintStateOf(node: V1Node): TaintState {
  const marked = node.metadata?.annotations?.[ANNOTATION_OUT_OF_SERVICE_BY] !== undefined;
  const taints = node.spec?.taints ?? [];
  if (marked) return taints.some(isOurTaint) ? 'ours' : 'markOnly';
  return taints.some((t) => t.key === OUT_OF_SERVICE_TAINT_KEY) ? 'admin' : 'none';
}

export function isNodeReady(node: V1Node): boolean {
  return node.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
}

/**
 * Nodes that are the lost node of a failover this manager runs (share Leases marked
 * delinquent with failover-by = `identity`, by their holder-node), each with the keys
 * (namespace/name) of those Leases.
 */
export function lostNodesOfOurFailovers(leases: Iterable<V1Lease>, identity: string): Map<string, string[]> {
  const nodes = new Map<string, string[]>();
  for (const lease of leases) {
    const a = lease.metadata?.annotations ?? {};
    const node = a[ANNOTATION_HOLDER_NODE];
    if (!a[ANNOTATION_DELINQUENT] || a[ANNOTATION_FAILOVER_BY] !== identity || !node) continue;
    const key = `${lease.metadata?.namespace ?? ''}/${lease.metadata?.name ?? ''}`;
    nodes.set(node, [...(nodes.get(node) ?? []), key]);
  }
  return nodes;
}

/** The merge patch (a CAS on resourceVersion) adding our taint and our mark. */
export function addTaintPatch(node: V1Node, identity: string): object {
  return {
    metadata: {
      resourceVersion: node.metadata?.resourceVersion,
      annotations: { [ANNOTATION_OUT_OF_SERVICE_BY]: identity },
    },
    spec: { taints: [...(node.spec?.taints ?? []), { ...OUT_OF_SERVICE_TAINT }] },
  };
}

/**
 * The merge patch (a CAS on resourceVersion) removing our taint and our mark. Any other
 * taint stays (a merge patch replaces the whole list, hence the CAS).
 */
export function removeTaintPatch(node: V1Node): object {
  const kept = (node.spec?.taints ?? []).filter((t) => !isOurTaint(t));
  return {
    metadata: {
      resourceVersion: node.metadata?.resourceVersion,
      annotations: { [ANNOTATION_OUT_OF_SERVICE_BY]: null },
    },
    spec: { taints: kept.length > 0 ? kept : null },
  };
}

function isOurTaint(t: V1Taint): boolean {
  return (
    t.key === OUT_OF_SERVICE_TAINT.key &&
    t.value === OUT_OF_SERVICE_TAINT.value &&
    t.effect === OUT_OF_SERVICE_TAINT.effect
  );
}
