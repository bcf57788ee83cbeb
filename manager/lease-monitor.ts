/**
 * Watches share-manager Leases for staleness with one timer per lease (no periodic
 * scan). The decisions are in staleness.ts; this file owns the timers and the watch
 * health that feeds the blindness rule.
 *
 * Invariants:
 *  - Each held, non-delinquent lease has at most one timer, set for its deadline
 *    (effective observedAt + D); a renewal re-arms it.
 *  - While the Lease watch is unhealthy no timer runs. When it becomes healthy again
 *    (resumed or re-listed) every observedAt is reset to now, so no verdict comes before
 *    D of healthy watch.
 *  - `onStale` is called when a timer finds the lease stale; it is called again only
 *    after `rejudge` (the caller decides when to ask again).
 */
import type { Clock } from '../lib/clock.ts';
import type { k8s } from '../lib/kube-client.ts';
import { fromWire, type LeaseRecord, leaseKey } from '../lib/lease-record.ts';
import { judge, type Observation, observe, resetObservation, type WatchHealth } from './staleness.ts';

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

export class LeaseMonitor {
  private readonly observations = new Map<string, Observation>();
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private watch: WatchHealth = { healthy: false, healthySince: 0 };

  constructor(
    private readonly clock: Clock,
    private readonly defaultDurationMs: number,
    private readonly hooks: LeaseMonitorHooks,
  ) {}

  get tracked(): number {
    return this.observations.size;
  }

  get watchHealthy(): boolean {
    return this.watch.healthy;
  }

  observation(key: string): Observation | undefined {
    return this.observations.get(key);
  }

  /** A lease as delivered by the watch (or a re-read after a conflict). */
  leaseSeen(wire: k8s.V1Lease): void {
    this.record(fromWire(wire));
  }

  record(lease: LeaseRecord): void {
    const key = leaseKey(lease);
    const previous = this.observations.get(key);
    if (previous && Number(previous.lease.resourceVersion) > Number(lease.resourceVersion)) return; // older than known
    const { observation, renewed } = observe(previous, lease, this.clock.now(), this.defaultDurationMs);
    this.observations.set(key, observation);
    this.hooks.onLeaseChange(key, lease, renewed);
    this.arm(key);
  }

  leaseDeleted(namespace: string, name: string): void {
    const key = `${namespace}/${name}`;
    this.observations.delete(key);
    this.clear(key);
    this.hooks.onLeaseGone(key);
  }

  watchConnected(): void {
    const now = this.clock.now();
    this.watch = { healthy: true, healthySince: now };
    for (const [key, observation] of this.observations)
      this.observations.set(key, resetObservation(observation, now));
    for (const key of this.observations.keys()) this.arm(key);
  }

  watchDisconnected(): void {
    this.watch = { healthy: false, healthySince: 0 };
    for (const key of [...this.timers.keys()]) this.clear(key);
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
    const verdict = judge(observation, this.watch, now);
    if (verdict.kind === 'fresh') {
      // +1 ms: "stale" is strictly after the deadline.
      const timer = setTimeout(() => this.fire(key), Math.max(0, verdict.deadline - now) + 1);
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
    const verdict = judge(observation, this.watch, now);
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
