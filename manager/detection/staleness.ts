/**
 * Staleness by the manager's own observation (docs/design.md, "Detection in the manager").
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
 *  - D is never shorter than the floor (the holder agent's lease duration, see
 *    lease-duration.ts), whatever the Lease says; a longer valid leaseDurationSeconds is
 *    honoured. The floor is sticky for one holder: while the same holder holds, a lower
 *    floor (a spec shortened, a ShareManager deleted) never replaces a higher one.
 *
 * Not guaranteed: freshness of the verdict. A lagging watch delays observations; the
 * confirming CAS (resourceVersion of the last observation) turns a late verdict into a
 * 409 instead of a false failover.
 */
import type { LeaseRecord } from '../../lib/lease-record.ts';
import { effectiveDurationMs } from './lease-duration.ts';

export interface Observation {
  signature: string;
  observedAt: number;
  /** The D this lease is judged by: max(floorMs, a valid leaseDurationSeconds). */
  durationMs: number;
  /** The floor applied: the holder agent's lease duration as far as known (sticky per holder). */
  floorMs: number;
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

/**
 * What identifies one renewal: any change here is proof of life. A time or a count the
 * record could not take (lease-fields.ts) still counts by its raw value.
 */
export function renewalSignature(lease: LeaseRecord): string {
  const spec = lease.wire?.spec;
  const raw = (value: unknown) => (value === undefined || value === null ? '' : `?${String(value)}`);
  const transitions =
    spec?.leaseTransitions === undefined || spec.leaseTransitions === lease.transitions
      ? lease.transitions
      : raw(spec.leaseTransitions);
  return [
    lease.holder,
    transitions,
    lease.acquireTime?.getTime() ?? raw(spec?.acquireTime),
    lease.renewTime?.getTime() ?? raw(spec?.renewTime),
  ].join('|');
}

/**
 * Records `lease` as seen at `now`; observedAt moves only when the renewal changed.
 * `floorMs` is the duration floor known now (lease-duration.ts durationFloorMs).
 */
export function observe(
  previous: Observation | undefined,
  lease: LeaseRecord,
  now: number,
  floorMs: number,
): { observation: Observation; renewed: boolean } {
  const signature = renewalSignature(lease);
  const sameHolder = previous !== undefined && previous.lease.holder === lease.holder;
  const floor = sameHolder ? Math.max(previous.floorMs, floorMs) : floorMs;
  const durationMs = effectiveDurationMs(lease.durationSeconds, floor);
  if (previous && previous.signature === signature) {
    return { observation: { ...previous, durationMs, floorMs: floor, lease }, renewed: false };
  }
  return { observation: { signature, observedAt: now, durationMs, floorMs: floor, lease }, renewed: true };
}

/** A new floor for the same lease version (its ShareManager or holder pod changed); sticky. */
export function refloor(observation: Observation, floorMs: number): Observation {
  const floor = Math.max(observation.floorMs, floorMs);
  return {
    ...observation,
    floorMs: floor,
    durationMs: effectiveDurationMs(observation.lease.durationSeconds, floor),
  };
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
