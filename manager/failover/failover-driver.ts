/**
 * Runs the failover machine (failover-transitions.ts) of every share manager: turns stale verdicts,
 * lease changes, pod changes, timers and I/O results into events, and performs the
 * actions of each transition through the executor.
 *
 * Invariants:
 *  - One machine per share manager key (namespace/name); it exists only while not idle.
 *  - An I/O result is delivered only to the phase that started it: each phase change
 *    bumps the machine's epoch, and a result from an older epoch is dropped (logged).
 *  - Before a failover starts: fast failover enabled, the ShareManager exists, the storm
 *    guard allows it, and fewer than maxConcurrentFailovers are running here. A paused
 *    or deferred lease is judged again later, never dropped.
 *  - In observe-only mode the machine records what it would do and writes nothing.
 *  - A follower learns whether the owner's replacement exists from the pod cache, level-
 *    based (`replacementLive` / `replacementFailed`), on entering `following` and on every
 *    pod change of that share manager.
 *  - A delinquent lease whose failover-by names no manager (lease-fields.ts) has no owner
 *    to wait for: it is taken over at once (by CAS; exactly one manager wins).
 *  - The storage-fencing gate (storage-fencing.ts) runs before the mark (`checkingStorage`);
 *    a share that waits for node-down evidence (`awaitingNodeDown`) is rechecked when its
 *    lost Node changes or is deleted (`onNodeChange`) and every GATE_RECHECK_MS, within
 *    the concurrency limit; the machine stays non-idle for the whole wait.
 *  - While the owner waits for the replacement's agent (`awaitingAcquire`), and while a
 *    follower waits for it (`followingAcquire`), the replacement is judged by
 *    replacement-lost.ts on entry, on every pod change of the share manager and at the
 *    instant the verdict names; `lost` is the event `replacementLost`. A follower never
 *    counts a replacement on a lost node as live (so it cannot cancel its takeover timer).
 *  - While following with the takeover timer running (`following`), the owner's node is
 *    judged by owner-lost.ts on entry, on a change of owner and at the instant the
 *    verdict names; `lost` is the event `ownerLost` (take over now, by CAS). Not in
 *    `followingAcquire`: the owner's replacement lives, and waiting for it is no stall.
 *  - A lease's holder node is its `leasehold.dev/holder-node`, else its holder pod's
 *    spec.nodeName when that pod is known, else unknown ('').
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import { failureGist } from '../../lib/errors.ts';
import type { LeaseRecord } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import { retryAfterMsOf, retryPauseMs } from '../../lib/retry-backoff.ts';
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
import type { LastFailover } from '../share-model/share-manager-spec.ts';
import type { FailoverExecutor } from './execute-failover.ts';
import {
  announceFailover,
  completeFailover,
  type FailoverTimes,
  reportHandoff,
  reportReplacementLost,
  reportStorageGate,
} from './failover-report.ts';
import { type ClusterView, forceUnmountHandoff, runStep, type StepDeps } from './failover-steps.ts';
import {
  type Action,
  type FailoverEvent,
  isOwning,
  type Phase,
  stepOf,
  transition,
} from './failover-transitions.ts';
import { judgeOwner } from './owner-lost.ts';
import { judgeReplacement, type ReplacementVerdict } from './replacement-lost.ts';
import { holderReturned, type StorageFencing } from './storage-fencing.ts';
import { unmountCheckAt } from './volume-handoff.ts';

/**
 * How often a share waiting for node-down evidence reads its storage and Node again
 * without a Node event (NB: the Node event is the fast path; this catches a CSIDriver
 * created or changed meanwhile, and a missed event). Each recheck costs every manager
 * four GETs per waiting share.
 */
export const GATE_RECHECK_MS = 30_000;

/**
 * A failing failover step is retried after retryPeriod, doubling up to this (jittered;
 * never sooner than a 429's Retry-After): a failover is urgent, so the cap stays short,
 * but a 403 from Pod Security or a quota no longer costs requests and log lines at 2 Hz.
 */
const STEP_RETRY_MAX_MS = 10_000;
/** After this many failures of a share's steps in a row a Warning event says so. */
const PERSISTENT_STEP_FAILURES = 3;

