/**
 * Whether a break of the Lease watch blinds the manager (the blindness rule,
 * docs/design.md "The storm guard and the blindness rule"): pure, time passed in.
 *
 * The informer (lib/informer.ts) asks the server for a watch of 5-10 min
 * (`timeoutSeconds`), so every watch ends cleanly that often and is resumed from the last
 * resourceVersion it saw (event or bookmark). The server replays every change after that
 * version, so the manager misses nothing: its observations stay true. Resetting them on
 * such a routine re-watch made a holder crash within D after it detected up to D late.
 *
 * Rules (`decideWatch`):
 *  - `continued`: the watch was healthy, ended cleanly (`ended`: the server closed the
 *    stream), and the very next report is a `resumed` watch opened less than
 *    `maxGapMs` after the end. Observations are kept and the watch counts as healthy
 *    since it first became healthy (so a manager still in its first D stays blind for
 *    the rest of it).
 *  - `reset` (every observation moves to now; the watch is healthy from now): anything
 *    else: a first connect, a re-list (410 Gone or a lost resourceVersion), a break by an
 *    error, an ERROR event, a 410 or a quiet timeout, a failed attempt between the end and
 *    the resume, a gap of `maxGapMs` or more, or a connect while already healthy.
 *  - While blind there are no verdicts (staleness.ts judges `blind`).
 *
 * Why the gap bound: the replay covers any gap the server's watch cache still holds (an
 * older version is a 410, hence a re-list, hence a reset), but a long silence means
 * something other than a routine re-watch (this process frozen, a server far behind);
 * there the old rule is the safe one. The informer resumes 100-200 ms after a watch
 * that delivered anything (its initial backoff), and a 5-10 min watch always delivers
 * (bookmarks about once a minute).
 *
 * Not guaranteed: a verdict right at the resume. A lease whose deadline passed during
 * the gap is judged stale as soon as the watch is healthy again, possibly before the
 * replayed renewal arrives; the confirming quorum read (stale-confirmation.ts) then sees
 * the moved resourceVersion and the lease is fresh, and the CAS guards the write. A
 * verdict is late by at most the gap (no timer runs while blind).
 */
import type { ConnectKind, RestartReason } from '../../lib/informer.ts';
import type { WatchHealth } from './staleness.ts';

export interface WatchContinuityPolicy {
  /**
   * Longest clean end-to-resume gap that keeps the observations (default 2000 ms: ten
   * times the informer's pause after a delivering watch). 0 resets on every re-watch
   * (the rule before this one). Hazard: a large value trusts the replay across long
   * silences of this process.
   */
  maxGapMs: number;
}

export const DEFAULT_WATCH_CONTINUITY: WatchContinuityPolicy = { maxGapMs: 2000 };

export type WatchReport =
  | { type: 'connected'; kind: ConnectKind }
  | { type: 'disconnected'; reason: RestartReason };

export type WatchState =
  | { kind: 'healthy'; healthySince: number }
  /** `cleanEnd` while the only break since a healthy watch is one clean end. */
  | { kind: 'blind'; cleanEnd: { at: number; healthySince: number } | undefined };

export const INITIAL_WATCH_STATE: WatchState = { kind: 'blind', cleanEnd: undefined };

export type WatchDecision = { state: WatchState; observations: 'keep' | 'reset' };

export function decideWatch(
  state: WatchState,
  report: WatchReport,
  now: number,
  policy: WatchContinuityPolicy,
): WatchDecision {
  if (report.type === 'disconnected') {
    const cleanEnd =
      state.kind === 'healthy' && report.reason === 'ended'
        ? { at: now, healthySince: state.healthySince }
        : undefined;
    return { state: { kind: 'blind', cleanEnd }, observations: 'keep' };
  }
  if (
    state.kind === 'blind' &&
    state.cleanEnd !== undefined &&
    report.kind === 'resumed' &&
    now - state.cleanEnd.at < policy.maxGapMs
  ) {
    return { state: { kind: 'healthy', healthySince: state.cleanEnd.healthySince }, observations: 'keep' };
  }
  return { state: { kind: 'healthy', healthySince: now }, observations: 'reset' };
}

/** The watch health staleness.ts judges by. */
export function watchHealth(state: WatchState): WatchHealth {
  return state.kind === 'healthy'
    ? { healthy: true, healthySince: state.healthySince }
    : { healthy: false, healthySince: 0 };
}

/** Validates a policy; returns problems naming the field, the value and the rule. */
export function watchContinuityProblems(policy: WatchContinuityPolicy): string[] {
  if (Number.isFinite(policy.maxGapMs) && policy.maxGapMs >= 0) return [];
  return [`watch continuity maxGapMs: ${policy.maxGapMs} must be a finite number of milliseconds >= 0`];
}
