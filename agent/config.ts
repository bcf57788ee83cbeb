/**
 * The agent's configuration, read from env vars only and validated before any work.
 * Every problem is reported at once, naming the variable, the value and the rule;
 * main exits with code 2 (see exit-codes.ts).
 *
 * | variable                          | default  | meaning / hazard |
 * |-----------------------------------|----------|------------------|
 * | LEASEHOLD_LEASE_NAMESPACE         | required | namespace of the Lease (= the ShareManager's) |
 * | LEASEHOLD_LEASE_NAME              | required | name of the Lease (= the ShareManager's); a created Lease is labelled leasehold.dev/share-manager=<name> |
 * | LEASEHOLD_POD_NAME                | required | this pod (downward API): the holderIdentity |
 * | LEASEHOLD_NODE_NAME               | required | this node (downward API): annotation leasehold.dev/holder-node |
 * | LEASEHOLD_LEASE_DURATION   (D)    | 6s       | others may take the lease D after its last observed change |
 * | LEASEHOLD_RENEW_INTERVAL   (R)    | 2s       | one CAS renewal every R |
 * | LEASEHOLD_RENEW_DEADLINE   (T)    | 4s       | fence when T passed since the last successful renewal was SENT |
 * | LEASEHOLD_RETRY_PERIOD            | 500ms    | pause between failed attempts (and between reads while waiting to acquire) |
 * | LEASEHOLD_HEDGE_DELAY             | min(500ms, (T-R)/2) | a renewal (or the read after a 409) not answered after this gets a second attempt on a fresh connection (renew-round.ts); 0 = off. Hazard: up to 2x the renewal requests while the API is slow |
 * | LEASEHOLD_REQUEST_TIMEOUT         | T-R (1s when hedging is off) | cap on one API request; each is also cut at the renew deadline. Hazard: below the API's latency every attempt is cut and the agent fences a healthy server |
 * | LEASEHOLD_ACQUIRE_TIMEOUT         | 0        | give up acquiring (exit 3) after this long; 0 waits forever |
 * | LEASEHOLD_TAKE_EXPIRED            | true     | take a held lease after D of silence by this agent's observation; false leaves a silent holder to the manager's failover (its storage-fencing gate). The manager sets false under LEASEHOLD_NONFENCING_STORAGE=require-node-down. Hazard of true: on storage that cannot fence, a frozen holder may write once more on resume |
 * | LEASEHOLD_RELEASE_TIMEOUT         | 900ms    | budget for releasing the lease on SIGTERM |
 * | LEASEHOLD_FENCE_ACTION            | pod      | pod (every process of the pod but the agent), signal (processes by name), command, or none (explicit opt-out: the server keeps running) |
 * | LEASEHOLD_FENCE_PROCESS           | -        | for `signal`: process name (see fence-targets.ts for the matching rule) |
 * | LEASEHOLD_FENCE_SIGNAL            | SIGTERM  | for `pod` and `signal`: the first signal; SIGKILL follows after the grace |
 * | LEASEHOLD_FENCE_GRACE             | timeout/2 | for `pod` and `signal`: time between the first signal and SIGKILL; < timeout |
 * | LEASEHOLD_FENCE_TIMEOUT           | 3/4 (D-T) | the whole fence (signals, SIGKILL, targets verified gone; or the command, killed then); < D - T |
 * | LEASEHOLD_FENCE_COMMAND           | -        | for `command`: run with /bin/sh -c |
 * | LEASEHOLD_HTTP_PORT               | 8081     | /healthz /readyz /metrics (0 = any free port, logged) |
 * | LEASEHOLD_HTTP_HOST               | 0.0.0.0  | address the endpoints listen on |
 * | LEASEHOLD_LOG_LEVEL               | info     | fatal, error, warn, info, debug, trace, silent |
 * | LEASEHOLD_SERVER_CHECK            | -        | optional: tcp://host:port or http://host:port/path, checked before each renewal |
 * | LEASEHOLD_SERVER_CHECK_TIMEOUT    | 1s       | per check; must be < T - R so a check cannot starve the renewal |
 * | LEASEHOLD_SERVER_CHECK_FAILURES   | 3        | consecutive failures (after the first success) that fence |
 * | LEASEHOLD_WITNESSES               | none     | the witness set: `node=http://host:port,...` (at least 3 managers); none = off: fence T after the last renewal, as always. With it, an agent that cannot renew asks the witnesses for promises and serves on a majority of them (docs/design.md, "Serving through an API outage"); the manager sets it from its own LEASEHOLD_WITNESSES |
 * | LEASEHOLD_PROMISE_DURATION        | T        | P: how long a promise counts, from its request's send; at least 2 retry periods. The witness holds it P + (D - T) |
 * | LEASEHOLD_SERVE_WITHOUT_API       | 0        | cap on serving on promises, from the last renewal's send; 0 = none (serve through an outage of any length). A replacement of this holder opens without clearances this long after its acquisition |
 *
 * Cross-field rules (docs/design.md, "Why it is safe"): D > T > R; T - R >= retry period (room for
 * at least one retry); hedging on: hedge delay < request timeout and < T - R (the hedge is sent
 * while the first attempt still runs, inside the round); fence grace < fence timeout < D - T (the fence must end before a
 * manager may declare the holder dead; lib/fence-timing.ts). LEASEHOLD_FENCE_COMMAND_TIMEOUT
 * was renamed LEASEHOLD_FENCE_TIMEOUT and is refused, so an old manifest is not silently
 * given another bound. KUBECONFIG is read by kube-connection.ts
 * (in-cluster service account when unset).
 *
 * Exit codes: see exit-codes.ts (0 released, 1 fenced, 2 bad config, 3 could not start/acquire).
 */
