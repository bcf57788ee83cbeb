/**
 * What a failover machine watches while it waits on others: the replacement's agent,
 * the owner of a failover it follows, the kubelet's unmount of the handed-off volume,
 * and evidence that a lost node is down (the storage-fencing gate).
 * Each turns what the caches and our clock say into the machine's events.
 *
 * Guarantees:
 *  - While the owner waits for the replacement's agent (`awaitingAcquire`), and while a
 *    follower waits for it (`followingAcquire`), the replacement is judged by
 *    replacement-lost.ts on entry, on every pod change of the share manager and at the
 *    instant the verdict names; `lost` is the event `replacementLost`. A follower never
 *    counts a replacement on a lost node as live (so it cannot cancel its takeover timer).
 *  - While following with the takeover timer running (`following`), the owner's node is
 *    judged by owner-lost.ts on entry, on a change of owner and at the instant the
 *    verdict names; `lost` is the event `ownerLost` (take over now, by CAS). Not in
 *    `followingAcquire`: the owner's replacement lives, and waiting for it is no stall.
 *  - A `lost` verdict from the caches is acted on only after a fresh (quorum) read of the
 *    node's heartbeat Lease still leaves it lost (`confirmSilence`).
 *  - A follower learns whether the owner's replacement exists from the pod cache, level-
 *    based (`replacementLive` / `replacementFailed`).
 *  - A share waiting for node-down evidence (`awaitingNodeDown`) reads its storage and
 *    Node again on a Node event and every GATE_RECHECK_MS, within the concurrency limit.
 *  - Every timer here checks that its machine is still current (and in the phase it was
 *    set for) before it acts.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerConfig } from '../config.ts';
import type { LeaseMonitor } from '../detection/lease-monitor.ts';
import type { FailoverExecutor } from './execute-failover.ts';
import type { Machine } from './failover-machine.ts';
import { type ClusterView, forceUnmountHandoff, type StepDeps } from './failover-steps.ts';
import type { FailoverEvent } from './failover-transitions.ts';
import { judgeOwner } from './owner-lost.ts';
import { judgeReplacement, type ReplacementVerdict } from './replacement-lost.ts';
import { unmountCheckAt } from './volume-handoff.ts';

/**
 * How often a share waiting for node-down evidence reads its storage and Node again
 * without a Node event (NB: the Node event is the fast path; this catches a CSIDriver
 * created or changed meanwhile, and a missed event). Each recheck costs every manager
 * four GETs per waiting share.
 */
export const GATE_RECHECK_MS = 30_000;

export interface WaitDeps {
  config: ManagerConfig;
  clock: Clock;
  log: Logger;
  executor: FailoverExecutor;
  view: ClusterView;
  monitor(): LeaseMonitor | undefined;
  /** Whether `m` is still the machine of its key (not ended, not replaced). */
  isCurrent(m: Machine): boolean;
  dispatch(key: string, event: FailoverEvent): void;
  /** How many failovers this manager owns now. */
  running(): number;
  later(ms: number, run: () => void): void;
  /** The steps' dependencies, for the unmount check's release. */
  stepDeps(m: Machine): StepDeps;
}

export class FailoverWaits {
  constructor(private readonly deps: WaitDeps) {}

  /**
   * A waiting share reads its storage and Node again, within the concurrency limit (a
   * recheck that finds the node down goes on to mark): at the limit, again in a moment.
   */
  recheckGate(m: Machine, why: 'node' | 'timer'): void {
    if (!this.deps.isCurrent(m) || m.phase !== 'awaitingNodeDown') return;
    if (this.deps.running() >= this.deps.config.maxConcurrentFailovers) {
      clearTimeout(m.recheckTimer);
      m.recheckTimer = setTimeout(
        () => this.recheckGate(m, why),
        this.deps.config.defaults.retryPeriodMs * 2,
      );
      return;
    }
    this.deps.log.debug({ lease: m.key, lostNode: m.lostNode, why }, 'storage-fencing gate: looking again');
    this.deps.dispatch(m.key, 'recheckGate');
  }