interface Machine {
  key: string;
  phase: Phase;
  epoch: number;
  lostPod: string;
  lostNode: string;
  owner: string | undefined;
  replacementPod: string | undefined;
  /** The lease version the stale verdict was about: the mark's CAS uses exactly this one. */
  verdictLease: LeaseRecord | undefined;
  times: FailoverTimes;
  /** After a takeover: the record the previous owner wrote, whose first timestamps we keep. */
  inherited: LastFailover | undefined;
  /** The stale verdict's effective time of the holder's last observed renewal (our clock). */
  holderSilentSince: number | undefined;
  /** What the volume handoff did, once it ran. */
  handoff: string | undefined;
  /** The storage's classification, once the gate read it. */
  storage: StorageFencing | undefined;
  /** Nodes lost earlier in this failover (the first lost node, lost replacements' nodes): avoided too. */
  avoidNodes: string[];
  /** Nodes judged lost by replacement-lost.ts (before the Ready condition or the grace say so). */
  silentNodes: string[];
  /** The replacement judged lost with its node, until `retarget` makes it the lost pod. */
  lostReplacement: { pod: string; verdict: Extract<ReplacementVerdict, { kind: 'lost' }> } | undefined;
  takeoverTimer: NodeJS.Timeout | undefined;
  retryTimer: NodeJS.Timeout | undefined;
  recheckTimer: NodeJS.Timeout | undefined;
  /** When the replacement-lost verdict may change without any event (its `recheckAt`). */
  lostCheckTimer: NodeJS.Timeout | undefined;
  /** When a follower looks again at whether the owner went down with its node. */
  ownerCheckTimer: NodeJS.Timeout | undefined;
  /** The handoff released the volumesInUse entry or left it to a live kubelet (volume-handoff.ts): look whether it stayed. */
  watchUnmount: boolean;
  unmountForced: number;
  unmountTimer: NodeJS.Timeout | undefined;
  /** A fresh read of a node's heartbeat Lease is in flight (confirmSilence). */
  confirming: boolean;
}

export type { ClusterView };

export class FailoverDriver {
  /** Leases judged stale while their ShareManager was not in the cache (onStale). */
  private readonly awaitingShareManager = new Set<string>();

  /**
   * The ShareManager `key` is in the cache now (added or changed): a stale verdict that
   * came before it is judged again at once. NB: a set of keys only while they wait; a
   * ShareManager deleted for good leaves its key until its Lease goes (onLeaseGone).
   */
  shareManagerSeen(key: string): void {
    if (this.awaitingShareManager.delete(key)) this.monitor?.rejudge(key);
  }

  private readonly machines = new Map<string, Machine>();
  private storm: StormGuardState = emptyStormGuard;
  private stormAnnounced = false;
  private readonly pending = new Set<NodeJS.Timeout>();
  /**
   * Lease key -> failover steps that failed in a row for it (any step's success, the
   * failover's end or the Lease's deletion removes the entry): the retry pauses grow
   * with the count (lib/retry-backoff.ts), and a failure that persists is said once per
   * distinct message as a Warning event (FailoverStepFailing).
   */
  private readonly failing = new Map<
    string,
    { count: number; retryAfterMs: number | undefined; said: string | undefined }
  >();
  /** Lease key -> renewal signature whose stale verdict was already counted. */
  private readonly counted = new Map<string, string>();
  monitor: LeaseMonitor | undefined;

  constructor(
    private readonly config: ManagerConfig,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly metrics: ManagerMetrics,
    private readonly executor: FailoverExecutor,
    private readonly events: EventRecorder,
    private readonly view: ClusterView,
  ) {}

  get running(): number {
    return [...this.machines.values()].filter((m) => isOwning(m.phase)).length;
  }

  phaseOf(key: string): Phase {
    return this.machines.get(key)?.phase ?? 'idle';
  }

  stop(): void {
    for (const timer of this.pending) clearTimeout(timer);
    for (const m of this.machines.values()) this.clearTimers(m);
  }

  // ---- inputs -------------------------------------------------------------------

