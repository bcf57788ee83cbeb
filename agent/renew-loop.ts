/**
 * The renewal loop: one renewal round (renew-round.ts) every R, until the lease is lost,
 * the renew deadline passes, the server check fails, or a planned stop is requested.
 *
 * Guarantees (docs/design.md, "Why it is safe"):
 *  - Happy path: exactly one API request per renewal (update with the cached object and
 *    its resourceVersion; no read before the write).
 *  - The deadline is T after the last successful renewal was SENT (monotonic clock; with
 *    a hedge, the send of the write that committed: renew-round.ts says why). Every
 *    request's own deadline is min(request timeout, time left until T), and the loop
 *    itself wakes at T whatever a request is doing: it returns `deadline-passed` at T
 *    (plus timer latency), never later.
 *  - A slow or stuck renewal gets one hedge on a fresh connection after the hedge delay
 *    (at most two requests of a step in flight); when the round ends, the requests still
 *    in flight are aborted.
 *  - 409: the Lease is read; lost (another holder, delinquent, deleted) -> `lost` at once;
 *    one of this round's writes committed -> renewed; another writer, still ours ->
 *    continue with that version (and write again at once). 404 on update is `lost` too.
 *  - Any other failure is retried every retry period until T.
 * Logs one line per state change (renewals failing, recovered, won by hedges, hedges no
 * longer needed); none per renewal at info.
 *
 * Not guaranteed: that an in-flight write did NOT commit after the loop gave up; that is
 * why the deadline counts from the send time (a late commit only makes us fence earlier).
 */
import type { Clock } from '../lib/clock.ts';
import { KubeApiError } from '../lib/errors.ts';
import type { LeaseRecord } from '../lib/lease-record.ts';
import type { Logger } from '../lib/logger.ts';
import { type AgentMetrics, failureReason } from './agent-metrics.ts';
import type { AgentConfig } from './config.ts';
import {
  type Identity,
  type LossReason,
  nextRenewalAt,
  renewDeadlineAt,
  renewedRecord,
} from './lease-decision.ts';
import type { HedgeableLeaseStore } from './lease-http-store.ts';
import {
  nextRoundAction,
  type RoundAnswer,
  type RoundEnd,
  type RoundSettings,
  recordAnswer,
  recordSend,
  renewTimeFor,
  startRound,
} from './renew-round.ts';
import { checkServer, INITIAL_SERVER_CHECK_STATE, nextServerCheckState } from './server-check.ts';

export type RenewEnd =
  | { kind: 'lost'; reason: LossReason }
  | { kind: 'deadline-passed'; sinceLastSuccessMs: number }
  | { kind: 'server-check-failed'; detail: string }
  /** Planned stop: `lease` is the latest version known, for the release. */
  | { kind: 'stopped'; lease: LeaseRecord };

export interface RenewDeps {
  config: AgentConfig;
  /**
   * The serving deadline for a lease last proven by a renewal sent at the given time:
   * proof + T, or later on witness promises (witness-promises.ts). Default proof + T.
   */
  provenUntil?: (proofSentAtMs: number) => number;
  store: HedgeableLeaseStore;
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
  const { config, clock, log, metrics, stop } = deps;
  const { renewIntervalMs, renewDeadlineMs } = config.timings;
  let lease = acquired;
  let lastSuccessSentAtMs = acquiredSentAtMs;
  let nextAtMs = nextRenewalAt(acquiredSentAtMs, renewIntervalMs);
  let firstAttemptOfCycle = true;
  let checkState = INITIAL_SERVER_CHECK_STATE;
  const status = { failing: false, hedgeWinning: false };
  const provenUntil = deps.provenUntil ?? ((sentAtMs: number) => renewDeadlineAt(sentAtMs, renewDeadlineMs));
  let onPromisesSinceMs: number | undefined;
  let onPromisesSinceWall: Date | undefined;

  for (;;) {
    const deadlineAtMs = provenUntil(lastSuccessSentAtMs);
    if (
      onPromisesSinceMs === undefined &&
      clock.now() >= renewDeadlineAt(lastSuccessSentAtMs, renewDeadlineMs) &&
      clock.now() < deadlineAtMs
    ) {
      onPromisesSinceMs = clock.now();
      onPromisesSinceWall = clock.wallNow();
      log.warn(
        { sinceLastRenewalMs: Math.round(clock.now() - lastSuccessSentAtMs) },
        'lease not renewed for T: serving on the promises of a majority of witnesses (the API server is unreachable for them too)',
      );
    }
    const woke = await raceInterrupts(
      waitUntil(clock, Math.min(nextAtMs, deadlineAtMs)),
      deadlineAtMs + 1 - clock.now(),
      stop,
    );
    if (woke === STOPPED) return { kind: 'stopped', lease };
    if (clock.now() >= deadlineAtMs) {
      // Promises that arrived meanwhile may have moved the deadline.
      if (clock.now() < provenUntil(lastSuccessSentAtMs)) continue;
      return deadlinePassed(clock, lastSuccessSentAtMs);
    }

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

    firstAttemptOfCycle = false;
    const end = await runRound(deps, lease, deadlineAtMs, status);
    if (end === STOPPED) return { kind: 'stopped', lease };
    if (end.kind === 'deadline-passed') {
      await waitUntil(clock, deadlineAtMs);
      if (clock.now() < provenUntil(lastSuccessSentAtMs)) continue; // promises moved it
      return deadlinePassed(clock, lastSuccessSentAtMs);
    }
    if (end.kind === 'lost') return { kind: 'lost', reason: end.reason };
    if (end.kind === 'changed') {
      log.info(
        { resourceVersion: end.lease.resourceVersion },
        'lease changed by another writer but still ours',
      );
      lease = end.lease;
      nextAtMs = clock.now();
      continue;
    }
    const { winner } = end;
    const latencyMs = clock.now() - winner.sentAtMs;
    lease = end.lease;
    lastSuccessSentAtMs = end.proofSentAtMs;
    metrics.renewed(end.proofSentAtMs, latencyMs, true);
    if (winner.hedge) metrics.hedgeWon();
    log.debug({ latencyMs: Math.round(latencyMs), hedge: winner.hedge, via: end.via }, 'lease renewed');
    if (status.failing) log.info('lease renewal recovered');
    if (onPromisesSinceMs !== undefined) {
      log.info(
        { onPromisesMs: Math.round(clock.now() - onPromisesSinceMs) },
        'lease renewed through the API again after serving on witness promises',
      );
      // Said in the Lease by the next renewal, for the manager's ServedOnPromises condition.
      lease = {
        ...lease,
        servedOnPromises: `${(onPromisesSinceWall as Date).toISOString()}/${clock.wallNow().toISOString()}`,
      };
      onPromisesSinceMs = undefined;
    }
    if (winner.hedge && !status.hedgeWinning)
      log.info(
        { latencyMs: Math.round(latencyMs) },
        'lease renewed by a hedge on a fresh connection: the first attempt was slow or its connection stuck',
      );
    if (!winner.hedge && status.hedgeWinning) log.info('lease renewed without a hedge again');
    status.failing = false;
    status.hedgeWinning = winner.hedge;
    firstAttemptOfCycle = true;
    nextAtMs = nextRenewalAt(end.proofSentAtMs, renewIntervalMs);
  }
}

