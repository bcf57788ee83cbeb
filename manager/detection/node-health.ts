/**
 * How healthy a node looks to this manager (pure), and the anti-affinity that follows
 * for a replacement pod.
 *
 *  - unhealthy: the Node's Ready condition is not True, or its heartbeat Lease (in
 *    kube-node-lease) has not changed for `graceMs` by OUR observation (never by
 *    comparing its renewTime with our clock);
 *  - unknown: no Node object is known (simulated or deleted node);
 *  - healthy otherwise.
 *
 * The storm guard counts only stale share-manager leases on healthy-looking nodes (and
 * never the node with the most of them: storm-guard.ts); the
 * replacement's anti-affinity is `required` against an unhealthy/unknown node (it is
 * down: never schedule back there) and `preferred` against a healthy one (the share
 * manager failed, not obviously the node; a one-node cluster must still recover).
 */
import type { V1Node } from '@kubernetes/client-node';
import type { AntiAffinityMode } from '../config.ts';
import type { NodeAvoidance } from '../share-model/pod-spec.ts';

/** A node's heartbeat Lease as this manager saw it change. */
export interface HeartbeatSeen {
  /** Our monotonic time of the last heartbeat change, or of the last watch (re)connect. */
  observedAt: number;
  /** The node's heartbeat period as we observed it; undefined until two changes were seen. */
  periodMs: number | undefined;
}

export type NodeHealth = 'healthy' | 'unhealthy' | 'unknown';

export function nodeHealth(
  node: V1Node | undefined,
  heartbeatObservedAt: number | undefined,
  now: number,
  graceMs: number,
): NodeHealth {
  if (!node) return 'unknown';
  const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
  if (ready?.status !== 'True') return 'unhealthy';
  if (heartbeatObservedAt !== undefined && now - heartbeatObservedAt > graceMs) return 'unhealthy';
  return 'healthy';
}

export function avoidanceFor(mode: AntiAffinityMode, lostNode: string, health: NodeHealth): NodeAvoidance {
  if (mode === 'none' || lostNode === '') return undefined;
  if (mode === 'required' || mode === 'preferred') return { node: lostNode, mode };
  return { node: lostNode, mode: health === 'healthy' ? 'preferred' : 'required' };
}