  onStale(verdict: StaleVerdict): void {
    const { key } = verdict;
    const lease = verdict.observation.lease;
    if (!this.config.fastFailover) return;
    if (this.phaseOf(key) !== 'idle') return;
    // NB: the floor may have risen (its ShareManager or holder pod seen) since this verdict.
    const current = this.monitor?.observation(key);
    if (current && current.durationMs > verdict.observation.durationMs) {
      this.log.info(
        { lease: key, durationMs: current.durationMs, verdictDurationMs: verdict.observation.durationMs },
        'stale verdict made with a shorter duration than now known: judged again',
      );
      this.monitor?.rejudge(key);
      return;
    }
    // A verdict is counted and logged once per observed renewal, however often a paused
    // or deferred lease is judged again.
    if (this.counted.get(key) !== verdict.observation.signature) {
      this.counted.set(key, verdict.observation.signature);
      this.metrics.staleDetected.inc();
      this.metrics.detectionLagSeconds.observe(verdict.lagMs / 1000);
      this.metrics.confirmSeconds.observe((verdict.confirmMs ?? 0) / 1000);
      this.log.warn(
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
    const sm = this.view.shareManager(key);
    if (!sm) {
      // Not cached yet (its watch may lag the Lease's), or gone: judged again when it
      // arrives (shareManagerSeen), not at the next routine re-watch minutes later.
      this.awaitingShareManager.add(key);
      this.log.debug(
        { lease: key },
        'stale lease without a ShareManager in the cache: judged again once it is',
      );
      return;
    }
    this.awaitingShareManager.delete(key);
    const now = this.clock.now();
    const node = this.holderNodeOf(lease);
    const health = this.view.nodeHealth(node);
    const population = this.population();
    const storm = considerStale(
      this.storm,
      // An unknown node ('') is never explained by a node failure: it counts (storm-guard.ts).
      { key, node, nodeHealthy: node === '' || health === 'healthy', now },
      population,
      this.config.storm,
    );
    this.storm = storm.state;
    this.metrics.stormGuardActive.set(storm.active ? 1 : 0);
    if (!storm.allow) {
      if (!this.stormAnnounced) {
        this.stormAnnounced = true;
        this.log.warn(
          {
            suspects: storm.suspects,
            nodes: storm.nodes,
            explainedBy: storm.source,
            explained: storm.explained,
            tracked: population.total,
          },
          'storm guard: leases stale on several healthy-looking nodes at once; failovers paused',
        );
        void this.events.record(
          sm,
          'Warning',
          'StormGuardActive',
          `${storm.suspects} of ${population.total - (population.byNode.get(storm.source) ?? 0)} leases went stale within ${this.config.storm.windowMs / 1000}s on ${storm.nodes} healthy-looking node(s)${storm.source ? ` besides ${storm.source} (${storm.explained} there)` : ''}; failovers paused`,
        );
      }
      this.later(this.config.storm.windowMs / 2, () => this.monitor?.rejudge(key));
      return;
    }
    this.stormAnnounced = false;
    if (!this.config.observeOnly && this.running >= this.config.maxConcurrentFailovers) {
      this.log.info({ lease: key, running: this.running }, 'max concurrent failovers reached; deferred');
      this.later(this.config.defaults.retryPeriodMs * 2, () => this.monitor?.rejudge(key));
      return;
    }
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
        if (m) this.checkOwner(machine);
        // Nobody runs it (failover-by names no manager): no owner to give time to.
        if (lease.failoverBy === undefined && this.config.fastFailover && !this.config.observeOnly)
          this.dispatch(key, 'takeoverDue');
      }
      return;
    }
    if (renewed) {
      this.storm = forgetLease(this.storm, key);
      this.failing.delete(key);
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
    this.counted.delete(key);
    this.failing.delete(key);
    this.awaitingShareManager.delete(key);
    this.storm = forgetLease(this.storm, key);
    if (this.machines.has(key)) this.dispatch(key, 'leaseGone');
  }

  /** A Node changed or was deleted: shares waiting for it to be known down look again. */
  onNodeChange(node: string): void {
    if (node === '') return;
    for (const m of [...this.machines.values()])
      if (m.phase === 'awaitingNodeDown' && m.lostNode === node) this.recheck(m, 'node');
  }

  /**
   * A waiting share reads its storage and Node again, within the concurrency limit (a
   * recheck that finds the node down goes on to mark): at the limit, again in a moment.
   */
  private recheck(m: Machine, why: 'node' | 'timer'): void {
    if (this.machines.get(m.key) !== m || m.phase !== 'awaitingNodeDown') return;
    if (this.running >= this.config.maxConcurrentFailovers) {
      clearTimeout(m.recheckTimer);
      m.recheckTimer = setTimeout(() => this.recheck(m, why), this.config.defaults.retryPeriodMs * 2);
      return;
    }
    this.log.debug({ lease: m.key, lostNode: m.lostNode, why }, 'storage-fencing gate: looking again');
    this.dispatch(m.key, 'recheckGate');
  }

  onPodChange(pod: V1Pod, deleted: boolean): void {
    const key = `${pod.metadata?.namespace}/${pod.metadata?.labels?.['leasehold.dev/share-manager'] ?? ''}`;
    const m = this.machines.get(key);
    if (!m) return;
    if (m.phase === 'following' || m.phase === 'followingAcquire') {
      this.noticeReplacement(m);
      return;
    }
    if (m.phase !== 'awaitingAcquire' || pod.metadata?.name !== m.replacementPod) return;
    const phase = pod.status?.phase;
    if (deleted || phase === 'Failed' || phase === 'Succeeded') this.dispatch(key, 'replacementFailed');
    else this.checkReplacement(m);
  }

  /** The replacement-lost verdict on `pod` (replacement-lost.ts), from the caches and our clock. */
  private judge(m: Machine, pod: V1Pod | undefined): ReplacementVerdict {
    const lease = this.monitor?.observation(m.key)?.lease;
    const name = pod?.metadata?.name ?? '';
    const node = pod?.spec?.nodeName ?? '';
    return judgeReplacement({
      now: this.clock.now(),
      durationMs: this.monitor?.observation(m.key)?.durationMs ?? this.config.defaults.leaseDurationMs,
      graceMs: this.config.nodeLeaseGraceMs,
      // An acquisition clears the mark; a lease naming the replacement is acquired whatever its marks.
      leaseUnacquired: lease !== undefined && lease.delinquentSince !== undefined && lease.holder !== name,
      node,
      heartbeat: node === '' ? undefined : this.view.heartbeat(node),
    });
  }

  /**
   * While waiting for the replacement's agent: is the replacement lost with its node?
   * `lost` dispatches `replacementLost`; otherwise looks again when the verdict could change.
   */
  private checkReplacement(m: Machine, confirmed = false): void {
    if (this.machines.get(m.key) !== m) return;
    if (m.phase !== 'awaitingAcquire' && m.phase !== 'followingAcquire') return;
    const [namespace] = m.key.split('/') as [string];
    const pod = m.replacementPod ? this.view.pod(namespace, m.replacementPod) : undefined;
    const verdict = this.judge(m, pod);
    clearTimeout(m.lostCheckTimer);
    if (verdict.kind === 'lost' && !confirmed) {
      this.confirmSilence(m, verdict.node, () => this.checkReplacement(m, true));
      return;
    }
    if (verdict.kind === 'lost') {
      this.log.warn(
        { lease: m.key, pod: m.replacementPod, node: verdict.node, silentMs: Math.round(verdict.silentMs) },
        'replacement lost with its node before its agent acquired',
      );
      m.lostReplacement = { pod: m.replacementPod ?? '', verdict };
      this.dispatch(m.key, 'replacementLost');
      return;
    }
    // NB: without a time (unscheduled, no heartbeat seen, lease acquired) a pod or lease
    // change brings the next look; the fallback only catches a heartbeat first seen later.
    const at = verdict.recheckAt ?? this.clock.now() + this.config.defaults.leaseDurationMs;
    const epoch = m.epoch;
    m.lostCheckTimer = setTimeout(
      () => {
        if (m.epoch === epoch) this.checkReplacement(m);
      },
      Math.max(0, at - this.clock.now()) + 1,
    );
  }

  /**
   * While the owner waits for the replacement's agent: a volume whose entry was released,
   * or left to a live kubelet, that the node still lists in use (and is still attached
   * there) LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT after the force-delete is released again (volume-handoff.ts `unmountOverdue`, `unmountCheckAt`), and looked
   * at again while the kubelet may put it back. Ends with the phase (clearTimers, the
   * phase check).
   */
  private scheduleUnmountCheck(m: Machine): void {
    clearTimeout(m.unmountTimer);
    const deletedAt = m.times.podDeleted?.mono;
    if (!m.watchUnmount || deletedAt === undefined || this.config.observeOnly) return;
    const at = unmountCheckAt(deletedAt, this.config.kubeletUnmountTimeoutMs, m.unmountForced);
    if (at === undefined) return;
    m.unmountTimer = setTimeout(
      () => {
        if (this.machines.get(m.key) !== m || m.phase !== 'awaitingAcquire') return;
        forceUnmountHandoff(m, {
          ...this.stepDeps(),
          onHandoff: () => void reportHandoff(this.reportContext(m)),
        }).then(
          (released) => {
            if (released) this.scheduleUnmountCheck(m);
          },
          (err: unknown) => {
            this.log.warn({ err, lease: m.key, lostNode: m.lostNode }, 'unmount check failed; looking again');
            m.unmountTimer = setTimeout(
              () => this.scheduleUnmountCheck(m),
              this.config.defaults.retryPeriodMs,
            );
          },
        );
      },
      Math.max(0, at - this.clock.now()) + 1,
    );
  }

  /**
   * While following: whether the owner's replacement exists, judged from the pod cache
   * (level-based, so a pod seen before the machine started counts too).
   */
  private noticeReplacement(m: Machine): void {
    const replacement = this.view.livePods(m.key).find((p) => p.metadata?.name !== m.lostPod);
    // A replacement lost with its node is no progress of the owner (it cannot cancel the timer).
    const lost = replacement !== undefined && this.judge(m, replacement).kind === 'lost';
    if (replacement && !lost) {
      m.replacementPod = replacement.metadata?.name;
      if (m.phase === 'following') this.dispatch(m.key, 'replacementLive');
      else this.checkReplacement(m);
    } else if (m.phase === 'followingAcquire' && replacement) {
      // Lost by our cache: checkReplacement confirms it with a fresh heartbeat read first.
      m.replacementPod = replacement.metadata?.name;
      this.checkReplacement(m);
    } else if (m.phase === 'followingAcquire') {
      this.dispatch(m.key, 'replacementFailed');
    }
  }

  // ---- the machine --------------------------------------------------------------

  private start(key: string, lease: LeaseRecord): Machine {
    const pod = this.view.pod(lease.namespace, lease.holder);
    const m: Machine = {
      key,
      phase: 'idle',
      epoch: 0,
      lostPod: lease.holder,
      lostNode: lease.holderNode || pod?.spec?.nodeName || '',
      owner: lease.failoverBy,
      replacementPod: undefined,
      verdictLease: undefined,
      times: {},
      inherited: undefined,
      holderSilentSince: undefined,
      handoff: undefined,
      storage: undefined,
      avoidNodes: [],
      silentNodes: [],
      lostReplacement: undefined,
      takeoverTimer: undefined,
      retryTimer: undefined,
      recheckTimer: undefined,
      lostCheckTimer: undefined,
      ownerCheckTimer: undefined,
      watchUnmount: false,
      unmountForced: 0,
      unmountTimer: undefined,
      confirming: false,
    };
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
      this.clearTimers(m);
      this.machines.delete(key);
    }
    if (t.next !== from && (from === 'awaitingNodeDown' || t.next === 'awaitingNodeDown'))
      this.metrics.awaitingNodeDown.set(
        [...this.machines.values()].filter((x) => x.phase === 'awaitingNodeDown').length,
      );
    // Entering `following`: the replacement may already exist (no pod event will say so).
    if (t.next !== from && t.next === 'following' && this.machines.get(key) === m) this.noticeReplacement(m);
    // Entering a wait for the replacement's agent: judge it now (its node may be silent already).
    if (t.next !== from && (t.next === 'awaitingAcquire' || t.next === 'followingAcquire'))
      this.checkReplacement(m);
    if (t.next !== from && t.next === 'awaitingAcquire') this.scheduleUnmountCheck(m);
    // Following (and timing the owner) from now on: its node may be silent already.
    if (t.next !== from && t.next === 'following' && this.machines.get(key) === m) this.checkOwner(m);
  }

