/**
 * The agent's lease decisions, pure: (what was read, what this agent observed, now) ->
 * what to do. No I/O, no clock reads: the caller passes `now` (monotonic ms) and does
 * what the returned action says (acquire-loop.ts, renew-loop.ts).
 *
 * Invariants (docs/design.md, "The lease protocol": acquire and renew):
 *  - A lease held by someone else is taken only when it is free, marked delinquent, or
 *    (only with `takeExpired`) its resourceVersion has stayed the same for the lease
 *    duration by THIS agent's own monotonic observation. Remote renewTime/acquireTime
 *    are never compared with a local clock. Without `takeExpired` a silent holder is
 *    left to the manager's failover, which runs the storage-fencing gate first: on
 *    storage that cannot fence, a holder that is only silent (its node frozen while
 *    its pod was being deleted) may resume and write (docs/design.md, "Storage fencing").
 *  - A lease naming this pod is resumed (restart in place) only when it is not marked
 *    delinquent: a delinquent mark on our own lease means a manager declared this
 *    incarnation dead, and a replacement pod is on its way.
 *  - After a 409 on renewal the lease is kept only if the re-read still names this pod
 *    and is not delinquent; anything else is a loss, which fences at once.
 *  - The renew deadline is counted from when the last successful request was SENT, so a
 *    write that committed late can only make the agent fence earlier, never later.
 *
 * Not guaranteed here: that the write the caller then sends succeeds (it is a CAS; a
 * conflict sends the caller back to reading).
 */
import type { LeaseRecord } from '../lib/lease-record.ts';

export interface Identity {
  podName: string;
  nodeName: string;
}

/** When this agent last saw the lease change (by resourceVersion), on its own clock. */
export interface Observation {
  resourceVersion: string;
  observedAtMs: number;
}

/** Records a read: the observation time moves only when the resourceVersion changed. */
export function observe(previous: Observation | undefined, lease: LeaseRecord, nowMs: number): Observation {
  if (previous !== undefined && previous.resourceVersion === lease.resourceVersion) return previous;
  return { resourceVersion: lease.resourceVersion, observedAtMs: nowMs };
}

export type TakeReason = 'free' | 'self' | 'delinquent' | 'expired';

export type AcquireAction =
  | { kind: 'create' }
  | { kind: 'take'; reason: TakeReason }
  /** Someone else holds it and looks alive; read again later. `expiresAtMs` is our own estimate. */
  | { kind: 'wait'; holder: string; expiresAtMs: number }
  /** The lease names this pod but is marked delinquent: this incarnation must not serve. */
  | { kind: 'refuse'; reason: 'self-delinquent' };

/**
 * What to do with the lease just read. `observation` must already include this read
 * (see observe()). NB: the silence that counts is the longer of our configured duration
 * and the duration the holder wrote, so a holder with a longer lease is never cut short.
 */
export function decideAcquire(
  lease: LeaseRecord | undefined,
  observation: Observation | undefined,
  me: Identity,
  leaseDurationMs: number,
  nowMs: number,
  takeExpired = true,
): AcquireAction {
  if (lease === undefined) return { kind: 'create' };
  if (lease.holder === '') return { kind: 'take', reason: 'free' };
  if (lease.holder === me.podName) {
    return lease.delinquentSince
      ? { kind: 'refuse', reason: 'self-delinquent' }
      : { kind: 'take', reason: 'self' };
  }
  if (lease.delinquentSince) return { kind: 'take', reason: 'delinquent' };
  const silenceMs = Math.max(leaseDurationMs, lease.durationSeconds * 1000);
  const sameVersion = observation !== undefined && observation.resourceVersion === lease.resourceVersion;
  const expiresAtMs = sameVersion ? observation.observedAtMs + silenceMs : nowMs + silenceMs;
  if (takeExpired && sameVersion && nowMs >= expiresAtMs) return { kind: 'take', reason: 'expired' };
  return { kind: 'wait', holder: lease.holder, expiresAtMs };
}

/**
 * The record to write to take `lease` (or to create it when `lease` is the blank from
 * newLeaseRecord). Sets holder, holder-node, both times, the duration, bumps the
 * transitions (the fencing token) on a change of holder, clears `delinquent`, and writes
 * this agent's witness set and cap (leasehold.dev/witnesses, serve-without-api-ms).
 * NB: `failover-by` is the manager's; it is left as it is.
 */
