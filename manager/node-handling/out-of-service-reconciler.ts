/**
 * Runs the out-of-service taint decision (decide-out-of-service.ts) for the nodes that need
 * it, and performs its outcome through the executor: log line, Node event, metrics.
 *
 * Triggers (a pass is level-based: it recomputes everything from the caches):
 *  - a share Lease event naming this manager in failover-by (a failover of ours starts,
 *    moves or ends);
 *  - a Node event or a heartbeat event of a candidate node (the lost node of one of our
 *    failovers, or a node carrying our mark), so a node's return is seen at once;
 *  - the time a decision said it may change by itself (recheckAfterMs), a retry after a
 *    conflict or failure, and a slow resync as a safety net.
 * Passes never overlap: a trigger during a pass runs another one after it.
 *
 * Observation: "not Ready since" is the time THIS manager first saw the Node not Ready
 * (reset when it sees Ready again); heartbeats are NodeObserver's observation times, and
 * count as unobserved while the node-lease watch is not open (a broken watch must not
 * make every node look down).
 */
import type { V1Lease, V1Node } from '@kubernetes/client-node';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Clock } from '../../lib/clock.ts';
import { ANNOTATION_FAILOVER_BY } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerConfig } from '../config.ts';
import {
  ANNOTATION_OUT_OF_SERVICE_BY,
  decideOutOfService,
  isNodeReady,
  lostNodesOfOurFailovers,
  type ObservedNode,
  OUT_OF_SERVICE_TAINT,
  type OutOfServiceDecision,
  taintStateOf,
} from './decide-out-of-service.ts';
import type { OutOfServiceExecutor } from './execute-out-of-service.ts';

const RESYNC_MS = 10_000;
const DEBOUNCE_MS = 20;

export interface OutOfServiceView {
  nodes(): V1Node[];
  node(name: string): V1Node | undefined;
  shareLeases(): Iterable<V1Lease>;
  /** Our monotonic time of the node's last heartbeat change; undefined = unknown. */
  heartbeatObservedAt(node: string): number | undefined;
  /** False while the node heartbeat (kube-node-lease) watch is not open. */
  heartbeatsWatched(): boolean;
}

export interface OutOfServiceMetrics {
  taints: Gauge;
  writes: Counter<'action'>;
}

export function createOutOfServiceMetrics(registry: Registry): OutOfServiceMetrics {
  return {
    taints: new Gauge({
      name: 'leasehold_manager_out_of_service_taints',
      help: 'Nodes carrying an out-of-service taint that a leasehold manager added (as this manager sees them)',
      registers: [registry],
    }),
    writes: new Counter({
      name: 'leasehold_manager_out_of_service_taint_writes_total',
      help: 'Out-of-service taints this manager added or removed',
      labelNames: ['action'],
      registers: [registry],
    }),
  };
}

export class OutOfServiceReconciler {
  private readonly notReadySince = new Map<string, number>();
  private candidates = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private timerDue = Number.POSITIVE_INFINITY;
  private resync: NodeJS.Timeout | undefined;
  private running = false;
  private again = false;
  private stopped = false;

  constructor(
    private readonly config: ManagerConfig,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly metrics: OutOfServiceMetrics,
    private readonly executor: OutOfServiceExecutor,
    private readonly view: OutOfServiceView,
  ) {}

