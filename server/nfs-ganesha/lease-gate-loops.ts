/**
 * The lease gate's I/O (the decisions and the safety argument: lease-gate.ts): asking the
 * agent's /readyz on the pod's loopback, waiting for the lease before ganesha starts,
 * and watching it while ganesha runs.
 *
 * Guarantees: `waitForLease` resolves `held` only on an answer decideGate calls `start`;
 * it never throws (an error of the request is an `unreachable` answer). Each request is
 * a new connection bounded by REQUEST_TIMEOUT_MS, so a restarted agent is reached at its
 * new socket and a hung one costs one timeout per poll. The log says when the gate
 * begins, each change of why it waits (not every poll), and how long it took.
 */
import { request } from 'node:http';
import { type Clock, sleep } from '../../lib/clock.ts';
import type { Logger } from '../../lib/logger.ts';
import {
  type AgentAnswer,
  decideGate,
  decideWatch,
  GATE_POLL_MS,
  leaseHeld,
  REQUEST_TIMEOUT_MS,
  WATCH_TOLERANCE_MS,
  type WaitReason,
  watchCadence,
} from './lease-gate.ts';

const MAX_BODY = 1024;

/** GET http://127.0.0.1:<port>/readyz; never rejects. */
export function askAgent(port: number, timeoutMs = REQUEST_TIMEOUT_MS): Promise<AgentAnswer> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (a: AgentAnswer) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      req.destroy();
      resolve(a);
    };
    const req = request({ host: '127.0.0.1', port, path: '/readyz', method: 'GET', agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        if (body.length < MAX_BODY) body += chunk;
      });
      res.on('end', () => finish({ kind: 'answered', status: res.statusCode ?? 0, body }));
      res.on('error', (err) => finish({ kind: 'unreachable', detail: err.message }));
    });
    const timer = setTimeout(
      () => finish({ kind: 'unreachable', detail: `no answer within ${timeoutMs}ms` }),
      timeoutMs,
    );
    req.on('error', (err: NodeJS.ErrnoException) =>
      finish({ kind: 'unreachable', detail: err.code ?? err.message }),
    );
    req.end();
  });
}

export type GateOutcome =
  /** askedAtMs: when the passing request was sent (monotonic ms), the watch's first proof. */
  | { kind: 'held'; waitedMs: number; askedAtMs: number }
  | { kind: 'stopped' }
  | { kind: 'gave-up'; message: string };

export interface GateDeps {
  port: number;
  clock: Clock;
  log: Logger;
  /** Aborted when a stop is requested: the wait ends at once with `stopped`. */
  stop: AbortSignal;
  /** Test seam: the request (askAgent). */
  ask?: (port: number) => Promise<AgentAnswer>;
  pollMs?: number;
}

/** Polls the agent every GATE_POLL_MS until decideGate says start or give up. */
export async function waitForLease(deps: GateDeps & { timeoutMs: number }): Promise<GateOutcome> {
  const { port, clock, log, stop, timeoutMs } = deps;
  const ask = deps.ask ?? askAgent;
  const sinceMs = clock.now();
  let lastReason: WaitReason | undefined;
  log.info({ agent: `127.0.0.1:${port}`, timeoutMs }, 'waiting for the agent to hold the lease');
  while (!stop.aborted) {
    const askedAtMs = clock.now();
    const answer = await ask(port);
    if (stop.aborted) break;
    const decision = decideGate(answer, { port, timeoutMs, sinceMs, nowMs: clock.now() });
    if (decision.kind === 'start') {
      const waitedMs = Math.round(clock.now() - sinceMs);
      log.info({ waitedMs }, 'the agent holds the lease: starting ganesha');
      return { kind: 'held', waitedMs, askedAtMs };
    }
    if (decision.kind === 'give-up') return { kind: 'gave-up', message: decision.message };
    if (decision.reason !== lastReason) {
      lastReason = decision.reason;
      log.info({ reason: decision.reason, detail: decision.detail }, 'lease not held yet: ganesha waits');
    }
    await sleepUnless(deps.pollMs ?? GATE_POLL_MS, stop);
  }
  return { kind: 'stopped' };
}