  /** While waiting for node-down evidence: look again after GATE_RECHECK_MS even without a Node event. */
  startGateRecheckTimer(m: Machine): void {
    clearTimeout(m.recheckTimer);
    m.recheckTimer = setTimeout(() => this.recheckGate(m, 'timer'), GATE_RECHECK_MS);
  }

  /** The replacement-lost verdict on `pod` (replacement-lost.ts), from the caches and our clock. */
  private judge(m: Machine, pod: V1Pod | undefined): ReplacementVerdict {
    const { config, clock, view } = this.deps;
    const observation = this.deps.monitor()?.observation(m.key);
    const lease = observation?.lease;
    const name = pod?.metadata?.name ?? '';
    const node = pod?.spec?.nodeName ?? '';
    return judgeReplacement({
      now: clock.now(),
      durationMs: observation?.durationMs ?? config.defaults.leaseDurationMs,
      graceMs: config.nodeLeaseGraceMs,
      // An acquisition clears the mark; a lease naming the replacement is acquired whatever its marks.
      leaseUnacquired: lease !== undefined && lease.delinquentSince !== undefined && lease.holder !== name,
      node,
      heartbeat: node === '' ? undefined : view.heartbeat(node),
    });
  }

  /**
   * While waiting for the replacement's agent: is the replacement lost with its node?
   * `lost` dispatches `replacementLost`; otherwise looks again when the verdict could change.
   */
  checkReplacement(m: Machine, confirmed = false): void {
    const { clock, config, log, view } = this.deps;
    if (!this.deps.isCurrent(m)) return;
    if (m.phase !== 'awaitingAcquire' && m.phase !== 'followingAcquire') return;
    const [namespace] = m.key.split('/') as [string];
    const pod = m.replacementPod ? view.pod(namespace, m.replacementPod) : undefined;
    const verdict = this.judge(m, pod);
    clearTimeout(m.lostCheckTimer);
    if (verdict.kind === 'lost' && !confirmed) {
      this.confirmSilence(m, verdict.node, () => this.checkReplacement(m, true));
      return;
    }
    if (verdict.kind === 'lost') {
      log.warn(
        { lease: m.key, pod: m.replacementPod, node: verdict.node, silentMs: Math.round(verdict.silentMs) },
        'replacement lost with its node before its agent acquired',
      );
      m.lostReplacement = { pod: m.replacementPod ?? '', verdict };
      this.deps.dispatch(m.key, 'replacementLost');
      return;
    }
    // NB: without a time (unscheduled, no heartbeat seen, lease acquired) a pod or lease
    // change brings the next look; the fallback only catches a heartbeat first seen later.
    const at = verdict.recheckAt ?? clock.now() + config.defaults.leaseDurationMs;
    const epoch = m.epoch;
    m.lostCheckTimer = setTimeout(
      () => {
        if (m.epoch === epoch) this.checkReplacement(m);
      },
      Math.max(0, at - clock.now()) + 1,
    );
  }

  /**
   * While following: whether the owner's replacement exists, judged from the pod cache
   * (level-based, so a pod seen before the machine started counts too).
   */
  noticeReplacement(m: Machine): void {
    const replacement = this.deps.view.livePods(m.key).find((p) => p.metadata?.name !== m.lostPod);
    // A replacement lost with its node is no progress of the owner (it cannot cancel the timer).
    const lost = replacement !== undefined && this.judge(m, replacement).kind === 'lost';
    if (replacement && !lost) {
      m.replacementPod = replacement.metadata?.name;
      if (m.phase === 'following') this.deps.dispatch(m.key, 'replacementLive');
      else this.checkReplacement(m);
    } else if (m.phase === 'followingAcquire' && replacement) {
      // Lost by our cache: checkReplacement confirms it with a fresh heartbeat read first.
      m.replacementPod = replacement.metadata?.name;
      this.checkReplacement(m);
    } else if (m.phase === 'followingAcquire') {
      this.deps.dispatch(m.key, 'replacementFailed');
    }
  }

