/**
 * The informer's pause before it lists or watches again (lib/informer.ts applies it):
 * pure decisions, no clock, no I/O.
 *
 * Every end of a watch (or failed list) is one of three outcomes:
 *  - `delivered`: the server sent data (an event or a bookmark on that watch) or said
 *    410 Gone (it answered; re-list now);
 *  - `answered`: the server answered but served nothing: an HTTP error status (a 503
 *    "before all known HTTP paths have been installed" for a CRD, or 403 while its RBAC
 *    cache warms up, both right after an API-server restart; a 429; a 500) or a watch
 *    that opened and ended empty;
 *  - `unreachable`: no answer at all: connection refused or reset, a timeout, a watch
 *    silent past the quiet timeout.
 *
 * Rules:
 *  - after `delivered` the delay is the initial one;
 *  - the first `answered` after `unreachable` also starts over at the initial delay: the
 *    delay grown while the server was down measures its absence, not its answers (with
 *    the grown delay kept, a restarted API server's first 503 or 403 cost a whole
 *    `maxMs`, 10 s, per resource: measured 7 s for the ShareManager watch after an
 *    outage, and each further early answer as much again);
 *  - otherwise the delay doubles, up to `maxMs`, so a server that keeps answering with
 *    errors (a real RBAC gap) or stays down is asked at most once per `maxMs`.
 * The pause is jittered in [delay/2, delay), so many clients never retry in lockstep.
 *
 * Not guaranteed: a bound on how soon the server is asked after it returns: that is up
 * to the delay reached while it was down (at most `maxMs`).
 */
export type WatchOutcome = 'delivered' | 'answered' | 'unreachable';

export interface WatchBackoffPolicy {
  /** First pause, and the pause after data (default 200 ms). */
  initialMs: number;
  /** Longest pause (default 10 s). */
  maxMs: number;
}

export interface WatchBackoff {
  /** The delay before jitter. */
  delayMs: number;
  /** The outcome that set it; undefined before the first end. */
  last: WatchOutcome | undefined;
}

export const DEFAULT_WATCH_BACKOFF: WatchBackoffPolicy = { initialMs: 200, maxMs: 10_000 };

export function initialWatchBackoff(policy: WatchBackoffPolicy): WatchBackoff {
  return { delayMs: policy.initialMs, last: undefined };
}

/** The backoff after one more end of a watch or list with `outcome`. */
export function nextWatchBackoff(
  previous: WatchBackoff,
  outcome: WatchOutcome,
  policy: WatchBackoffPolicy,
): WatchBackoff {
  if (outcome === 'delivered') return { delayMs: policy.initialMs, last: outcome };
  if (outcome === 'answered' && previous.last === 'unreachable')
    return { delayMs: policy.initialMs, last: outcome };
  return { delayMs: Math.min(previous.delayMs * 2, policy.maxMs), last: outcome };
}

/** The pause for `delayMs`: in [delayMs/2, delayMs) for `random` in [0, 1). */
export function jitteredPauseMs(delayMs: number, random: number): number {
  return delayMs * (0.5 + random / 2);
}

/**
 * How one end of a list-then-watch counts. `status` is the HTTP status when the server
 * answered with one (KubeApiError.status), `reason` the informer's restart reason.
 */
export function watchOutcome(end: {
  reason: 'ended' | 'gone' | 'quiet' | 'error';
  delivered: boolean;
  status?: number | undefined;
}): WatchOutcome {
  if (end.delivered || end.reason === 'gone') return 'delivered';
  if (end.reason === 'ended') return 'answered';
  if (end.reason === 'error' && end.status !== undefined) return 'answered';
  return 'unreachable';
}

/** Validates a policy; returns problems naming the field, the value and the rule. */
export function watchBackoffProblems(policy: WatchBackoffPolicy): string[] {
  const problems: string[] = [];
  if (!(Number.isFinite(policy.initialMs) && policy.initialMs > 0))
    problems.push(`backoff.initialMs: ${policy.initialMs} must be a positive number of milliseconds`);
  if (!(Number.isFinite(policy.maxMs) && policy.maxMs >= policy.initialMs))
    problems.push(`backoff.maxMs: ${policy.maxMs} must be >= backoff.initialMs (${policy.initialMs})`);
  return problems;
}
