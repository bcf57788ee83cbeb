/**
 * Runs the failover machine (failover-transitions.ts) of every share manager: turns stale verdicts,
 * lease changes, pod changes, timers and I/O results into events, and performs the
 * actions of each transition through the executor. Whether a verdict starts a failover
 * is failover-admission.ts; what a machine watches while it waits on others is
 * failover-waits.ts; a machine's data is failover-machine.ts.
 *
 * Invariants:
 *  - One machine per share manager key (namespace/name); it exists only while not idle.
 *  - An I/O result is delivered only to the phase that started it: each phase change
 *    bumps the machine's epoch, and a result from an older epoch is dropped (logged).
 *  - Before a failover starts: fast failover enabled, no machine for the key, and the
 *    admission (ShareManager cached, storm guard, fewer than maxConcurrentFailovers
 *    running here). A paused or deferred lease is judged again later, never dropped.
 *  - In observe-only mode the machine records what it would do and writes nothing.
 *  - A delinquent lease whose failover-by names no manager (lease-fields.ts) has no owner
 *    to wait for: it is taken over at once (by CAS; exactly one manager wins).
 *  - The storage-fencing gate (storage-fencing.ts) runs before the mark (`checkingStorage`);
 *    a share that waits for node-down evidence (`awaitingNodeDown`) is rechecked when its
 *    lost Node changes or is deleted (`onNodeChange`) and every GATE_RECHECK_MS (failover-waits.ts), within
 *    the concurrency limit; the machine stays non-idle for the whole wait.
 *  - A failing step is retried with a pause that grows with its failures in a row; a
 *    failure that persists is said once per distinct message as a Warning event.
 *  - A lease's holder node is its `leasehold.dev/holder-node`, else its holder pod's
 *    spec.nodeName when that pod is known, else unknown ('').
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import type { LeaseRecord } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerConfig } from '../config.ts';
import type { LeaseMonitor, StaleVerdict } from '../detection/lease-monitor.ts';
import type { EventRecorder } from '../events.ts';
import type { ManagerMetrics } from '../manager-metrics.ts';
import type { FailoverExecutor } from './execute-failover.ts';
import { FailoverAdmission } from './failover-admission.ts';
import {
  clearMachineTimers,
  type Machine,
  newMachine,
  retargetToLostReplacement,
} from './failover-machine.ts';
import {
  announceFailover,
  completeFailover,
  type ReportContext,
  reportHandoff,
  reportReplacementLost,
  reportStorageGate,
} from './failover-report.ts';
import { type ClusterView, runStep, type StepDeps } from './failover-steps.ts';
import {
  type Action,
  type FailoverEvent,
  isOwning,
  type Phase,
  stepOf,
  transition,
} from './failover-transitions.ts';
import { FailoverWaits } from './failover-waits.ts';
import { StepFailures } from './step-failures.ts';
import { holderReturned } from './storage-fencing.ts';

export type { ClusterView };

export class FailoverDriver {
  private readonly machines = new Map<string, Machine>();
  private readonly pending = new Set<NodeJS.Timeout>();
  private readonly failures: StepFailures;
  private readonly admission: FailoverAdmission;
  private readonly waits: FailoverWaits;
  monitor: LeaseMonitor | undefined;

  constructor(
    private readonly config: ManagerConfig,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly metrics: ManagerMetrics,
    private readonly executor: FailoverExecutor,
    private readonly events: EventRecorder,
    private readonly view: ClusterView,
  ) {
    this.failures = new StepFailures(config.defaults.retryPeriodMs, log, events);
    const monitor = () => this.monitor;
    const later = (ms: number, run: () => void) => this.later(ms, run);
    this.admission = new FailoverAdmission({ config, clock, log, metrics, events, view, monitor, later });
    this.waits = new FailoverWaits({
      config,
      clock,
      log,
      executor,
      view,
      monitor,
      later,
      isCurrent: (m) => this.machines.get(m.key) === m,
      dispatch: (key, event) => this.dispatch(key, event),
      running: () => this.running,
      stepDeps: (m) => this.stepDeps(m),
    });
  }

  get running(): number {
    return [...this.machines.values()].filter((m) => isOwning(m.phase)).length;
  }

  phaseOf(key: string): Phase {
    return this.machines.get(key)?.phase ?? 'idle';
  }

  stop(): void {
    for (const timer of this.pending) clearTimeout(timer);
    for (const m of this.machines.values()) clearMachineTimers(m);
  }

  /** For the metric: refresh whether the storm guard is active now. */
  refreshStormGauge(): void {
    this.admission.refreshStormGauge();
  }

  // ---- inputs -------------------------------------------------------------------

  /** The ShareManager `key` is in the cache now: a verdict that waited for it is judged again. */
  shareManagerSeen(key: string): void {
    this.admission.shareManagerSeen(key);
  }

  onStale(verdict: StaleVerdict): void {
    const { key } = verdict;
    const lease = verdict.observation.lease;
    if (!this.config.fastFailover) return;
    if (this.phaseOf(key) !== 'idle') return;
    if (!this.admission.admit(verdict, this.running)) return;
    const m = this.start(key, lease);
    m.verdictLease = lease;
    m.holderSilentSince = verdict.effectiveObservedAt;
    m.times.detected = { mono: verdict.at, wall: this.clock.wallNow() };
    this.dispatch(key, this.config.observeOnly ? 'staleObserveOnly' : 'stale');
  }

  onLeaseChange(key: string, lease: LeaseRecord, renewed: boolean): void {
    const m = this.machines.get(key);
    if (lease.delinquentSince) {
      if (lease.failoverBy === this.config.identity) {
        const machine = m ?? this.start(key, lease);
        // Ours whatever the mark request answered (its answer may have been lost).
        machine.owner = this.config.identity;
        if (!machine.times.marked && lease.delinquentSince)
          machine.times.marked = { mono: this.clock.now(), wall: new Date(lease.delinquentSince) };
        this.dispatch(key, 'markedByMe');
      } else if (!m || m.owner !== lease.failoverBy) {
        const machine = m ?? this.start(key, lease);
        machine.owner = lease.failoverBy;
        this.dispatch(key, 'markedByOther');
        // A new owner while we already follow (no phase change): judge its node afresh.
        if (m) this.waits.checkOwner(machine);
        // Nobody runs it (failover-by names no manager): no owner to give time to.
        if (lease.failoverBy === undefined && this.config.fastFailover && !this.config.observeOnly)
          this.dispatch(key, 'takeoverDue');
      }
      return;
    }
    if (renewed) {
      this.admission.leaseRenewed(key);
      this.failures.forget(key);
    }
    if (!m) return;
    if (lease.holder !== '' && lease.holder !== m.lostPod) {
      m.times.acquired = { mono: this.clock.now(), wall: this.clock.wallNow() };
      m.replacementPod = lease.holder;
      this.dispatch(key, 'acquired');
    } else if (renewed) {
      this.dispatch(key, 'renewed');
    }
  }

  onLeaseGone(key: string): void {
    this.failures.forget(key);
    this.admission.leaseGone(key);
    if (this.machines.has(key)) this.dispatch(key, 'leaseGone');
  }

  /** A Node changed or was deleted: shares waiting for it to be known down look again. */
  onNodeChange(node: string): void {
    if (node === '') return;
    for (const m of [...this.machines.values()])
      if (m.phase === 'awaitingNodeDown' && m.lostNode === node) this.waits.recheckGate(m, 'node');
  }

  onPodChange(pod: V1Pod, deleted: boolean): void {
    const key = `${pod.metadata?.namespace}/${pod.metadata?.labels?.['leasehold.dev/share-manager'] ?? ''}`;
    const m = this.machines.get(key);
    if (!m) return;
    if (m.phase === 'following' || m.phase === 'followingAcquire') {
      this.waits.noticeReplacement(m);
      return;
    }
    if (m.phase !== 'awaitingAcquire' || pod.metadata?.name !== m.replacementPod) return;
    const phase = pod.status?.phase;
    if (deleted || phase === 'Failed' || phase === 'Succeeded') this.dispatch(key, 'replacementFailed');
    else this.waits.checkReplacement(m);
  }

  // ---- the machine --------------------------------------------------------------

  private start(key: string, lease: LeaseRecord): Machine {
    const m = newMachine(key, lease, this.admission.holderNodeOf(lease));
    this.machines.set(key, m);
    return m;
  }

  private dispatch(key: string, event: FailoverEvent): void {
    const m = this.machines.get(key);
    if (!m) return;
    const from = m.phase;
    const t = transition(from, event);
    if (t.next !== from) {
      if (isOwning(from) && t.next === 'following') this.metrics.failovers.inc({ result: 'stood_down' });
      if (isOwning(from) && event === 'leaseGone') this.metrics.failovers.inc({ result: 'abandoned' });
      m.phase = t.next;
      m.epoch += 1;
      this.log.debug({ lease: key, from, event, to: t.next }, 'failover transition');
    }
    for (const action of t.actions) this.perform(m, action);
    if (m.phase === 'idle' && this.machines.get(key) === m) {
      clearMachineTimers(m);
      this.machines.delete(key);
    }
    if (t.next !== from && (from === 'awaitingNodeDown' || t.next === 'awaitingNodeDown'))
      this.metrics.awaitingNodeDown.set(
        [...this.machines.values()].filter((x) => x.phase === 'awaitingNodeDown').length,
      );
    // Entering `following`: the replacement may already exist (no pod event will say so).
    if (t.next !== from && t.next === 'following' && this.machines.get(key) === m)
      this.waits.noticeReplacement(m);
    // Entering a wait for the replacement's agent: judge it now (its node may be silent already).
    if (t.next !== from && (t.next === 'awaitingAcquire' || t.next === 'followingAcquire'))
      this.waits.checkReplacement(m);
    if (t.next !== from && t.next === 'awaitingAcquire') this.waits.scheduleUnmountCheck(m);
    // Following (and timing the owner) from now on: its node may be silent already.
    if (t.next !== from && t.next === 'following' && this.machines.get(key) === m) this.waits.checkOwner(m);
  }

  /** Runs an I/O step; its outcome event reaches the machine only if the phase did not change. */
  private step(m: Machine, what: string, run: () => Promise<FailoverEvent>): void {
    const epoch = m.epoch;
    run().then(
      (event) => {
        this.failures.forget(m.key);
        if (this.machines.get(m.key) !== m || m.epoch !== epoch) {
          this.log.debug({ lease: m.key, what, event }, 'outcome of an earlier phase dropped');
          return;
        }
        this.dispatch(m.key, event);
      },
      (err: unknown) => {
        this.failures.failed(m.key, what, err, this.view.shareManager(m.key));
        if (this.machines.get(m.key) === m && m.epoch === epoch) this.dispatch(m.key, 'stepFailed');
      },
    );
  }

  private perform(m: Machine, action: Action): void {
    const [namespace, name] = m.key.split('/') as [string, string];
    switch (action) {
      case 'checkStorage':
      case 'writeMark':
      case 'deletePod':
      case 'handOffVolume':
      case 'createReplacement':
      case 'writeTakeover': {
        const step = runStep(action, m, this.stepDeps(m));
        this.step(m, step.what, step.run);
        return;
      }
      case 'reobserve':
        void this.executor.readLease(namespace, name).then(
          (lease) =>
            lease ? this.monitor?.record(lease, true) : this.monitor?.leaseDeleted(namespace, name),
          (err: unknown) => {
            this.log.warn({ err, lease: m.key }, 're-reading the lease failed; judging again later');
            this.later(this.config.defaults.retryPeriodMs, () => this.monitor?.rejudge(m.key));
          },
        );
        return;
      case 'announce':
      case 'announceTakeover':
        void announceFailover(this.reportContext(m), action === 'announceTakeover');
        return;
      case 'complete':
        this.failures.forget(m.key);
        this.metrics.failovers.inc({ result: 'completed' });
        void completeFailover(this.reportContext(m));
        return;
      case 'retarget':
        retargetToLostReplacement(m, { mono: this.clock.now(), wall: this.clock.wallNow() });
        return;
      case 'announceReplacementLost': {
        const verdict = m.lostReplacement?.verdict;
        m.lostReplacement = undefined;
        this.metrics.failovers.inc({ result: 'replacement_lost' });
        if (verdict) void reportReplacementLost(this.reportContext(m), verdict, m.avoidNodes);
        return;
      }
      case 'startTakeoverTimer':
        clearTimeout(m.takeoverTimer);
        m.takeoverTimer = setTimeout(
          () => this.dispatch(m.key, 'takeoverDue'),
          this.config.takeoverTimeoutMs,
        );
        return;
      case 'cancelTakeoverTimer':
        clearTimeout(m.takeoverTimer);
        return;
      case 'recordWouldFailover':
        this.metrics.failovers.inc({ result: 'observe_only' });
        void announceFailover(this.reportContext(m), false, true);
        return;
      case 'retryStepLater': {
        const step = stepOf(m.phase);
        const epoch = m.epoch;
        if (!step) return;
        clearTimeout(m.retryTimer);
        m.retryTimer = setTimeout(() => {
          if (this.machines.get(m.key) === m && m.epoch === epoch) this.perform(m, step);
        }, this.failures.pauseMs(m.key));
        return;
      }
      case 'rejudgeLater':
        this.later(this.failures.pauseMs(m.key), () => this.monitor?.rejudge(m.key));
        return;
      case 'startRecheckTimer':
        this.waits.startGateRecheckTimer(m);
        return;
      case 'reportWaitOver':
        if (m.storage)
          void reportStorageGate(
            this.reportContext(m),
            holderReturned(m.storage, m.lostNode),
            this.clock.wallNow(),
          );
        return;
    }
  }

  private reportContext(m: Machine): ReportContext {
    const sm = this.view.shareManager(m.key);
    return {
      sm,
      lostPod: m.lostPod,
      lostNode: m.lostNode,
      replacementPod: m.replacementPod,
      times: { ...m.times },
      inherited: m.inherited,
      handoff: m.handoff,
      reason: m.times.replacementLost ? ('ReplacementLost' as const) : ('LeaseExpired' as const),
      durationMs: this.monitor?.observation(m.key)?.durationMs ?? this.config.defaults.leaseDurationMs,
      identity: this.config.identity,
      status: this.executor.status,
      events: this.events,
      metrics: this.metrics,
      log: this.log,
    };
  }

  /** The steps' dependencies, reporting for `m`. */
  private stepDeps(m: Machine): StepDeps {
    const { config, clock, log, metrics, executor, view, monitor } = this;
    return {
      config,
      clock,
      log,
      metrics,
      executor,
      view,
      monitor,
      onHandoff: () => void reportHandoff(this.reportContext(m)),
      onGate: (condition) => void reportStorageGate(this.reportContext(m), condition, this.clock.wallNow()),
    };
  }

  private later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.pending.delete(timer);
      run();
    }, ms);
    this.pending.add(timer);
  }
}
