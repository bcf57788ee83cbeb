/**
 * Whether a failover's replacement pod was lost with its node before its agent acquired
 * the Lease (pure: the driver passes what it observed and its monotonic `now`; nothing
 * here reads the API or a clock). The failover driver asks this while it waits in
 * `awaitingAcquire` (and a follower in `followingAcquire`); a `lost` answer sends the
 * owner round again with the replacement as the lost pod and its node as the lost node
 * (failover-transitions.ts `replacementLost`).
 *
 * Why: a replacement whose node crashes, freezes or is cut off before its agent acquires
 * never "ends" in the API (no kubelet reports it), and the Lease stays as the failover
 * left it (delinquent, naming the old holder), so no stale verdict ever comes. Without
 * this rule the share waits for Kubernetes' own eviction (300 s tolerations), and a pod
 * on a dead node then stays Terminating.
 *
 * The rule (`judgeReplacement`): `lost` only when ALL hold:
 *  - the Lease is not acquired by anyone since the failover marked it: it is still
 *    delinquent and names the lost holder (an acquisition clears the mark: the normal
 *    protocol then owns the share, and a silent new holder goes stale like any other);
 *  - the replacement is scheduled (spec.nodeName set): an unscheduled pod waits for the
 *    scheduler, not for a node;
 *  - that node's heartbeat Lease (kube-node-lease) has been seen by THIS manager at least
 *    once, and has not changed for `D + P` by our monotonic clock, where `D` is the lease
 *    duration of the share and `P` the node's heartbeat period as we observed it (the
 *    longest of the last few intervals between two changes we saw; the kubelet's is 10 s,
 *    the simulator's 2 s). The silence is counted from our last observation, which a
 *    watch (re)connect other than a routine re-watch moves to "now", and there is no
 *    heartbeat at all while the watch is broken (the blindness rule, node-observer.ts): a
 *    gap in our own view is never taken for a silent node. The threshold is capped at
 *    max(D, node lease grace): a node silent for the grace is unhealthy anyway.
 * NB: `D` alone is not enough: with the kubelet's 10 s heartbeat a healthy node is
 * silent for more than the default D = 6 s between two beats, and killing a healthy
 * replacement that waits for its volume's attach (up to a minute) would be churn. The
 * Node's Ready condition is not used (it lags by the node-monitor grace, 40 s, and is
 * written by another clock's judgement); remote timestamps are never compared with ours.
 *
 * Safety (docs/design.md, "A replacement lost before it acquired"):
 *  - A replacement that never acquired never started its server: a user's server
 *    container starts only after the agent's startup probe (/readyz) passes, the shipped
 *    NFS entrypoint starts ganesha only on /readyz's `ok: lease held`; both come after the
 *    agent's CAS naming its pod succeeded. So there is nothing to fence on its node, and the
 *    storage-fencing gate (about a server that may still run) has nothing to say there.
 *  - An acquisition racing this verdict (committed but not yet seen by us) is harmless:
 *    the agent's acquisition and every later write are CASes on the Lease, so there is
 *    exactly one holder at any time; a newer replacement's agent takes a non-delinquent
 *    lease only after D of silence by its own observation (agent/lease-decision.ts), and
 *    the old one fences on any loss. The force-deleted racer either keeps renewing (it
 *    serves alone until its kubelet stops it and it releases) or goes silent and is
 *    taken over like any dead holder.
 * Not guaranteed: a node whose heartbeats stop while its pods run on (kubelet crashed
 * alone) is judged lost too; that is safe by the above, at the cost of a needless move.
 */

import type { HeartbeatSeen } from '../detection/node-health.ts';

export interface ReplacementInput {
  /** Monotonic ms, read once. */
  now: number;
  /** The share's lease duration D. */
  durationMs: number;
  /** LEASEHOLD_NODE_LEASE_GRACE: the cap of the threshold, and P while unknown. */
  graceMs: number;
  /** The Lease is still delinquent and names the lost holder (nobody acquired it since the mark). */
  leaseUnacquired: boolean;
  /** The replacement pod's spec.nodeName ('' while unscheduled). */
  node: string;
  /** That node's heartbeat as we saw it; undefined = never seen. */
  heartbeat: HeartbeatSeen | undefined;
}

/** `waiting`: not lost now; `recheckAt` (monotonic) is when it could first be, undefined = on the next change only. */
export type ReplacementVerdict = NodeSilence;

/** The silence after which a node counts as lost: D + P, capped at max(D, grace). */
export function lostNodeThreshold(durationMs: number, graceMs: number, periodMs: number | undefined): number {
  return Math.min(durationMs + (periodMs ?? graceMs), Math.max(durationMs, graceMs));
}

export type NodeSilence =
  | { kind: 'lost'; node: string; silentMs: number; thresholdMs: number }
  | { kind: 'waiting'; reason: string; recheckAt: number | undefined };

/**
 * Whether `node` counts as lost by our observation of its heartbeat: silent for D + P
 * (lostNodeThreshold). Never lost without a heartbeat seen. Shared with owner-lost.ts.
 */
export function judgeNodeSilence(
  now: number,
  durationMs: number,
  graceMs: number,
  node: string,
  hb: HeartbeatSeen | undefined,
): NodeSilence {
  if (!hb)
    return {
      kind: 'waiting',
      reason: `no heartbeat of node ${node} seen: no evidence it is lost`,
      recheckAt: undefined,
    };
  const thresholdMs = lostNodeThreshold(durationMs, graceMs, hb.periodMs);
  const silentMs = now - hb.observedAt;
  if (silentMs >= thresholdMs) return { kind: 'lost', node, silentMs, thresholdMs };
  return {
    kind: 'waiting',
    reason: `node ${node} heartbeat seen ${Math.round(silentMs)} ms ago (lost after ${Math.round(thresholdMs)} ms)`,
    recheckAt: hb.observedAt + thresholdMs,
  };
}

export function judgeReplacement(input: ReplacementInput): ReplacementVerdict {
  if (!input.leaseUnacquired)
    return { kind: 'waiting', reason: 'the lease was acquired since the mark', recheckAt: undefined };
  if (input.node === '')
    return { kind: 'waiting', reason: 'the replacement is not scheduled yet', recheckAt: undefined };
  return judgeNodeSilence(input.now, input.durationMs, input.graceMs, input.node, input.heartbeat);
}