  /**
   * While following: did the owner go down with its node (owner-lost.ts)? `lost`
   * dispatches `ownerLost`; otherwise looks again when the verdict could change.
   */
  checkOwner(m: Machine, confirmed = false): void {
    const { clock, config, log, view } = this.deps;
    clearTimeout(m.ownerCheckTimer);
    if (!this.deps.isCurrent(m) || m.phase !== 'following') return;
    if (!config.fastFailover || config.observeOnly) return;
    const observed = this.deps.monitor()?.observation(m.key);
    const ownerNode =
      observed?.lease.failoverBy !== undefined && observed.lease.failoverBy === m.owner
        ? observed.lease.failoverByNode
        : undefined;
    const durationMs = observed?.durationMs ?? config.defaults.leaseDurationMs;
    const verdict = judgeOwner({
      now: clock.now(),
      durationMs,
      graceMs: config.nodeLeaseGraceMs,
      ownerNode,
      myNode: config.nodeName,
      heartbeat: ownerNode ? view.heartbeat(ownerNode) : undefined,
    });
    if (verdict.kind === 'lost' && !confirmed) {
      this.confirmSilence(m, verdict.node, () => this.checkOwner(m, true));
      return;
    }
    if (verdict.kind === 'lost') {
      log.warn(
        { lease: m.key, owner: m.owner, node: verdict.node, silentMs: Math.round(verdict.silentMs) },
        'failover owner lost with its node: taking over',
      );
      this.deps.dispatch(m.key, 'ownerLost');
      return;
    }
    // NB: no node named (or ours): only a lease change (a new owner) can change that.
    if (!ownerNode || ownerNode === config.nodeName) return;
    // Without a heartbeat seen yet, the fallback catches one first seen later.
    const at = verdict.recheckAt ?? clock.now() + durationMs;
    // NB: not tied to the epoch; checkOwner itself ends in any other phase.
    m.ownerCheckTimer = setTimeout(() => this.checkOwner(m), Math.max(0, at - clock.now()) + 1);
  }

  /**
   * While the owner waits for the replacement's agent: a volume whose entry was released,
   * or left to a live kubelet, that the node still lists in use (and is still attached
   * there) LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT after the force-delete is released again
   * (volume-handoff.ts `unmountOverdue`, `unmountCheckAt`), and looked at again while the
   * kubelet may put it back. Ends with the phase (clearMachineTimers, the phase check).
   */
  scheduleUnmountCheck(m: Machine): void {
    const { clock, config, log } = this.deps;
    clearTimeout(m.unmountTimer);
    const deletedAt = m.times.podDeleted?.mono;
    if (!m.watchUnmount || deletedAt === undefined || config.observeOnly) return;
    const at = unmountCheckAt(deletedAt, config.kubeletUnmountTimeoutMs, m.unmountForced);
    if (at === undefined) return;
    m.unmountTimer = setTimeout(
      () => {
        if (!this.deps.isCurrent(m) || m.phase !== 'awaitingAcquire') return;
        forceUnmountHandoff(m, this.deps.stepDeps(m)).then(
          (released) => {
            if (released) this.scheduleUnmountCheck(m);
          },
          (err: unknown) => {
            log.warn({ err, lease: m.key, lostNode: m.lostNode }, 'unmount check failed; looking again');
            m.unmountTimer = setTimeout(() => this.scheduleUnmountCheck(m), config.defaults.retryPeriodMs);
          },
        );
      },
      Math.max(0, at - clock.now()) + 1,
    );
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
    const { config, log, executor, view } = this.deps;
    if (m.confirming) return;
    m.confirming = true;
    executor.readNodeHeartbeat(node).then(
      (lease) => {
        m.confirming = false;
        // NB: a heartbeat Lease that is gone (its Node deleted) adds no renewal: still lost.
        if (lease) view.heartbeatRead(lease);
        if (this.deps.isCurrent(m)) judgeAgain();
      },
      (err: unknown) => {
        m.confirming = false;
        log.warn(
          { err, lease: m.key, node },
          'confirming a silent node by reading its heartbeat Lease failed; judging again later',
        );
        this.deps.later(config.defaults.retryPeriodMs, () => {
          if (this.deps.isCurrent(m)) judgeAgain();
        });
      },
    );
  }
}