  /**
   * While following: did the owner go down with its node (owner-lost.ts)? `lost`
   * dispatches `ownerLost`; otherwise looks again when the verdict could change.
   */
  private checkOwner(m: Machine, confirmed = false): void {
    clearTimeout(m.ownerCheckTimer);
    if (this.machines.get(m.key) !== m || m.phase !== 'following') return;
    if (!this.config.fastFailover || this.config.observeOnly) return;
    const observed = this.monitor?.observation(m.key);
    const ownerNode =
      observed?.lease.failoverBy !== undefined && observed.lease.failoverBy === m.owner
        ? observed.lease.failoverByNode
        : undefined;
    const durationMs = observed?.durationMs ?? this.config.defaults.leaseDurationMs;
    const verdict = judgeOwner({
      now: this.clock.now(),
      durationMs,
      graceMs: this.config.nodeLeaseGraceMs,
      ownerNode,
      myNode: this.config.nodeName,
      heartbeat: ownerNode ? this.view.heartbeat(ownerNode) : undefined,
    });
    if (verdict.kind === 'lost' && !confirmed) {
      this.confirmSilence(m, verdict.node, () => this.checkOwner(m, true));
      return;
    }
    if (verdict.kind === 'lost') {
      this.log.warn(
        { lease: m.key, owner: m.owner, node: verdict.node, silentMs: Math.round(verdict.silentMs) },
        'failover owner lost with its node: taking over',
      );
      this.dispatch(m.key, 'ownerLost');
      return;
    }
    // NB: no node named (or ours): only a lease change (a new owner) can change that.
    if (!ownerNode || ownerNode === this.config.nodeName) return;
    // Without a heartbeat seen yet, the fallback catches one first seen later.
    const at = verdict.recheckAt ?? this.clock.now() + durationMs;
    // NB: not tied to the epoch; checkOwner itself ends in any other phase.
    m.ownerCheckTimer = setTimeout(() => this.checkOwner(m), Math.max(0, at - this.clock.now()) + 1);
  }