import { constants } from 'node:os';
import { type Env, EnvReader, formatDuration } from '../lib/env-config.ts';
import { defaultFenceTiming, fenceTimingProblems } from '../lib/fence-timing.ts';
import { LOG_LEVELS, type LogLevel } from '../lib/logger.ts';
import { parseWitnesses, type WitnessEndpoint } from '../lib/witness-protocol.ts';

export type FenceConfig =
  | { action: 'none' }
  | { action: 'pod'; signal: NodeJS.Signals; graceMs: number; timeoutMs: number }
  | { action: 'signal'; process: string; signal: NodeJS.Signals; graceMs: number; timeoutMs: number }
  | { action: 'command'; command: string; timeoutMs: number };

export const FENCE_ACTIONS = ['pod', 'signal', 'command', 'none'] as const;

export type ServerCheckTarget =
  | { kind: 'tcp'; host: string; port: number; text: string }
  | { kind: 'http'; url: string; text: string };

export interface ServerCheckConfig {
  target: ServerCheckTarget;
  timeoutMs: number;
  failuresToFence: number;
}

export interface Timings {
  leaseDurationMs: number;
  renewIntervalMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
  requestTimeoutMs: number;
  /** 0 = hedging off: one request at a time, as before hedging existed. */
  hedgeDelayMs: number;
}

export interface WitnessConfig {
  /** Empty: off. */
  endpoints: WitnessEndpoint[];
  /** P: how long a promise counts from its request's send. */
  promiseMs: number;
  /** Cap on serving on promises after the last renewal's send; undefined = none. */
  serveWithoutApiMs: number | undefined;
}

export interface AgentConfig {
  namespace: string;
  leaseName: string;
  podName: string;
  nodeName: string;
  timings: Timings;
  acquireTimeoutMs: number;
  /** Take a held lease after D of observed silence (LEASEHOLD_TAKE_EXPIRED). */
  takeExpired: boolean;
  releaseTimeoutMs: number;
  fence: FenceConfig;
  httpPort: number;
  httpHost: string;
  logLevel: LogLevel;
  serverCheck: ServerCheckConfig | undefined;
  witnesses: WitnessConfig;
}

const HOUR = 3_600_000;
const SIGNAL_NAMES = Object.keys(constants.signals) as NodeJS.Signals[];

