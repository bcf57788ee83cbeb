/**
 * Whether a stale verdict starts a failover now: the admission before a machine exists.
 *
 * Guarantees:
 *  - A verdict made with a shorter lease duration than now known is judged again, never
 *    acted on.
 *  - A verdict is counted (metrics) and logged once per observed renewal, however often
 *    a paused or deferred lease is judged again.
 *  - No ShareManager in the cache: judged again as soon as it is (`shareManagerSeen`).
 *  - The storm guard (detection/storm-guard.ts) may pause it: said once as a warning and
 *    an event, judged again after half the storm window.
 *  - At maxConcurrentFailovers running here (not in observe-only mode): judged again
 *    after two retry periods.
 *  A paused or deferred lease is never dropped: it is always judged again later.
 */
import type { Clock } from '../../lib/clock.ts';
import type { LeaseRecord } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerConfig } from '../config.ts';
import type { LeaseMonitor, StaleVerdict } from '../detection/lease-monitor.ts';
import {
  considerStale,
  emptyStormGuard,
  forgetLease,
  type Population,
  type StormGuardState,
  stormStatus,
} from '../detection/storm-guard.ts';
import type { EventRecorder } from '../events.ts';
import type { ManagerMetrics } from '../manager-metrics.ts';
import type { ClusterView } from './failover-steps.ts';

export interface AdmissionDeps {
  config: ManagerConfig;
  clock: Clock;
  log: Logger;
  metrics: ManagerMetrics;
  events: EventRecorder;
  view: ClusterView;
  monitor(): LeaseMonitor | undefined;
  /** Runs `run` after `ms` unless the driver stopped meanwhile. */
  later(ms: number, run: () => void): void;
}

export class FailoverAdmission {
  /** Leases judged stale while their ShareManager was not in the cache. */
  private readonly awaitingShareManager = new Set<string>();
  private storm: StormGuardState = emptyStormGuard;
  private stormAnnounced = false;
  /** Lease key -> renewal signature whose stale verdict was already counted. */
  private readonly counted = new Map<string, string>();

  constructor(private readonly deps: AdmissionDeps) {}

  /**
   * The ShareManager `key` is in the cache now (added or changed): a stale verdict that
   * came before it is judged again at once. NB: a set of keys only while they wait; a
   * ShareManager deleted for good leaves its key until its Lease goes (leaseGone).
   */
  shareManagerSeen(key: string): void {
    if (this.awaitingShareManager.delete(key)) this.deps.monitor()?.rejudge(key);
  }

  /** The lease was renewed: it no longer counts as a storm suspect. */
  leaseRenewed(key: string): void {
    this.storm = forgetLease(this.storm, key);
  }

  leaseGone(key: string): void {
    this.counted.delete(key);
    this.awaitingShareManager.delete(key);
    this.storm = forgetLease(this.storm, key);
  }

  /** True when `verdict` may start a failover now, with `running` failovers owned here. */
  admit(verdict: StaleVerdict, running: number): boolean {
    const { config, clock, log, metrics, events, view } = this.deps;
    const monitor = this.deps.monitor();
    const { key } = verdict;
    const lease = verdict.observation.lease;
    // NB: the floor may have risen (its ShareManager or holder pod seen) since this verdict.
    const current = monitor?.observation(key);
    if (current && current.durationMs > verdict.observation.durationMs) {
      log.info(
        { lease: key, durationMs: current.durationMs, verdictDurationMs: verdict.observation.durationMs },
        'stale verdict made with a shorter duration than now known: judged again',
      );
      monitor?.rejudge(key);
      return false;
    }
    if (this.counted.get(key) !== verdict.observation.signature) {
      this.counted.set(key, verdict.observation.signature);
      metrics.staleDetected.inc();
      metrics.detectionLagSeconds.observe(verdict.lagMs / 1000);
      metrics.confirmSeconds.observe((verdict.confirmMs ?? 0) / 1000);
      log.warn(
        {
          lease: key,
          holder: lease.holder,
          holderNode: lease.holderNode,
          lagMs: Math.round(verdict.lagMs),
          confirmMs: Math.round(verdict.confirmMs ?? 0),
          durationMs: verdict.observation.durationMs,
          // The version last seen and confirmed by the quorum read: which renewal was the last.
          resourceVersion: lease.resourceVersion,
        },
        'lease stale by our observation',
      );
    }
    const sm = view.shareManager(key);
    if (!sm) {
      // Not cached yet (its watch may lag the Lease's), or gone: judged again when it
      // arrives (shareManagerSeen), not at the next routine re-watch minutes later.
      this.awaitingShareManager.add(key);
      log.debug({ lease: key }, 'stale lease without a ShareManager in the cache: judged again once it is');
      return false;
    }
    this.awaitingShareManager.delete(key);
    const node = this.holderNodeOf(lease);
    const health = view.nodeHealth(node);
    const population = this.population();
    const storm = considerStale(
      this.storm,
      // An unknown node ('') is never explained by a node failure: it counts (storm-guard.ts).
      { key, node, nodeHealthy: node === '' || health === 'healthy', now: clock.now() },
      population,
      config.storm,
    );
    this.storm = storm.state;
    metrics.stormGuardActive.set(storm.active ? 1 : 0);
    if (!storm.allow) {
      if (!this.stormAnnounced) {
        this.stormAnnounced = true;
        log.warn(
          {
            suspects: storm.suspects,
            nodes: storm.nodes,
            explainedBy: storm.source,
            explained: storm.explained,
            tracked: population.total,
          },
          'storm guard: leases stale on several healthy-looking nodes at once; failovers paused',
        );
        void events.record(
          sm,
          'Warning',
          'StormGuardActive',
          `${storm.suspects} of ${population.total - (population.byNode.get(storm.source) ?? 0)} leases went stale within ${config.storm.windowMs / 1000}s on ${storm.nodes} healthy-looking node(s)${storm.source ? ` besides ${storm.source} (${storm.explained} there)` : ''}; failovers paused`,
        );
      }
      this.deps.later(config.storm.windowMs / 2, () => this.deps.monitor()?.rejudge(key));
      return false;
    }
    this.stormAnnounced = false;
    if (!config.observeOnly && running >= config.maxConcurrentFailovers) {
      log.info({ lease: key, running }, 'max concurrent failovers reached; deferred');
      this.deps.later(config.defaults.retryPeriodMs * 2, () => this.deps.monitor()?.rejudge(key));
      return false;
    }
    return true;
  }

  /** The lease's holder node: its annotation, else its holder pod's node, else '' (unknown). */
  holderNodeOf(lease: LeaseRecord): string {
    if (lease.holderNode) return lease.holderNode;
    if (lease.holder === '') return '';
    return this.deps.view.pod(lease.namespace, lease.holder)?.spec?.nodeName ?? '';
  }

  /** For the metric: refresh whether the storm guard is active now. */
  refreshStormGauge(): void {
    const { config, clock, metrics } = this.deps;
    const s = stormStatus(this.storm, this.population(), clock.now(), config.storm);
    this.storm = s.state;
    metrics.stormGuardActive.set(s.active ? 1 : 0);
  }

  /** The tracked leases per holder node, for the storm guard. */
  private population(): Population {
    const leases = this.deps.monitor()?.leases() ?? [];
    const byNode = new Map<string, number>();
    for (const lease of leases) {
      const node = this.holderNodeOf(lease);
      if (node) byNode.set(node, (byNode.get(node) ?? 0) + 1);
    }
    return { total: leases.length, byNode };
  }
}
