/**
 * Watches share-manager Leases for staleness with one timer per lease (no periodic
 * scan). The decisions are in staleness.ts; this file owns the timers and the watch
 * health that feeds the blindness rule.
 *
 * Invariants:
 *  - Each held, non-delinquent lease has at most one timer, set for its deadline
 *    (effective observedAt + D); a renewal re-arms it.
 *  - While the Lease watch is unhealthy no timer runs. When it becomes healthy again
 *    every observedAt is reset to now, so no verdict comes before D of healthy watch;
 *    except after a routine re-watch (one clean end, resumed from the same
 *    resourceVersion within the gap bound: watch-continuity.ts), where the server
 *    replays what was missed and the observations are kept.
 *  - `onStale` is called when a timer finds the lease stale; it is called again only
 *    after `rejudge` (the caller decides when to ask again).
 *  - Every lease is read strictly first (lease-fields.ts): the hooks and the verdicts see
 *    only the cleaned record, and each odd value is logged once per lease (one warn line
 *    naming the lease, the field, the value and what the manager does instead).
 *  - D is at least the floor `durationFloor` returns for the lease (lease-duration.ts);
 *    `floorChanged` re-judges a lease when its ShareManager or holder pod changed.
 *  - No timer is set beyond 2^31 - 1 ms: a longer wait re-arms in steps, each firing
 *    once (a Lease with a huge duration costs one wake-up per ~24.8 days, not a spin).
 */
import type { Clock } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import type { ConnectKind, RestartReason } from '../../lib/informer.ts';
import type { k8s } from '../../lib/kube-client.ts';
import { fromWire, type LeaseRecord, leaseKey } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import { timerDelayMs } from './lease-duration.ts';
import { inspectLease, OddFieldMemory } from './lease-fields.ts';
import { judge, type Observation, observe, refloor, resetObservation } from './staleness.ts';
import {
  DEFAULT_WATCH_CONTINUITY,
  decideWatch,
  INITIAL_WATCH_STATE,
  type WatchContinuityPolicy,
  type WatchReport,
  type WatchState,
  watchContinuityProblems,
  watchHealth,
} from './watch-continuity.ts';

export interface StaleVerdict {
  key: string;
  observation: Observation;
  lagMs: number;
  effectiveObservedAt: number;
  at: number;
  /** How long the confirming read took (part of lagMs); undefined before confirmation. */
  confirmMs?: number;
}

export interface LeaseMonitorHooks {
  onStale(verdict: StaleVerdict): void;
  /** Every change of a lease, after it was recorded; `renewed` when its renewal signature moved. */
  onLeaseChange(key: string, lease: LeaseRecord, renewed: boolean): void;
  onLeaseGone(key: string): void;
}

/** The duration floor of a lease now (lease-duration.ts durationFloorMs), by its key and record. */
export type DurationFloor = (key: string, lease: LeaseRecord) => number;

export class LeaseMonitor {
  private readonly observations = new Map<string, Observation>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private watch: WatchState = INITIAL_WATCH_STATE;
  private readonly oddities = new OddFieldMemory();

  constructor(
    private readonly clock: Clock,
    private readonly durationFloor: DurationFloor,
    private readonly hooks: LeaseMonitorHooks,
    private readonly log: Logger,
    private readonly continuity: WatchContinuityPolicy = DEFAULT_WATCH_CONTINUITY,
  ) {
    const problems = watchContinuityProblems(continuity);
    if (problems.length > 0)
      throw new LeaseholdError('E_MONITOR_OPTIONS', `lease monitor: ${problems.join('; ')}`);
  }

  get tracked(): number {
    return this.observations.size;
  }

  get watchHealthy(): boolean {
    return this.watch.kind === 'healthy';
  }

  observation(key: string): Observation | undefined {
    return this.observations.get(key);
  }

  /** A lease as delivered by the informer: `current` when it came from a (re-)list, not a watch event. */
  leaseSeen(wire: k8s.V1Lease, current = false): void {
    this.record(fromWire(wire), current);
  }