export function acquiredRecord(
  lease: LeaseRecord,
  me: Identity,
  leaseDurationMs: number,
  wallNow: Date,
  witnesses: { names: string[]; serveWithoutApiMs: number | undefined } = {
    names: [],
    serveWithoutApiMs: undefined,
  },
): LeaseRecord {
  const changesHolder = lease.holder !== me.podName;
  return {
    ...lease,
    // Our set, which our replacement will ask; none clears the previous holder's.
    witnesses: witnesses.names,
    servedOnPromises: changesHolder ? '' : lease.servedOnPromises,
    serveWithoutApiMs: witnesses.names.length > 0 ? witnesses.serveWithoutApiMs : undefined,
    holder: me.podName,
    holderNode: me.nodeName,
    durationSeconds: Math.ceil(leaseDurationMs / 1000),
    acquireTime: changesHolder || lease.acquireTime === undefined ? wallNow : lease.acquireTime,
    renewTime: wallNow,
    transitions: changesHolder ? nextTransitions(lease.transitions) : lease.transitions,
    delinquentSince: undefined,
  };
}

/** The largest leaseTransitions the API server takes (an int32 field). */
export const MAX_TRANSITIONS = 2 ** 31 - 1;

/**
 * leaseTransitions after a change of holder: one more, or 1 again past the int32
 * maximum (the API server refuses 2^31, which would block every acquisition for good).
 * Wrapping is safe: nothing orders transitions, a manager compares them only for
 * equality (detection/staleness.ts), and 1 differs from the maximum.
 */
export function nextTransitions(transitions: number): number {
  return Number.isSafeInteger(transitions) && transitions >= 0 && transitions < MAX_TRANSITIONS
    ? transitions + 1
    : 1;
}

/** The renewal write: only renewTime changes; the cached resourceVersion makes it a CAS. */
export function renewedRecord(lease: LeaseRecord, wallNow: Date): LeaseRecord {
  return { ...lease, renewTime: wallNow };
}

/** The release write: holder emptied, transitions kept, so the next pod acquires at once. */
export function releasedRecord(lease: LeaseRecord): LeaseRecord {
  return { ...lease, holder: '', holderNode: '' };
}

export type LossReason = 'deleted' | 'holder-changed' | 'delinquent';

export type ConflictDecision =
  | { kind: 'continue'; lease: LeaseRecord }
  | { kind: 'lost'; reason: LossReason };

/** After a 409 on renewal: keep going with the re-read version, or fence. */
export function decideAfterConflict(reread: LeaseRecord | undefined, me: Identity): ConflictDecision {
  if (reread === undefined) return { kind: 'lost', reason: 'deleted' };
  if (reread.holder !== me.podName) return { kind: 'lost', reason: 'holder-changed' };
  if (reread.delinquentSince) return { kind: 'lost', reason: 'delinquent' };
  return { kind: 'continue', lease: reread };
}

/** Monotonic time at which the agent must fence if no renewal succeeds before it. */
export function renewDeadlineAt(lastSuccessSentAtMs: number, renewDeadlineMs: number): number {
  return lastSuccessSentAtMs + renewDeadlineMs;
}

/**
 * How long the next request may take: at most `requestTimeoutMs`, and never past the
 * renew deadline. Zero or less means the deadline has passed: fence, do not send.
 * NB: whole milliseconds, rounded down (AbortSignal.timeout rejects fractions, and
 * rounding up could outlive the deadline).
 */
export function requestBudgetMs(nowMs: number, deadlineAtMs: number, requestTimeoutMs: number): number {
  return Math.floor(Math.min(requestTimeoutMs, deadlineAtMs - nowMs));
}

/** When the next renewal is due after a success that was sent at `sentAtMs`. */
export function nextRenewalAt(sentAtMs: number, renewIntervalMs: number): number {
  return sentAtMs + renewIntervalMs;
}

/**
 * When to retry after a failed attempt that started at `attemptStartedAtMs`: one retry
 * period after that start (at once if the attempt itself took longer), but never later
 * than the deadline, where the loop fences instead.
 */
export function nextRetryAt(
  attemptStartedAtMs: number,
  nowMs: number,
  retryPeriodMs: number,
  deadlineAtMs: number,
): number {
  return Math.min(Math.max(nowMs, attemptStartedAtMs + retryPeriodMs), deadlineAtMs);
}