/** Reads and validates the agent's env; throws ConfigError listing every problem. */
export function readAgentConfig(env: Env): AgentConfig {
  const r = new EnvReader(env);
  // NB: timings first, so their cross-field rules run only on sound fields (r.ok).
  const timings = readTimings(r);
  const timingsSound = r.ok;
  const namespace = r.objectName('LEASEHOLD_LEASE_NAMESPACE');
  const leaseName = r.objectName('LEASEHOLD_LEASE_NAME');
  const podName = r.objectName('LEASEHOLD_POD_NAME');
  const nodeName = r.objectName('LEASEHOLD_NODE_NAME');
  const acquireTimeoutMs = r.duration('LEASEHOLD_ACQUIRE_TIMEOUT', 0, 0, 24 * HOUR);
  const takeExpired = r.boolean('LEASEHOLD_TAKE_EXPIRED', true);
  const releaseTimeoutMs = r.duration('LEASEHOLD_RELEASE_TIMEOUT', 900, 50, 60_000);
  const fence = readFence(r, timingsSound ? timings : undefined);
  const httpPort = r.port('LEASEHOLD_HTTP_PORT', 8081);
  const httpHost = r.string('LEASEHOLD_HTTP_HOST', { fallback: '0.0.0.0' });
  const logLevel = r.oneOf('LEASEHOLD_LOG_LEVEL', LOG_LEVELS, 'info');
  const serverCheck = readServerCheck(r, timingsSound ? timings : undefined);
  const witnesses = readWitnesses(r, timings);
  r.done();
  return {
    namespace,
    leaseName,
    podName,
    nodeName,
    timings,
    acquireTimeoutMs,
    takeExpired,
    releaseTimeoutMs,
    fence,
    httpPort,
    httpHost,
    logLevel,
    serverCheck,
    witnesses,
  };
}

function readWitnesses(r: EnvReader, timings: Timings): WitnessConfig {
  const list = r.optionalString('LEASEHOLD_WITNESSES');
  const parsed = parseWitnesses(list);
  r.require(typeof parsed !== 'string', `LEASEHOLD_WITNESSES=${JSON.stringify(list)}: ${parsed}`);
  const promiseMs = Math.floor(r.duration('LEASEHOLD_PROMISE_DURATION', timings.renewDeadlineMs, 100, HOUR));
  const serveWithoutApiMs = Math.floor(r.duration('LEASEHOLD_SERVE_WITHOUT_API', 0, 0, 30 * 24 * HOUR));
  r.require(
    promiseMs >= 2 * timings.retryPeriodMs,
    `LEASEHOLD_PROMISE_DURATION=${formatDuration(promiseMs)} must be at least twice LEASEHOLD_RETRY_PERIOD=${formatDuration(timings.retryPeriodMs)}: a promise must outlast a lost ask`,
  );
  r.require(
    serveWithoutApiMs === 0 || serveWithoutApiMs >= timings.renewDeadlineMs,
    `LEASEHOLD_SERVE_WITHOUT_API=${formatDuration(serveWithoutApiMs)} must be 0 (no cap) or at least LEASEHOLD_RENEW_DEADLINE=${formatDuration(timings.renewDeadlineMs)}`,
  );
  return {
    endpoints: typeof parsed === 'string' ? [] : parsed,
    promiseMs,
    serveWithoutApiMs: serveWithoutApiMs === 0 ? undefined : serveWithoutApiMs,
  };
}