  /**
   * Records a version of a lease. `current`: it is the server's state now (a quorum read,
   * or a list), not a watch event that may lag a read we already recorded.
   * An older resourceVersion than known is dropped when it comes from the watch (a late
   * event). When it is current, the server's store went back (etcd restored from a
   * backup): what we observed belongs to a history that no longer exists, so the lease
   * is observed afresh from now (no verdict before D of our own observation, as after a
   * blind spell) and later versions count from there. Dropping it instead would ignore
   * every later renewal and every later silence, and no holder that dies would ever be
   * failed over (issue 27 item 7).
   */
  record(raw: LeaseRecord, current = false): void {
    const key = leaseKey(raw);
    let previous = this.observations.get(key);
    if (previous && Number(previous.lease.resourceVersion) > Number(raw.resourceVersion)) {
      if (!current) return; // a late watch event: older than what we know
      this.log.warn(
        { lease: key, known: previous.lease.resourceVersion, now: raw.resourceVersion },
        'the lease is older on the API server than we knew it (etcd restored from a backup?): observed afresh from now',
      );
      previous = undefined;
    }
    const floorMs = this.durationFloor(key, raw);
    const { lease, odd } = inspectLease(
      raw,
      previous?.lease.holder === raw.holder ? Math.max(floorMs, previous.floorMs) : floorMs,
    );
    for (const o of this.oddities.fresh(key, odd)) {
      this.log.warn(
        { lease: key, field: o.field, value: o.value, instead: o.instead },
        `lease ${key}: ${o.field} = ${o.value}: ${o.instead}`,
      );
    }
    const { observation, renewed } = observe(previous, lease, this.clock.now(), floorMs);
    this.observations.set(key, observation);
    this.hooks.onLeaseChange(key, lease, renewed);
    this.arm(key);
  }

  leaseDeleted(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    this.observations.delete(key);
    this.oddities.forget(key);
    this.clear(key);
    this.hooks.onLeaseGone(key);
  }

  /** The floor of `key` may have changed (its ShareManager or holder pod): apply it, judge again. */
  floorChanged(key: string): void {
    const observation = this.observations.get(key);
    if (!observation) return;
    const next = refloor(observation, this.durationFloor(key, observation.lease));
    if (next.durationMs === observation.durationMs && next.floorMs === observation.floorMs) return;
    this.observations.set(key, next);
    if (this.timers.has(key)) this.arm(key);
  }

  /** Every tracked lease as last observed (cleaned). */
  leases(): LeaseRecord[] {
    return [...this.observations.values()].map((o) => o.lease);
  }

  /** The Lease watch opened (`kind` as the informer reports it). */
  watchConnected(kind: ConnectKind): void {
    const observations = this.watchReport({ type: 'connected', kind });
    if (observations === 'reset') {
      const now = this.clock.now();
      for (const [key, observation] of this.observations)
        this.observations.set(key, resetObservation(observation, now));
    }
    for (const key of this.observations.keys()) this.arm(key);
  }

  /** The Lease watch broke (`reason` as the informer reports it): no verdicts until it opens. */
  watchDisconnected(reason: RestartReason): void {
    this.watchReport({ type: 'disconnected', reason });
    for (const key of [...this.timers.keys()]) this.clear(key);
  }

  private watchReport(report: WatchReport): 'keep' | 'reset' {
    const { state, observations } = decideWatch(this.watch, report, this.clock.now(), this.continuity);
    this.watch = state;
    return observations;
  }

  /** Judges `key` again now (after a paused or failed attempt). */
  rejudge(key: string): void {
    this.arm(key);
  }

  stop(): void {
    for (const key of [...this.timers.keys()]) this.clear(key);
  }

  private clear(key: string): void {
    const timer = this.timers.get(key);
    if (timer) clearTimeout(timer);
    this.timers.delete(key);
  }

  private arm(key: string): void {
    this.clear(key);
    const observation = this.observations.get(key);
    if (!observation) return;
    const now = this.clock.now();
    const verdict = judge(observation, watchHealth(this.watch), now);
    if (verdict.kind === 'fresh') {
      // +1 ms: "stale" is strictly after the deadline. NB: clamped; fire() re-arms.
      const timer = setTimeout(() => this.fire(key), timerDelayMs(verdict.deadline - now + 1));
      this.timers.set(key, timer);
    } else if (verdict.kind === 'stale') {
      const timer = setTimeout(() => this.fire(key), 0);
      this.timers.set(key, timer);
    }
  }

  private fire(key: string): void {
    this.timers.delete(key);
    const observation = this.observations.get(key);
    if (!observation) return;
    const now = this.clock.now();
    const verdict = judge(observation, watchHealth(this.watch), now);
    if (verdict.kind === 'stale') {
      this.hooks.onStale({
        key,
        observation,
        lagMs: verdict.lagMs,
        effectiveObservedAt: verdict.effectiveObservedAt,
        at: now,
      });
    } else {
      this.arm(key);
    }
  }
}
