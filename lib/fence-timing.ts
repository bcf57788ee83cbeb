/**
 * How long a fence may take, and the rule that keeps it inside the safety margin. Shared
 * by the agent (its env) and the manager (ShareManager spec.fence), so both apply the
 * same bound.
 *
 * The argument (docs/design.md, "Why it is safe"): the agent starts its fence at most T after it
 * SENT its last successful renewal; no manager may declare the holder dead earlier than
 * D after it OBSERVED that renewal, which is later than the send. So a fence that ends
 * within `timeoutMs < D - T` after it started ends before any verdict.
 *
 *  - `graceMs`: after the first signal (SIGTERM by default), how long the targets get to
 *    stop by themselves before SIGKILL.
 *  - `timeoutMs`: the whole fence (signals, SIGKILL, verifying the targets are gone; or a
 *    fence command, killed at the end).
 * Defaults scale with the margin, so any valid D > T has valid defaults: timeout = 3/4 of
 * D - T (1.5 s with the defaults D = 6 s, T = 4 s), grace = half the timeout (750 ms).
 * Rule: 0 < grace < timeout < D - T.
 */
export interface FenceTiming {
  graceMs: number;
  timeoutMs: number;
}

export function defaultFenceTiming(leaseDurationMs: number, renewDeadlineMs: number): FenceTiming {
  const margin = Math.max(0, leaseDurationMs - renewDeadlineMs);
  const timeoutMs = Math.floor((margin * 3) / 4);
  return { timeoutMs, graceMs: Math.floor(timeoutMs / 2) };
}

/**
 * Problems of a fence timing against D and T, each naming the setting through `names`
 * (env var or spec field names) and the rule; [] when sound. `graceMs` is undefined for
 * a command fence (no signals of ours).
 */
export function fenceTimingProblems(
  timing: { graceMs: number | undefined; timeoutMs: number },
  lease: { leaseDurationMs: number; renewDeadlineMs: number },
  names: { grace: string; timeout: string; duration: string; deadline: string },
  format: (ms: number) => string,
): string[] {
  const margin = lease.leaseDurationMs - lease.renewDeadlineMs;
  const problems: string[] = [];
  if (!(timing.timeoutMs < margin)) {
    problems.push(
      `${names.timeout}=${format(timing.timeoutMs)} must be shorter than ${names.duration} minus ${names.deadline} (${format(margin)}): the fence must end before any manager may declare the holder dead`,
    );
  }
  if (timing.graceMs !== undefined && !(timing.graceMs < timing.timeoutMs)) {
    problems.push(
      `${names.grace}=${format(timing.graceMs)} must be shorter than ${names.timeout}=${format(timing.timeoutMs)}: SIGKILL must come inside the fence's time`,
    );
  }
  return problems;
}
