/**
 * Staleness by the manager's own observation (DESIGN.md "Timings and safety").
 *
 * Invariants:
 *  - `observedAt` is this manager's monotonic time at which it saw the lease's renewal
 *    signature (holder, transitions, acquire/renew time) change. renewTime is only ever
 *    compared with an earlier renewTime of the same lease, never with a local clock, so
 *    clock offsets between holder and manager cannot make a lease stale.
 *  - A lease is stale when `now - effectiveObservedAt > D`, where the effective time is
 *    never earlier than the moment the Lease watch last became healthy (blindness rule:
 *    a manager that was blind knows nothing about freshness; it needs D of healthy watch
 *    before any verdict).
 *  - While the watch is unhealthy there is no deadline at all: no verdicts.
 *  - Only held, non-delinquent leases have deadlines; free ones have nothing to fail over
 *    and delinquent ones belong to the failover machine.
 *
 * Not guaranteed: freshness of the verdict. A lagging watch delays observations; the
 * confirming CAS (resourceVersion of the last observation) turns a late verdict into a
 * 409 instead of a false failover.
 */
import type { LeaseRecord } from '../lib/lease-record.ts';

export interface Observation {
  signature: string;
  observedAt: number;
  durationMs: number;
  /** The last version of the lease seen (any change), for the confirming CAS. */
  lease: LeaseRecord;
}

export interface WatchHealth {
  healthy: boolean;
  /** Monotonic time the watch last became healthy (meaningful while healthy). */
  healthySince: number;
}

export type Judgement =
  | { kind: 'fresh'; deadline: number }
  | { kind: 'stale'; lagMs: number; effectiveObservedAt: number }
  | { kind: 'blind' }
  | { kind: 'free' }
  | { kind: 'delinquent' };

/** What identifies one renewal: any change here is proof of life. */
export function renewalSignature(lease: LeaseRecord): string {
  return [
    lease.holder,
    lease.transitions,
    lease.acquireTime?.getTime() ?? '',
    lease.renewTime?.getTime() ?? '',
  ].join('|');
}

export function leaseDurationMs(lease: LeaseRecord, defaultMs: number): number {
  return lease.durationSeconds > 0 ? lease.durationSeconds * 1000 : defaultMs;
}

/** Records `lease` as seen at `now`; observedAt moves only when the renewal changed. */
export function observe(
  previous: Observation | undefined,
  lease: LeaseRecord,
  now: number,
  defaultDurationMs: number,
): { observation: Observation; renewed: boolean } {
  const signature = renewalSignature(lease);
  const durationMs = leaseDurationMs(lease, defaultDurationMs);
  if (previous && previous.signature === signature) {
    return { observation: { ...previous, durationMs, lease }, renewed: false };
  }
  return { observation: { signature, observedAt: now, durationMs, lease }, renewed: true };
}

/** The blindness rule: forget freshness, start counting from `now`. */
export function resetObservation(observation: Observation, now: number): Observation {
  return { ...observation, observedAt: now };
}

export function judge(observation: Observation, watch: WatchHealth, now: number): Judgement {
  const lease = observation.lease;
  if (lease.delinquentSince) return { kind: 'delinquent' };
  if (lease.holder === '') return { kind: 'free' };
  if (!watch.healthy) return { kind: 'blind' };
  const effectiveObservedAt = Math.max(observation.observedAt, watch.healthySince);
  const deadline = effectiveObservedAt + observation.durationMs;
  if (now > deadline) return { kind: 'stale', lagMs: now - deadline, effectiveObservedAt };
  return { kind: 'fresh', deadline };
}