function readTimings(r: EnvReader): Timings {
  const leaseDurationMs = r.duration('LEASEHOLD_LEASE_DURATION', 6_000, 1_000, HOUR);
  const renewIntervalMs = r.duration('LEASEHOLD_RENEW_INTERVAL', 2_000, 100, HOUR);
  const renewDeadlineMs = r.duration('LEASEHOLD_RENEW_DEADLINE', 4_000, 100, HOUR);
  const retryPeriodMs = r.duration('LEASEHOLD_RETRY_PERIOD', 500, 10, HOUR);
  const sound = r.ok && renewDeadlineMs > renewIntervalMs;
  const defaults = defaultRequestTimings(sound ? renewDeadlineMs - renewIntervalMs : 2_000);
  // NB: whole ms: request deadlines become AbortSignal.timeout(ms), which rejects fractions.
  const hedgeDelayMs = Math.floor(r.duration('LEASEHOLD_HEDGE_DELAY', defaults.hedgeDelayMs, 0, HOUR));
  const requestTimeoutMs = Math.floor(
    r.duration('LEASEHOLD_REQUEST_TIMEOUT', hedgeDelayMs > 0 ? defaults.requestTimeoutMs : 1_000, 50, HOUR),
  );
  const timings = {
    leaseDurationMs,
    renewIntervalMs,
    renewDeadlineMs,
    retryPeriodMs,
    requestTimeoutMs,
    hedgeDelayMs,
  };
  const d = `LEASEHOLD_LEASE_DURATION=${formatDuration(leaseDurationMs)}`;
  const t = `LEASEHOLD_RENEW_DEADLINE=${formatDuration(renewDeadlineMs)}`;
  const rr = `LEASEHOLD_RENEW_INTERVAL=${formatDuration(renewIntervalMs)}`;
  const p = `LEASEHOLD_RETRY_PERIOD=${formatDuration(retryPeriodMs)}`;
  const h = `LEASEHOLD_HEDGE_DELAY=${formatDuration(hedgeDelayMs)}`;
  if (!r.ok) return timings;
  r.require(
    leaseDurationMs > renewDeadlineMs,
    `${d} must be longer than ${t} (rule D > T: the holder must fence before others may declare it dead)`,
  );
  r.require(
    renewDeadlineMs > renewIntervalMs,
    `${t} must be longer than ${rr} (rule T > R: a renewal must be able to fail and be retried)`,
  );
  if (renewDeadlineMs > renewIntervalMs) {
    r.require(
      renewDeadlineMs - renewIntervalMs >= retryPeriodMs,
      `${t} minus ${rr} must be at least ${p} (rule T - R >= retry period: room for one retry)`,
    );
    if (hedgeDelayMs > 0) {
      r.require(
        hedgeDelayMs < renewDeadlineMs - renewIntervalMs,
        `${h} must be shorter than ${t} minus ${rr} (${formatDuration(renewDeadlineMs - renewIntervalMs)}) (rule hedge delay < T - R: the hedge must go out inside the round; 0 turns hedging off)`,
      );
    }
  }
  if (hedgeDelayMs > 0) {
    r.require(
      hedgeDelayMs < requestTimeoutMs,
      `${h} must be shorter than LEASEHOLD_REQUEST_TIMEOUT=${formatDuration(requestTimeoutMs)} (rule hedge delay < request timeout: the hedge must go out while the first attempt still runs; 0 turns hedging off)`,
    );
  }
  return timings;
}

/**
 * The defaults of the hedge delay and the request cap, from the room a renewal round has
 * (T - R: a round starts R after the last proof and must succeed by T):
 *  - request timeout = T - R: an attempt sent at the round's start may use the whole round;
 *    a shorter cap only cuts answers the round could still use (the API server's SLO is
 *    p99 <= 1 s for mutating calls, so a 1 s cap fenced healthy servers under load). The
 *    dead connection the cap used to escape is escaped by the hedge instead.
 *  - hedge delay = min(500 ms, (T - R) / 2): far above a healthy renewal's latency (a few
 *    ms), so hedges go out only when the API or the connection is slow; early enough that a
 *    hedge on a fresh connection has at least half the round to answer.
 * Valid for every valid T > R (both rules above hold).
 */
export function defaultRequestTimings(roomMs: number): { requestTimeoutMs: number; hedgeDelayMs: number } {
  return { requestTimeoutMs: Math.floor(roomMs), hedgeDelayMs: Math.floor(Math.min(500, roomMs / 2)) };
}