  /**
   * A `lost` verdict from our caches is acted on only once a fresh (quorum) read of the
   * node's heartbeat Lease, fed to the node observer, still leaves it lost: our watch may
   * lag the API (a manager stalled by SIGSTOP or a starved machine runs its due timers
   * before the watch events queued meanwhile), and a healthy node's replacement or owner
   * must never be given up on stale evidence. `judgeAgain` runs after the read; a read
   * that fails judges again after the retry period (never acts on the cache alone). One
   * read per share at a time.
   */
  private confirmSilence(m: Machine, node: string, judgeAgain: () => void): void {
    if (m.confirming) return;
    m.confirming = true;
    this.executor.readNodeHeartbeat(node).then(
      (lease) => {
        m.confirming = false;
        // NB: a heartbeat Lease that is gone (its Node deleted) adds no renewal: still lost.
        if (lease) this.view.heartbeatRead(lease);
        if (this.machines.get(m.key) === m) judgeAgain();
      },
      (err: unknown) => {
        m.confirming = false;
        this.log.warn(
          { err, lease: m.key, node },
          'confirming a silent node by reading its heartbeat Lease failed; judging again later',
        );
        this.later(this.config.defaults.retryPeriodMs, () => {
          if (this.machines.get(m.key) === m) judgeAgain();
        });
      },
    );
  }

