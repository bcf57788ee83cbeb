/**
 * Whether the manager that owns a failover (the lease's failover-by) went down with its
 * node, judged by a follower (pure: the driver passes what it observed and its monotonic
 * `now`). A `lost` answer is the event `ownerLost`: the follower takes over at once (a
 * CAS on failover-by) instead of after LEASEHOLD_FAILOVER_TAKEOVER_TIMEOUT (30 s). It is
 * asked only in `following`, where the takeover timer runs; while the owner's replacement
 * lives (`followingAcquire`) there is nothing to take over.
 *
 * Why: managers run on the nodes (a DaemonSet), so the node that dies in the middle of a
 * failover can be the owner's own; most often it is the node the owner put the
 * replacement on, already judged lost by the same evidence (replacement-lost.ts). Before
 * this rule the share then waited out the whole takeover timeout.
 *
 * The rule (`judgeOwner`): `lost` only when ALL hold:
 *  - the lease names the owner's node (`leasehold.dev/failover-by-node`, written with
 *    failover-by by the mark and by every takeover, as `<manager pod>@<node>`; a value
 *    written for another manager does not count, lib/lease-record.ts);
 *  - that node is not ours (we run on it, so it is up);
 *  - its heartbeat Lease was seen by us and has been silent for D + P by our monotonic
 *    clock, exactly the replacement-lost threshold (judgeNodeSilence), with the same
 *    blindness rule: a watch (re)connect counts as a fresh observation.
 *
 * Safety: taking over never needed the owner to be dead. The takeover is a CAS on the
 * lease's failover-by, every failover step is idempotent, and an owner that is alive
 * after all (its node's kubelet stopped alone) sees the new failover-by on its watch and
 * stands down (`markedByOther`); a lease write of its meanwhile is a CAS and fails. This
 * rule only moves the moment of a takeover that the timeout would have allowed anyway;
 * it never marks, deletes or creates anything by itself.
 * Not guaranteed: a lease written by a manager that predates the annotation has no owner
 * node; such a failover is taken over by the timeout as before.
 */
import type { HeartbeatSeen } from '../detection/node-health.ts';
import { judgeNodeSilence, type NodeSilence } from './replacement-lost.ts';

export interface OwnerInput {
  /** Monotonic ms, read once. */
  now: number;
  /** The share's lease duration D. */
  durationMs: number;
  /** LEASEHOLD_NODE_LEASE_GRACE: the cap of the threshold, and P while unknown. */
  graceMs: number;
  /** The owner's node as the lease names it; undefined = not named. */
  ownerNode: string | undefined;
  /** The node this manager runs on. */
  myNode: string;
  /** The owner node's heartbeat as we saw it; undefined = never seen. */
  heartbeat: HeartbeatSeen | undefined;
}

export function judgeOwner(input: OwnerInput): NodeSilence {
  if (!input.ownerNode)
    return {
      kind: 'waiting',
      reason: "the lease does not name the owner's node: the takeover timeout decides",
      recheckAt: undefined,
    };
  if (input.ownerNode === input.myNode)
    return { kind: 'waiting', reason: 'the owner runs on our node, which is up', recheckAt: undefined };
  return judgeNodeSilence(input.now, input.durationMs, input.graceMs, input.ownerNode, input.heartbeat);
}
