/**
 * The storm guard (DESIGN.md "Timings and safety"): when many leases go stale at once
 * while their nodes look healthy, the likelier culprit is this manager or the control
 * plane, not the share managers. New failovers then pause until the window passes
 * without that pattern.
 *
 * Invariants:
 *  - Pure: state in, state out; time is an argument.
 *  - Only stale verdicts whose holder node looks healthy count; a stale lease on an
 *    unhealthy node is an ordinary node failure and never feeds the guard.
 *  - Active iff, within the last `windowMs`, the count of distinct such leases is at
 *    least `minLeases` AND more than `threshold` x the leases tracked.
 *  - Every decision stays per lease: the guard only pauses; it never fails a lease over.
 */
export interface StormGuardConfig {
  threshold: number;
  minLeases: number;
  windowMs: number;
}

export interface StormGuardState {
  /** Lease key -> last time it was judged stale with a healthy node. */
  readonly recent: ReadonlyMap<string, number>;
}

export const emptyStormGuard: StormGuardState = { recent: new Map() };

export interface StormVerdict {
  state: StormGuardState;
  /** True when this failover may proceed now. */
  allow: boolean;
  active: boolean;
  suspects: number;
}

function prune(state: StormGuardState, now: number, windowMs: number): Map<string, number> {
  const recent = new Map<string, number>();
  for (const [key, at] of state.recent) if (now - at <= windowMs) recent.set(key, at);
  return recent;
}

function isActive(suspects: number, tracked: number, config: StormGuardConfig): boolean {
  return suspects >= config.minLeases && suspects > config.threshold * tracked;
}

/** Records one stale verdict and says whether its failover may start now. */
export function considerStale(
  state: StormGuardState,
  input: { key: string; nodeHealthy: boolean; tracked: number; now: number },
  config: StormGuardConfig,
): StormVerdict {
  const recent = prune(state, input.now, config.windowMs);
  if (input.nodeHealthy) recent.set(input.key, input.now);
  const active = isActive(recent.size, input.tracked, config);
  return { state: { recent }, allow: !active, active, suspects: recent.size };
}

/** Whether the guard is active now (e.g. for the metric, or to re-judge paused leases). */
export function stormStatus(
  state: StormGuardState,
  tracked: number,
  now: number,
  config: StormGuardConfig,
): { state: StormGuardState; active: boolean; suspects: number } {
  const recent = prune(state, now, config.windowMs);
  return { state: { recent }, active: isActive(recent.size, tracked, config), suspects: recent.size };
}

/** A lease that renewed (or went away) no longer counts as a suspect. */
export function forgetLease(state: StormGuardState, key: string): StormGuardState {
  if (!state.recent.has(key)) return state;
  const recent = new Map(state.recent);
  recent.delete(key);
  return { recent };
}
