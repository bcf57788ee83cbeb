/**
 * The pause before retrying a failed API step (pure: no clock, no I/O; `random` in
 * [0, 1) is passed in). Used by the manager's work queue (a failed reconcile) and its
 * failover steps (a failed mark, delete, handoff or create), so that a step that keeps
 * failing (a 403 from Pod Security or a quota, an API server shedding load with 429)
 * is asked less and less often instead of at a fixed 2 Hz.
 *
 * Rules: retry number `attempt` (1 = the first retry) waits initialMs·2^(attempt−1),
 * capped at maxMs, jittered in [delay/2, delay) so that many shares failing together
 * never retry in lockstep; never sooner than the server's own Retry-After (a 429 or 503
 * carries one: the API server's priority and fairness sends 429 with Retry-After), which
 * is itself capped at maxMs so that a hostile or broken header cannot park a share.
 *
 * Not guaranteed: any bound on when a failing step succeeds; only on how often it asks.
 */

export interface RetryPolicy {
  /** The first retry's delay before jitter. */
  initialMs: number;
  /** The longest delay, also the cap of a Retry-After. */
  maxMs: number;
}

export function retryPauseMs(
  attempt: number,
  policy: RetryPolicy,
  random: number,
  retryAfterMs?: number | undefined,
): number {
  const n = Math.max(1, Math.floor(attempt));
  // NB: 2 ** n overflows to Infinity long after the cap; min() keeps it finite.
  const delay = Math.min(policy.initialMs * 2 ** (n - 1), policy.maxMs);
  const jittered = delay * (0.5 + Math.min(Math.max(random, 0), 1) / 2);
  if (retryAfterMs === undefined || !Number.isFinite(retryAfterMs) || retryAfterMs <= 0) return jittered;
  return Math.max(jittered, Math.min(retryAfterMs, policy.maxMs));
}

/**
 * The Retry-After of a failed API call in ms (client-node's ApiException `headers`, also
 * inside a KubeApiError's cause); only the delay-seconds form the API server sends.
 */
export function retryAfterMsOf(err: unknown): number | undefined {
  for (let e = err, depth = 0; e && depth < 4; e = (e as { cause?: unknown }).cause, depth += 1) {
    const headers = (e as { headers?: unknown }).headers;
    if (!headers || typeof headers !== 'object') continue;
    const raw =
      (headers as Record<string, unknown>)['retry-after'] ??
      (headers as Record<string, unknown>)['Retry-After'];
    const seconds = typeof raw === 'string' && /^\d+$/.test(raw.trim()) ? Number(raw.trim()) : undefined;
    if (seconds !== undefined) return seconds * 1000;
  }
  return undefined;
}
