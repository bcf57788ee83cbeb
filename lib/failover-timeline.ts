/**
 * A failover's timeline as leasehold prints it, in one place: the demo (dev/demo), the
 * e2e tests and `kubectl leasehold timeline` (kubectl-plugin/) show the steps in this
 * format, under this heading, with these names for the steps the manager records in
 * status.lastFailover (manager/failover/failover-report.ts).
 *
 * Guarantees: pure (no clock, no I/O). One line per step, in the order given; a step
 * not reached (seconds undefined) shows `?` in place of its time, so a missing step is
 * seen, not hidden. Times are seconds since the caller's origin (the crash in the demo,
 * the detection in the plugin), to the hundredth.
 */

export interface TimelineStep {
  step: string;
  /** Seconds since the timeline's origin; undefined: not reached (or not seen). */
  seconds: number | undefined;
  /** Who saw the step (status.lastFailover, a pod watch, a log, ...). */
  source: string;
}

/** The names of the steps status.lastFailover records, in the order a failover takes them. */
export const RECORDED_STEP = {
  detected: 'stale lease detected',
  marked: 'lease marked delinquent',
  podDeleted: (pod: string) => `pod ${pod} force-deleted`,
  released: (node: string) => `volume released on ${node} (handoff done or detached)`,
  replacementCreated: (pod: string) => `replacement ${pod} created`,
  acquired: 'new agent acquired the lease',
} as const;

/** The source of the steps read from the ShareManager's status. */
export const RECORD_SOURCE = 'status.lastFailover';

/** Seconds from `origin` to `at`, to the hundredth; undefined when `at` is. */
export function secondsSince(origin: Date, at: Date | undefined): number | undefined {
  return at === undefined ? undefined : Math.round((at.getTime() - origin.getTime()) / 10) / 100;
}

/** The line above a timeline: which failover, since what, and which manager ran it. */
export function timelineHeading(what: string, since: string, by: string | undefined): string {
  return `Timeline of the failover of ${what} (seconds since ${since}; run by manager ${by ?? '?'}):`;
}

export function formatTimeline(steps: readonly TimelineStep[]): string {
  return steps
    .map((s) => {
      // NB: both cells 9 wide, the `?` under the last digit, so the step column stays aligned.
      const t = s.seconds === undefined ? '      ?  ' : `${s.seconds.toFixed(2).padStart(7)} s`;
      return `  ${t}  ${s.step.padEnd(58)} (${s.source})`;
    })
    .join('\n');
}
