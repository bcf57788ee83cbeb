/**
 * Node health as this manager sees it: the Node objects (Ready condition) and the node
 * heartbeat Leases in kube-node-lease, each judged by when WE observed it change
 * (node-health.ts has the rule).
 *
 * The blindness rule for heartbeats (as for share leases, watch-continuity.ts): while
 * the heartbeat watch is broken, `heartbeat()` gives no evidence (a gap in our own view is
 * never a silent node); when it opens again every observation moves to now, except after
 * a routine re-watch (one clean end, resumed from the same resourceVersion within the gap
 * bound), whose missed changes the server replays.
 */
import type { V1Node } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import type { ConnectKind, Informer, RestartReason } from '../../lib/informer.ts';
import type { k8s } from '../../lib/kube-client.ts';
import { type HeartbeatSeen, type NodeHealth, nodeHealth } from './node-health.ts';
import {
  DEFAULT_WATCH_CONTINUITY,
  decideWatch,
  INITIAL_WATCH_STATE,
  type WatchState,
} from './watch-continuity.ts';

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

  private watch: WatchState = INITIAL_WATCH_STATE;

  /** The heartbeat watch opened (`kind` as the informer reports it). */
  watchConnected(kind: ConnectKind): void {
    const { state, observations } = decideWatch(
      this.watch,
      { type: 'connected', kind },
      this.clock.now(),
      DEFAULT_WATCH_CONTINUITY,
    );
    this.watch = state;
    if (observations === 'reset') this.resetHeartbeats();
  }

  /** The heartbeat watch broke: no evidence of silence until it opens again. */
  watchDisconnected(reason: RestartReason): void {
    this.watch = decideWatch(
      this.watch,
      { type: 'disconnected', reason },
      this.clock.now(),
      DEFAULT_WATCH_CONTINUITY,
    ).state;
  }

  /** The blindness rule for heartbeats too: after a (re)connect nothing is stale for the grace. */
  private resetHeartbeats(): void {
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
   * The node's heartbeat as replacement-lost.ts and owner-lost.ts need it, while the watch
   * is healthy (else undefined: no evidence): our last observation (moved by a reset) and its period as we saw it (the longest of the last few intervals between
   * two changes; NB: a watch gap makes one interval long, which only makes the rule slower).
   */
  heartbeat(node: string): HeartbeatSeen | undefined {
    const hb = this.heartbeats.get(node);
    if (!hb || this.watch.kind !== 'healthy') return undefined;
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