  start(): void {
    this.resync = setInterval(() => this.kick(), RESYNC_MS);
    this.kick();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.resync);
    clearTimeout(this.timer);
  }

  nodeSeen(node: V1Node, deleted: boolean): void {
    const name = node.metadata?.name ?? '';
    if (deleted) this.notReadySince.delete(name);
    else this.observe(node, this.clock.now());
    const state = deleted ? 'none' : taintStateOf(node);
    if (this.candidates.has(name) || state === 'ours' || state === 'markOnly') this.kick();
  }

  heartbeatSeen(node: string): void {
    if (this.candidates.has(node)) this.kick();
  }

  shareLeaseSeen(lease: V1Lease): void {
    if (lease.metadata?.annotations?.[ANNOTATION_FAILOVER_BY] === this.config.identity) this.kick();
  }

  /** Runs a pass after `delayMs` (an earlier request wins). */
  kick(delayMs = DEBOUNCE_MS): void {
    if (this.stopped) return;
    const due = this.clock.now() + delayMs;
    if (this.timer && due >= this.timerDue) return;
    clearTimeout(this.timer);
    this.timerDue = due;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.timerDue = Number.POSITIVE_INFINITY;
      void this.pass();
    }, delayMs);
  }

  private observe(node: V1Node, now: number): ObservedNode {
    const name = node.metadata?.name ?? '';
    const ready = isNodeReady(node);
    if (ready) this.notReadySince.delete(name);
    else if (!this.notReadySince.has(name)) this.notReadySince.set(name, now);
    return {
      ready,
      heartbeatObservedAt: this.view.heartbeatsWatched() ? this.view.heartbeatObservedAt(name) : undefined,
      notReadyObservedAt: this.notReadySince.get(name),
    };
  }

  private async pass(): Promise<void> {
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    try {
      await this.reconcileAll();
    } catch (err) {
      this.log.warn({ err }, 'out-of-service pass failed; trying again later');
      this.kick(this.config.defaults.retryPeriodMs);
    } finally {
      this.running = false;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    }
  }

  private async reconcileAll(): Promise<void> {
    const { config } = this;
    const now = this.clock.now();
    const ours = config.outOfServiceTaint
      ? lostNodesOfOurFailovers(this.view.shareLeases(), config.identity)
      : new Map<string, string[]>();
    const marked: string[] = [];
    let tainted = 0;
    for (const node of this.view.nodes()) {
      const state = taintStateOf(node);
      if (state === 'ours') tainted += 1;
      if (state === 'ours' || state === 'markOnly') marked.push(node.metadata?.name ?? '');
    }
    this.metrics.taints.set(tainted);
    this.candidates = new Set([...ours.keys(), ...marked]);
    for (const name of this.candidates) {
      const node = this.view.node(name);
      const decision = decideOutOfService({
        enabled: config.outOfServiceTaint,
        observeOnly: config.observeOnly,
        now,
        graceMs: config.nodeLeaseGraceMs,
        holdMs: config.defaults.leaseDurationMs,
        node: node ? this.observe(node, now) : undefined,
        taint: node ? taintStateOf(node) : 'none',
        lostNodeOfOurFailover: ours.has(name),
      });
      if (node) await this.perform(node, decision, ours.get(name) ?? []);
    }
  }

  private async perform(node: V1Node, d: OutOfServiceDecision, failovers: string[]): Promise<void> {
    const name = node.metadata?.name ?? '';
    if (d.kind === 'nothing') {
      if (d.recheckAfterMs !== undefined) this.kick(d.recheckAfterMs);
      this.log.debug(
        { node: name, reason: d.reason, recheckAfterMs: d.recheckAfterMs },
        'out-of-service: nothing to do',
      );
      return;
    }
    const adding = d.kind === 'add-taint';
    let outcome: Awaited<ReturnType<OutOfServiceExecutor['addTaint']>>;
    try {
      outcome = adding ? await this.executor.addTaint(node) : await this.executor.removeTaint(node);
    } catch (err) {
      this.log.warn({ err, node: name }, 'out-of-service taint write failed; will retry');
      this.kick(this.config.defaults.retryPeriodMs);
      return;
    }
    if (outcome === 'conflict') {
      // The Node moved since our cache saw it: decide again on the newer object.
      this.log.debug({ node: name }, 'out-of-service taint write conflicted (409); deciding again');
      this.kick(this.config.defaults.retryPeriodMs);
      return;
    }
    if (outcome === 'gone') return;
    const taint = `${OUT_OF_SERVICE_TAINT.key}=${OUT_OF_SERVICE_TAINT.value}:${OUT_OF_SERVICE_TAINT.effect}`;
    if (d.kind === 'add-taint') {
      this.metrics.writes.inc({ action: 'add' });
      const downS = (d.downForMs / 1000).toFixed(1);
      this.log.warn(
        { node: name, taint, downForMs: Math.round(d.downForMs), failovers },
        'node confirmed down: out-of-service taint added (volumes force-detached, pods force-deleted)',
      );
      void this.executor.recordEvent(
        node,
        'OutOfServiceTaintAdded',
        `${taint} added by ${this.config.identity}: not Ready with a stale heartbeat for ${downS}s (our observation); failing over ${failovers.join(', ')}`,
      );
    } else {
      this.metrics.writes.inc({ action: 'remove' });
      const by = node.metadata?.annotations?.[ANNOTATION_OUT_OF_SERVICE_BY] ?? '';
      this.log.info({ node: name, taint, reason: d.reason, addedBy: by }, 'out-of-service taint removed');
      void this.executor.recordEvent(
        node,
        'OutOfServiceTaintRemoved',
        d.reason === 'node-returned'
          ? `${taint} (added by ${by}) removed by ${this.config.identity}: the node is Ready with a fresh heartbeat`
          : `${taint} (added by ${by}) removed by ${this.config.identity}: LEASEHOLD_OUT_OF_SERVICE_TAINT is off`,
      );
    }
  }
}