/** `timings` is undefined when they are unsound: rules relative to them are skipped. */
function readFence(r: EnvReader, timings: Timings | undefined): FenceConfig {
  const action = r.oneOf('LEASEHOLD_FENCE_ACTION', FENCE_ACTIONS, 'pod');
  r.require(
    r.optionalString('LEASEHOLD_FENCE_COMMAND_TIMEOUT') === undefined,
    'LEASEHOLD_FENCE_COMMAND_TIMEOUT was renamed LEASEHOLD_FENCE_TIMEOUT (it now bounds every fence action): set that instead',
  );
  if (action === 'none') return { action };
  const problemsBefore = r.problemCount;
  const defaults = defaultFenceTiming(timings?.leaseDurationMs ?? 6_000, timings?.renewDeadlineMs ?? 4_000);
  const timeoutMs = Math.floor(r.duration('LEASEHOLD_FENCE_TIMEOUT', defaults.timeoutMs, 10, HOUR));
  const graceMs =
    action === 'command'
      ? 0
      : Math.floor(r.duration('LEASEHOLD_FENCE_GRACE', Math.floor(timeoutMs / 2), 0, HOUR));
  if (timings && r.problemCount === problemsBefore) {
    const problems = fenceTimingProblems(
      { graceMs: action === 'command' ? undefined : graceMs, timeoutMs },
      timings,
      {
        grace: 'LEASEHOLD_FENCE_GRACE',
        timeout: 'LEASEHOLD_FENCE_TIMEOUT',
        duration: 'LEASEHOLD_LEASE_DURATION',
        deadline: 'LEASEHOLD_RENEW_DEADLINE',
      },
      formatDuration,
    );
    for (const problem of problems) r.require(false, problem);
  }
  if (action === 'command') {
    const command = r.string('LEASEHOLD_FENCE_COMMAND', {
      rule: 'is required when LEASEHOLD_FENCE_ACTION=command: a shell command',
    });
    return { action, command, timeoutMs };
  }
  const signal = r.oneOf('LEASEHOLD_FENCE_SIGNAL', SIGNAL_NAMES, 'SIGTERM');
  if (action === 'pod') return { action, signal, graceMs, timeoutMs };
  const process = r.string('LEASEHOLD_FENCE_PROCESS', {
    pattern: /^[^/\0]+$/,
    rule: 'is required when LEASEHOLD_FENCE_ACTION=signal: a process name (no "/")',
  });
  return { action, process, signal, graceMs, timeoutMs };
}

function readServerCheck(r: EnvReader, timings: Timings | undefined): ServerCheckConfig | undefined {
  const text = r.optionalString('LEASEHOLD_SERVER_CHECK');
  const timeoutMs = Math.floor(r.duration('LEASEHOLD_SERVER_CHECK_TIMEOUT', 1_000, 10, HOUR));
  const failuresToFence = r.integer('LEASEHOLD_SERVER_CHECK_FAILURES', 3, 1, 1_000);
  if (text === undefined) return undefined;
  const target = parseServerCheckTarget(text);
  r.require(
    target !== undefined,
    `LEASEHOLD_SERVER_CHECK=${JSON.stringify(text)}: must be tcp://host:port or http://host:port/path`,
  );
  if (timings) {
    const room = timings.renewDeadlineMs - timings.renewIntervalMs;
    r.require(
      timeoutMs < room,
      `LEASEHOLD_SERVER_CHECK_TIMEOUT=${formatDuration(timeoutMs)} must be shorter than LEASEHOLD_RENEW_DEADLINE minus LEASEHOLD_RENEW_INTERVAL (${formatDuration(room)}): a slow check must leave time to renew`,
    );
  }
  return target === undefined ? undefined : { target, timeoutMs, failuresToFence };
}

/** `tcp://host:port` or `http://host:port/path`; undefined when neither. */
export function parseServerCheckTarget(text: string): ServerCheckTarget | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if (url.protocol === 'http:' && url.hostname !== '') return { kind: 'http', url: url.href, text };
  if (url.protocol !== 'tcp:' || url.hostname === '' || url.port === '') return undefined;
  if (url.pathname !== '' && url.pathname !== '/') return undefined;
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return { kind: 'tcp', host, port: Number(url.port), text };
}