  /** Runs an I/O step; its outcome event reaches the machine only if the phase did not change. */
  private step(m: Machine, what: string, run: () => Promise<FailoverEvent>): void {
    const epoch = m.epoch;
    run().then(
      (event) => {
        this.failing.delete(m.key);
        if (this.machines.get(m.key) !== m || m.epoch !== epoch) {
          this.log.debug({ lease: m.key, what, event }, 'outcome of an earlier phase dropped');
          return;
        }
        this.dispatch(m.key, event);
      },
      (err: unknown) => {
        const failing = this.failing.get(m.key) ?? { count: 0, retryAfterMs: undefined, said: undefined };
        failing.count += 1;
        failing.retryAfterMs = retryAfterMsOf(err);
        this.failing.set(m.key, failing);
        this.log.warn(
          { err, lease: m.key, what, failures: failing.count },
          'failover step failed; will retry',
        );
        const message = `${what} failed ${failing.count} times in a row, retrying with backoff: ${err instanceof Error ? err.message : String(err)}`;
        const gist = `${what}: ${failureGist(err)}`;
        const sm = this.view.shareManager(m.key);
        if (failing.count >= PERSISTENT_STEP_FAILURES && failing.said !== gist && sm) {
          failing.said = gist;
          void this.events.record(sm, 'Warning', 'FailoverStepFailing', message);
        }
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
        const step = runStep(action, m, {
          ...this.stepDeps(),
          onHandoff: () => void reportHandoff(this.reportContext(m)),
          onGate: (condition) =>
            void reportStorageGate(this.reportContext(m), condition, this.clock.wallNow()),
        });
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
        this.failing.delete(m.key);
        this.metrics.failovers.inc({ result: 'completed' });
        void completeFailover(this.reportContext(m));
        return;
      case 'retarget': {
        // The lost replacement becomes the lost pod, its node the lost node; the nodes lost
        // before stay avoided. The mark stays (it names the first holder): nobody acquired.
        const lost = m.lostReplacement;
        if (!lost) return;
        if (m.lostNode !== '' && !m.avoidNodes.includes(m.lostNode)) m.avoidNodes.push(m.lostNode);
        m.lostPod = lost.pod;
        m.lostNode = lost.verdict.node;
        if (!m.silentNodes.includes(lost.verdict.node)) m.silentNodes.push(lost.verdict.node);
        m.replacementPod = undefined;
        // NB: no holder ever renewed from there: no "kubelet alive after the holder fenced" evidence.
        m.holderSilentSince = undefined;
        m.handoff = undefined;
        m.times = {
          detected: m.times.detected,
          marked: m.times.marked,
          replacementLost: { mono: this.clock.now(), wall: this.clock.wallNow() },
        };
        return;
      }
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
        }, this.retryPause(m.key));
        return;
      }
      case 'rejudgeLater':
        this.later(this.retryPause(m.key), () => this.monitor?.rejudge(m.key));
        return;
      case 'startRecheckTimer':
        clearTimeout(m.recheckTimer);
        m.recheckTimer = setTimeout(() => this.recheck(m, 'timer'), GATE_RECHECK_MS);
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

