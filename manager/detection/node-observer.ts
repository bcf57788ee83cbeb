/**
 * Node health as this manager sees it: the Node objects (Ready condition) and the node
 * heartbeat Leases in kube-node-lease, each judged by when WE observed it change
 * (node-health.ts has the rule).
 */
import type { V1Node } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import type { Informer } from '../../lib/informer.ts';
import type { k8s } from '../../lib/kube-client.ts';
import type { HeartbeatSeen } from '../failover/replacement-lost.ts';
import { type NodeHealth, nodeHealth } from './node-health.ts';

/** How many intervals between heartbeat changes are kept to estimate a node's period. */
const PERIOD_SAMPLES = 4;

export class NodeObserver {
  private readonly heartbeats = new Map<
    string,
    { renewTime: string; observedAt: number; changedAt: number; intervals: number[] }
  >();

  constructor(
    private readonly clock: Clock,
    private readonly nodes: Informer<V1Node>,
    private readonly graceMs: number,
  ) {}

  heartbeatSeen(lease: k8s.V1Lease): void {
    const node = lease.metadata?.name ?? '';
    const renewTime = String(lease.spec?.renewTime ?? '');
    const previous = this.heartbeats.get(node);
    if (previous?.renewTime === renewTime) return;
    const now = this.clock.now();
    const intervals = previous
      ? [...previous.intervals, now - previous.changedAt].slice(-PERIOD_SAMPLES)
      : [];
    this.heartbeats.set(node, { renewTime, observedAt: now, changedAt: now, intervals });
  }

  heartbeatGone(lease: k8s.V1Lease): void {
    this.heartbeats.delete(lease.metadata?.name ?? '');
  }

  /** The blindness rule for heartbeats too: after a (re)connect nothing is stale for the grace. */
  resetHeartbeats(): void {
    const now = this.clock.now();
    for (const hb of this.heartbeats.values()) hb.observedAt = now;
  }

  /** Our monotonic time of the node's last heartbeat change (or of the last reset); undefined = never seen. */
  heartbeatObservedAt(node: string): number | undefined {
    return this.heartbeats.get(node)?.observedAt;
  }

  /**
   * Our monotonic time of the last heartbeat change we actually saw (never moved by a
   * reset): evidence that the node's kubelet was alive then (../failover/volume-handoff.ts).
   */
  heartbeatChangedAt(node: string): number | undefined {
    return this.heartbeats.get(node)?.changedAt;
  }

  /**
   * The node's heartbeat as replacement-lost.ts needs it: our last observation (moved by a
   * reset) and its period as we saw it (the longest of the last few intervals between
   * two changes; NB: a watch gap makes one interval long, which only makes the rule slower).
   */
  heartbeat(node: string): HeartbeatSeen | undefined {
    const hb = this.heartbeats.get(node);
    if (!hb) return undefined;
    return {
      observedAt: hb.observedAt,
      periodMs: hb.intervals.length > 0 ? Math.max(...hb.intervals) : undefined,
    };
  }

  health(node: string): NodeHealth {
    if (node === '') return 'unknown';
    return nodeHealth(
      this.nodes.get('', node),
      this.heartbeats.get(node)?.observedAt,
      this.clock.now(),
      this.graceMs,
    );
  }
}
