/**
 * The renewal loop: one CAS update of the cached Lease every R, until the lease is lost,
 * the renew deadline passes, the server check fails, or a planned stop is requested.
 *
 * Guarantees (docs/design.md, "Why it is safe"):
 *  - Happy path: exactly one API request per renewal (update with the cached object and
 *    its resourceVersion; no read before the write).
 *  - The deadline is T after the last successful request was SENT (monotonic clock).
 *    Every request's own deadline is min(request timeout, time left until T), and the
 *    loop itself wakes at T whatever a request is doing: it returns `deadline-passed` at
 *    T (plus timer latency), never later.
 *  - 409: one re-read; still ours and not delinquent -> continue with that version (and
 *    write again at once); otherwise `lost` at once. 404 on update is `lost` too.
 *  - Any other failure is retried every retry period until T.
 * Logs one line per state change (renewals failing, recovered); none per renewal at info.
 *
 * Not guaranteed: that an in-flight write did NOT commit after the loop gave up; that is
 * why the deadline counts from the send time (a late commit only makes us fence earlier).
 */
import type { Clock } from '../lib/clock.ts';
import { KubeApiError } from '../lib/errors.ts';
import type { LeaseRecord } from '../lib/lease-record.ts';
import type { LeaseStore, WriteOutcome } from '../lib/lease-store.ts';
import type { Logger } from '../lib/logger.ts';
import { type AgentMetrics, failureReason } from './agent-metrics.ts';
import type { AgentConfig } from './config.ts';
import {
  decideAfterConflict,
  type Identity,
  type LossReason,
  nextRenewalAt,
  nextRetryAt,
  renewDeadlineAt,
  renewedRecord,
  requestBudgetMs,
} from './lease-decision.ts';
import { checkServer, INITIAL_SERVER_CHECK_STATE, nextServerCheckState } from './server-check.ts';

export type RenewEnd =
  | { kind: 'lost'; reason: LossReason }
  | { kind: 'deadline-passed'; sinceLastSuccessMs: number }
  | { kind: 'server-check-failed'; detail: string }
  /** Planned stop: `lease` is the latest version known, for the release. */
  | { kind: 'stopped'; lease: LeaseRecord };

export interface RenewDeps {
  config: AgentConfig;
  store: LeaseStore;
  clock: Clock;
  log: Logger;
  metrics: AgentMetrics;
  stop: AbortSignal;
}

const DEADLINE = Symbol('deadline');
const STOPPED = Symbol('stopped');
type Interrupt = typeof DEADLINE | typeof STOPPED;