  private reportContext(m: Machine) {
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

  private stepDeps(): StepDeps {
    const { config, clock, log, metrics, executor, view, monitor } = this;
    return { config, clock, log, metrics, executor, view, monitor, onHandoff: () => {}, onGate: () => {} };
  }

  /** The pause before a failed step of `key` runs again: grows with its failures in a row. */
  private retryPause(key: string): number {
    const failing = this.failing.get(key);
    if (!failing) return this.config.defaults.retryPeriodMs;
    return retryPauseMs(
      failing.count,
      { initialMs: this.config.defaults.retryPeriodMs, maxMs: STEP_RETRY_MAX_MS },
      Math.random(),
      failing.retryAfterMs,
    );
  }

  private clearTimers(m: Machine): void {
    clearTimeout(m.takeoverTimer);
    clearTimeout(m.retryTimer);
    clearTimeout(m.recheckTimer);
    clearTimeout(m.lostCheckTimer);
    clearTimeout(m.ownerCheckTimer);
    clearTimeout(m.unmountTimer);
  }

  private later(ms: number, run: () => void): void {
    const timer = setTimeout(() => {
      this.pending.delete(timer);
      run();
    }, ms);
    this.pending.add(timer);
  }

  /** The lease's holder node: its annotation, else its holder pod's node, else '' (unknown). */
  private holderNodeOf(lease: LeaseRecord): string {
    if (lease.holderNode) return lease.holderNode;
    if (lease.holder === '') return '';
    return this.view.pod(lease.namespace, lease.holder)?.spec?.nodeName ?? '';
  }

  /** The tracked leases per holder node, for the storm guard. */
  private population(): Population {
    const leases = this.monitor?.leases() ?? [];
    const byNode = new Map<string, number>();
    for (const lease of leases) {
      const node = this.holderNodeOf(lease);
      if (node) byNode.set(node, (byNode.get(node) ?? 0) + 1);
    }
    return { total: leases.length, byNode };
  }

  /** For the metric: refresh whether the storm guard is active now. */
  refreshStormGauge(): void {
    const s = stormStatus(this.storm, this.population(), this.clock.now(), this.config.storm);
    this.storm = s.state;
    this.metrics.stormGuardActive.set(s.active ? 1 : 0);
  }
}