/**
 * Runs one round: sends what nextRoundAction says, feeds it the answers, and aborts what
 * is still in flight when the round ends. Returns STOPPED on a planned stop.
 */
async function runRound(
  deps: RenewDeps,
  base: LeaseRecord,
  deadlineAtMs: number,
  status: { failing: boolean },
): Promise<RoundEnd | typeof STOPPED> {
  const { config, store, clock, log, metrics, stop } = deps;
  const me: Identity = { podName: config.podName, nodeName: config.nodeName };
  const settings: RoundSettings = config.timings;
  const inFlight = new Map<number, AbortController>();
  const answers: Array<{ id: number; answer: RoundAnswer }> = [];
  let wake: (() => void) | undefined;
  let state = startRound(base, deadlineAtMs);

  const deliver = (id: number, answer: RoundAnswer) => {
    if (!inFlight.delete(id)) return; // the round is over: nobody waits for it
    answers.push({ id, answer });
    wake?.();
  };
  const failed = (id: number, step: 'write' | 'read', err: unknown) => {
    if (!inFlight.has(id)) return; // aborted by us at the end of the round
    if (err instanceof KubeApiError && err.status === 404 && step === 'write')
      return deliver(id, { kind: 'deleted' });
    metrics.failed(failureReason(err));
    if (!status.failing)
      log.warn(
        { err: String(err) },
        step === 'write'
          ? 'lease renewal failing; retrying until the renew deadline'
          : 'reading the lease after a conflict failed; retrying',
      );
    status.failing = true;
    deliver(id, { kind: 'failed' });
  };

  try {
    for (;;) {
      const nowMs = clock.now();
      const action = nextRoundAction(state, nowMs, settings);
      if (action.kind === 'end') return action.end;
      if (action.kind === 'send') {
        const controller = new AbortController();
        const options = { fresh: action.fresh, signal: controller.signal };
        if (action.step === 'write') {
          const renewTimeMs = renewTimeFor(state, clock.wallNow().getTime());
          const sent = recordSend(state, {
            step: 'write',
            hedge: action.hedge,
            sentAtMs: nowMs,
            renewTimeMs,
          });
          state = sent.state;
          const id = sent.id;
          inFlight.set(id, controller);
          store.update(renewedRecord(base, new Date(renewTimeMs)), action.budgetMs, options).then(
            (outcome) => {
              if (outcome.kind === 'conflict' && inFlight.has(id)) metrics.failed('conflict');
              deliver(id, outcome.kind === 'written' ? outcome : { kind: 'conflict' });
            },
            (err: unknown) => failed(id, 'write', err),
          );
        } else {
          const sent = recordSend(state, { step: 'read', hedge: action.hedge, sentAtMs: nowMs });
          state = sent.state;
          const id = sent.id;
          inFlight.set(id, controller);
          store.get(base.namespace, base.name, action.budgetMs, options).then(
            (lease) => deliver(id, { kind: 'read', lease }),
            (err: unknown) => failed(id, 'read', err),
          );
        }
        if (action.hedge) metrics.hedged();
        continue;
      }
      if (answers.length === 0) {
        const arrived = new Promise<void>((resolve) => {
          wake = resolve;
        });
        const woke = await raceInterrupts(
          Promise.race([arrived, waitUntil(clock, action.untilMs)]),
          deadlineAtMs + 1 - clock.now(),
          stop,
        );
        wake = undefined;
        if (woke === STOPPED) return STOPPED;
      }
      for (const { id, answer } of answers.splice(0)) state = recordAnswer(state, id, answer, me);
    }
  } finally {
    for (const controller of inFlight.values()) controller.abort();
    inFlight.clear();
  }
}

function deadlinePassed(clock: Clock, lastSuccessSentAtMs: number): RenewEnd {
  return { kind: 'deadline-passed', sinceLastSuccessMs: clock.now() - lastSuccessSentAtMs };
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