/**
 * While ganesha runs: asks every watchCadence(toleranceMs).pollMs and resolves with the
 * stop message once the proof has been missing for the tolerance; resolves undefined
 * when `stop` is aborted (ganesha ended). NB: decided on elapsed time: the deadline is
 * the send time of the last `lease held` request plus the tolerance, and a request still
 * out then (a hung agent) is not waited for.
 */
export async function watchLease(
  deps: GateDeps & { lastHeldMs: number; toleranceMs?: number },
): Promise<string | undefined> {
  const { port, clock, log, stop } = deps;
  const toleranceMs = deps.toleranceMs ?? WATCH_TOLERANCE_MS;
  const cadence = watchCadence(toleranceMs);
  const ask = deps.ask ?? ((p: number) => askAgent(p, cadence.requestTimeoutMs));
  let lastHeldMs = deps.lastHeldMs;
  let lastAnswer: AgentAnswer = { kind: 'unreachable', detail: 'no answer since the last proof' };
  let missing = false;
  const lapsed = () =>
    decideWatch(leaseHeld(lastAnswer) ? NO_ANSWER : lastAnswer, {
      port,
      lastHeldMs,
      nowMs: Math.max(clock.now(), lastHeldMs + toleranceMs),
      toleranceMs,
    });
  while (!stop.aborted) {
    const untilDeadline = lastHeldMs + toleranceMs - clock.now();
    await sleepUnless(Math.min(deps.pollMs ?? cadence.pollMs, Math.max(0, untilDeadline)), stop);
    if (stop.aborted) break;
    if (clock.now() >= lastHeldMs + toleranceMs) {
      const d = lapsed();
      if (d.kind === 'stop') return d.message;
    }
    const askedAtMs = clock.now();
    const answer = await answerBy(ask(port), lastHeldMs + toleranceMs - askedAtMs, stop);
    if (stop.aborted) break;
    if (answer === undefined) {
      // The deadline came with the request still out: no answer is waited for.
      lastAnswer = { kind: 'unreachable', detail: 'no answer before the deadline' };
      const d = lapsed();
      if (d.kind === 'stop') return d.message;
      continue;
    }
    lastAnswer = answer;
    const decision = decideWatch(answer, {
      port,
      lastHeldMs,
      nowMs: clock.now(),
      toleranceMs,
    });
    if (decision.kind === 'held') {
      if (missing) log.info('the agent reports the lease held again');
      missing = false;
      lastHeldMs = askedAtMs;
    } else if (decision.kind === 'tolerate') {
      if (!missing)
        log.warn(
          { reason: decision.reason, detail: decision.detail, missingMs: Math.round(decision.missingMs) },
          'the agent does not report the lease held',
        );
      missing = true;
    } else return decision.message;
  }
  return undefined;
}

const NO_ANSWER: AgentAnswer = { kind: 'unreachable', detail: 'no answer before the deadline' };

/** `answer`, or undefined once `ms` have passed first (real time) or `stop` is aborted. */
async function answerBy(
  answer: Promise<AgentAnswer>,
  ms: number,
  stop: AbortSignal,
): Promise<AgentAnswer | undefined> {
  if (ms <= 0) return undefined;
  const timer = new AbortController();
  const onStop = () => timer.abort();
  stop.addEventListener('abort', onStop, { once: true });
  try {
    return await Promise.race([
      answer,
      sleep(ms, timer.signal).then(
        () => undefined,
        () => undefined,
      ),
    ]);
  } finally {
    timer.abort();
    stop.removeEventListener('abort', onStop);
  }
}

/** Sleeps `ms`, or less when `stop` is aborted; never rejects. */
function sleepUnless(ms: number, stop: AbortSignal): Promise<void> {
  return sleep(ms, stop).catch(() => {});
}