export async function renewLoop(
  deps: RenewDeps,
  acquired: LeaseRecord,
  acquiredSentAtMs: number,
): Promise<RenewEnd> {
  const { config, store, clock, log, metrics, stop } = deps;
  const { renewIntervalMs, renewDeadlineMs, retryPeriodMs, requestTimeoutMs } = config.timings;
  const me: Identity = { podName: config.podName, nodeName: config.nodeName };
  let lease = acquired;
  let lastSuccessSentAtMs = acquiredSentAtMs;
  let nextAtMs = nextRenewalAt(acquiredSentAtMs, renewIntervalMs);
  let firstAttemptOfCycle = true;
  let failing = false;
  let checkState = INITIAL_SERVER_CHECK_STATE;

  /** Waits for `work`, but no later than the deadline and no longer than until a stop. */
  const bounded = <T>(work: Promise<T>, deadlineAtMs: number): Promise<T | Interrupt> =>
    raceInterrupts(work, deadlineAtMs - clock.now(), stop);

  for (;;) {
    const deadlineAtMs = renewDeadlineAt(lastSuccessSentAtMs, renewDeadlineMs);
    const woke = await bounded(waitUntil(clock, Math.min(nextAtMs, deadlineAtMs)), deadlineAtMs + 1);
    if (woke === STOPPED) return { kind: 'stopped', lease };
    if (clock.now() >= deadlineAtMs) return deadlinePassed(clock, lastSuccessSentAtMs);

    if (config.serverCheck && firstAttemptOfCycle) {
      const { target, timeoutMs, failuresToFence } = config.serverCheck;
      const result = await checkServer(
        target,
        Math.max(1, Math.floor(Math.min(timeoutMs, deadlineAtMs - clock.now()))),
      );
      const next = nextServerCheckState(checkState, result, failuresToFence);
      if (!result.ok && checkState.seenHealthy) {
        metrics.failed('server_check');
        log.warn(
          { detail: result.detail, consecutive: next.state.consecutiveFailures },
          'server check failed',
        );
      } else if (result.ok && checkState.consecutiveFailures > 0) {
        log.info('server check recovered');
      } else if (result.ok && !checkState.seenHealthy) {
        log.info({ target: target.text }, 'server check passed for the first time; failures count from now');
      }
      checkState = next.state;
      if (next.fence) return { kind: 'server-check-failed', detail: result.ok ? '' : result.detail };
      if (clock.now() >= deadlineAtMs) return deadlinePassed(clock, lastSuccessSentAtMs);
    }

    const sentAtMs = clock.now();
    firstAttemptOfCycle = false;
    const budgetMs = requestBudgetMs(sentAtMs, deadlineAtMs, requestTimeoutMs);
    if (budgetMs <= 0) return deadlinePassed(clock, lastSuccessSentAtMs);
    let outcome: WriteOutcome | Interrupt;
    try {
      outcome = await bounded(store.update(renewedRecord(lease, clock.wallNow()), budgetMs), deadlineAtMs);
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 404) return { kind: 'lost', reason: 'deleted' };
      metrics.failed(failureReason(err));
      if (!failing)
        log.warn({ err: String(err) }, 'lease renewal failing; retrying until the renew deadline');
      failing = true;
      nextAtMs = nextRetryAt(sentAtMs, clock.now(), retryPeriodMs, deadlineAtMs);
      continue;
    }
    if (outcome === STOPPED) return { kind: 'stopped', lease };
    if (outcome === DEADLINE) return deadlineReached(clock, deadlineAtMs, lastSuccessSentAtMs);

    if (outcome.kind === 'written') {
      lease = outcome.lease;
      lastSuccessSentAtMs = sentAtMs;
      metrics.renewed(sentAtMs, clock.now() - sentAtMs, true);
      log.debug({ latencyMs: Math.round(clock.now() - sentAtMs) }, 'lease renewed');
      if (failing) log.info('lease renewal recovered');
      failing = false;
      firstAttemptOfCycle = true;
      nextAtMs = nextRenewalAt(sentAtMs, renewIntervalMs);
      continue;
    }

    // 409: someone else wrote the Lease. Read it once to learn whether it is still ours.
    metrics.failed('conflict');
    let reread: LeaseRecord | undefined | Interrupt;
    try {
      const readBudgetMs = requestBudgetMs(clock.now(), deadlineAtMs, requestTimeoutMs);
      if (readBudgetMs <= 0) return deadlinePassed(clock, lastSuccessSentAtMs);
      reread = await bounded(store.get(lease.namespace, lease.name, readBudgetMs), deadlineAtMs);
    } catch (err) {
      metrics.failed(failureReason(err));
      if (!failing) log.warn({ err: String(err) }, 'reading the lease after a conflict failed; retrying');
      failing = true;
      nextAtMs = nextRetryAt(sentAtMs, clock.now(), retryPeriodMs, deadlineAtMs);
      continue;
    }
    if (reread === STOPPED) return { kind: 'stopped', lease };
    if (reread === DEADLINE) return deadlineReached(clock, deadlineAtMs, lastSuccessSentAtMs);
    const decision = decideAfterConflict(reread, me);
    if (decision.kind === 'lost') return { kind: 'lost', reason: decision.reason };
    log.info(
      { resourceVersion: decision.lease.resourceVersion },
      'lease changed by another writer but still ours',
    );
    lease = decision.lease;
    nextAtMs = clock.now();
  }
}

function deadlinePassed(clock: Clock, lastSuccessSentAtMs: number): RenewEnd {
  return { kind: 'deadline-passed', sinceLastSuccessMs: clock.now() - lastSuccessSentAtMs };
}

/** NB: a timer may fire up to 1 ms early; the verdict waits for the clock to agree. */
async function deadlineReached(
  clock: Clock,
  deadlineAtMs: number,
  lastSuccessSentAtMs: number,
): Promise<RenewEnd> {
  await waitUntil(clock, deadlineAtMs);
  return deadlinePassed(clock, lastSuccessSentAtMs);
}

/** Resolves once the monotonic clock reaches `atMs` (timers may fire a little early). */
async function waitUntil(clock: Clock, atMs: number): Promise<void> {
  for (let left = atMs - clock.now(); left > 0; left = atMs - clock.now()) {
    await new Promise((resolve) => setTimeout(resolve, Math.ceil(left)));
  }
}

/** `work`'s value, or DEADLINE after `ms`, or STOPPED when `stop` aborts; whichever comes first. */
function raceInterrupts<T>(work: Promise<T>, ms: number, stop: AbortSignal): Promise<T | Interrupt> {
  if (stop.aborted) {
    work.catch(() => {}); // settled later; nobody waits for it any more
    return Promise.resolve(STOPPED);
  }
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => finish(() => resolve(DEADLINE)), Math.max(0, ms));
    const onStop = () => finish(() => resolve(STOPPED));
    stop.addEventListener('abort', onStop, { once: true });
    let done = false;
    const finish = (settle: () => void) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      stop.removeEventListener('abort', onStop);
      settle();
    };
    work.then(
      (value) => finish(() => resolve(value)),
      (err: unknown) => finish(() => reject(err)),
    );
  });
}
