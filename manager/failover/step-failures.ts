/**
 * Failover steps that failed in a row, per lease: how long to pause before the next try
 * and when to say so.
 *
 * Guarantees: the pause starts at retryPeriod and doubles per failure up to
 * STEP_RETRY_MAX_MS (jittered; never sooner than a 429's Retry-After,
 * lib/retry-backoff.ts); from the PERSISTENT_STEP_FAILURES-th failure in a row a Warning
 * event FailoverStepFailing is recorded once per distinct gist (step and failure), so a
 * persisting 403 is said once, a new failure again. Any success of the lease's steps, the
 * failover's end or the Lease's deletion forgets the count (`forget`).
 */
import { failureGist } from '../../lib/errors.ts';
import type { Logger } from '../../lib/logger.ts';
import { retryAfterMsOf, retryPauseMs } from '../../lib/retry-backoff.ts';
import type { EventRecorder } from '../events.ts';
import type { ShareManager } from '../share-model/share-manager-spec.ts';

/**
 * The cap of the pause: a failover is urgent, so it stays short, but a 403 from Pod
 * Security or a quota no longer costs requests and log lines at 2 Hz.
 */
const STEP_RETRY_MAX_MS = 10_000;
/** After this many failures of a share's steps in a row a Warning event says so. */
const PERSISTENT_STEP_FAILURES = 3;

interface Failing {
  count: number;
  retryAfterMs: number | undefined;
  said: string | undefined;
}

export class StepFailures {
  private readonly failing = new Map<string, Failing>();

  constructor(
    private readonly retryPeriodMs: number,
    private readonly log: Logger,
    private readonly events: EventRecorder,
  ) {}

  forget(key: string): void {
    this.failing.delete(key);
  }

  /** Step `what` of lease `key` failed with `err`: logged, and said as an event once it persists. */
  failed(key: string, what: string, err: unknown, sm: ShareManager | undefined): void {
    const failing = this.failing.get(key) ?? { count: 0, retryAfterMs: undefined, said: undefined };
    failing.count += 1;
    failing.retryAfterMs = retryAfterMsOf(err);
    this.failing.set(key, failing);
    this.log.warn({ err, lease: key, what, failures: failing.count }, 'failover step failed; will retry');
    const gist = `${what}: ${failureGist(err)}`;
    if (failing.count >= PERSISTENT_STEP_FAILURES && failing.said !== gist && sm) {
      failing.said = gist;
      const message = `${what} failed ${failing.count} times in a row, retrying with backoff: ${err instanceof Error ? err.message : String(err)}`;
      void this.events.record(sm, 'Warning', 'FailoverStepFailing', message);
    }
  }

  /** The pause before a failed step of `key` runs again: grows with its failures in a row. */
  pauseMs(key: string): number {
    const failing = this.failing.get(key);
    if (!failing) return this.retryPeriodMs;
    return retryPauseMs(
      failing.count,
      { initialMs: this.retryPeriodMs, maxMs: STEP_RETRY_MAX_MS },
      Math.random(),
      failing.retryAfterMs,
    );
  }
}
