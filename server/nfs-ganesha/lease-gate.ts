/**
 * The lease gate of the shipped NFS server (pure decisions; lease-gate-loops.ts does the
 * HTTP): ganesha starts only once leasehold's agent, a sidecar in the same pod, says it
 * holds the volume's lease now, and is stopped when that proof has been missing for as
 * long as the kubelet's liveness backstop tolerates.
 *
 * Why this is as safe as the kubelet's startup probe it replaces (docs/design.md, "The
 * lease protocol", startup order). The agent's /readyz (agent/agent-health.ts) answers
 * 200 `ok: lease held` only in the `holding` phase and only while its last successful
 * renewal was *sent* at most T ago; in every other phase (starting, acquiring,
 * cannot-fence, releasing, fenced, stopped) it answers 503, and a stopped or crashed
 * agent answers nothing (its port is closed, or the connection times out when hung).
 * So a 200 means: at the moment the agent answered, it held the lease with a renewal
 * sent within T, and the manager cannot have given the volume to anyone else (it fails
 * over only after seeing the lease unchanged for D > T, judged by its own clock). With
 * witnesses (docs/design.md, "Serving through an API outage"), a 200 may instead rest on a
 * majority of promises counted to a deadline after the answer; each witness holds its
 * promise D - T beyond that deadline and no replacement opens before a majority cleared,
 * so the tolerance below holds the same. The
 * rule here is stricter than the kubelet's (which passes any 2xx or 3xx): ganesha starts
 * only on status 200 with exactly the agent's `ok: lease held` body. Any other status, a
 * 200 with another body (not the agent, e.g. a wrong port), a refused or timed-out
 * connection: wait, and after LEASEHOLD_NFS_LEASE_GATE_TIMEOUT give up (exit 3) —
 * never start.
 *
 * The check and the start are two steps (as the kubelet's probe and container start
 * were, with a longer gap): a lease lost in between is handled as a lease lost while
 * serving, by the agent's fence (the `pod` fence re-scans and kills processes forked
 * meanwhile) and by the backstops below. Not guaranteed: anything about a process that
 * stalls between the two steps for longer than the fence takes, beyond those backstops.
 *
 * The watch (decideWatch) is the entrypoint's own backstop while ganesha runs: with the
 * gate in the entrypoint the server container starts before the lease is held, so its
 * kubelet liveness probe (the agent's /readyz) can be armed only after a startup probe
 * on the same endpoint passed (manager/share-model/pod-spec.ts), a probe period after
 * ganesha started. An agent that hung right after answering the gate would leave
 * ganesha without the kubelet's backstop; the watch stops ganesha when no `lease held`
 * answer has come for the share's D - T (LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE, set by the
 * manager; WATCH_TOLERANCE_MS = 2 s without it), about what the kubelet's liveness probe
 * allows (period 1 s, failures D - T in whole seconds, at least 1:
 * manager/share-model/pod-spec.ts), also later in the server's life.
 * The bound (lease-gate-loops.ts watchLease, main.ts): the stop is decided on elapsed
 * time, by a deadline at the send time of the last `lease held` request plus the
 * tolerance, whatever request is still out (a hung agent's answer is not waited for);
 * then SIGTERM, and SIGKILL lapseKillAfterMs later. With the defaults: SIGTERM at most
 * 2 s (plus the timer's lateness) after the last proof was asked, SIGKILL 0.75 s after
 * that.
 */

import { defaultFenceTiming } from '../../lib/fence-timing.ts';

/** What the agent's /readyz gave, as seen from the server container. */
export type AgentAnswer =
  | { kind: 'answered'; status: number; body: string }
  | { kind: 'unreachable'; detail: string };

/** The agent's /readyz body while it holds the lease (lib/http-endpoints.ts + agent-health.ts). */
export const LEASE_HELD_BODY = 'ok: lease held';
/** How often the gate asks while it waits (a local HTTP GET; acquiring takes ~0.1-6 s). */
export const GATE_POLL_MS = 50;
/** How often the watch asks while ganesha runs. */
export const WATCH_POLL_MS = 500;
/**
 * The proof may be missing this long before the watch stops ganesha, when the manager
 * does not say (LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE): D - T of the default timings. The
 * manager sets the share's own D - T: a `lease held` answer proves a renewal sent at
 * most T before it, and a manager may fail over D after that renewal, so the proof is
 * good for D - T after the question was sent, and no longer.
 */
export const WATCH_TOLERANCE_MS = 2_000;
/** Each request's own bound (the kubelet probe's timeoutSeconds: 1). */
export const REQUEST_TIMEOUT_MS = 1_000;

/**
 * How long ganesha gets after the watch's SIGTERM before SIGKILL: the agent's own fence
 * grace for a margin of `toleranceMs` (= D - T: lib/fence-timing.ts, 3/8 of it, 750 ms
 * with the defaults), not the planned stop's LEASEHOLD_NFS_STOP_TIMEOUT (10 s).
 */
export function lapseKillAfterMs(toleranceMs: number): number {
  return Math.max(1, defaultFenceTiming(toleranceMs, 0).graceMs);
}

/** True only for the agent's own "holding, renewal within T" answer. */
export function leaseHeld(answer: AgentAnswer): boolean {
  return answer.kind === 'answered' && answer.status === 200 && answer.body.trim() === LEASE_HELD_BODY;
}

/**
 * How often the watch asks and how long one request may take, for a tolerance: the
 * defaults (500 ms, 1 s) within 2 s, scaled down for a shorter tolerance so that a hung
 * agent is noticed in time (a quarter and a half of it).
 */
export function watchCadence(toleranceMs: number): { pollMs: number; requestTimeoutMs: number } {
  return {
    pollMs: Math.min(WATCH_POLL_MS, Math.max(10, Math.floor(toleranceMs / 4))),
    requestTimeoutMs: Math.min(REQUEST_TIMEOUT_MS, Math.max(20, Math.floor(toleranceMs / 2))),
  };
}

export type WaitReason = 'agent-unreachable' | 'lease-not-held' | 'unexpected-answer';

/** One line saying what an answer was, for logs and errors. */
export function describeAnswer(answer: AgentAnswer): { reason: WaitReason; detail: string } {
  if (answer.kind === 'unreachable') return { reason: 'agent-unreachable', detail: answer.detail };
  const body = JSON.stringify(answer.body.trim().slice(0, 200));
  if (answer.status === 503) return { reason: 'lease-not-held', detail: `503 ${body}` };
  return {
    reason: 'unexpected-answer',
    detail: `${answer.status} ${body} (expected 200 ${JSON.stringify(LEASE_HELD_BODY)} or 503: is the port the agent's?)`,
  };
}

export type GateDecision =
  | { kind: 'start' }
  | { kind: 'wait'; reason: WaitReason; detail: string }
  | { kind: 'give-up'; message: string };

export interface GateState {
  port: number;
  timeoutMs: number;
  /** When the gate began (monotonic ms). */
  sinceMs: number;
  /** Now (monotonic ms), read once by the caller for this answer. */
  nowMs: number;
}

/** Start on the agent's `lease held`; otherwise wait, or give up once the timeout has passed. */
export function decideGate(answer: AgentAnswer, s: GateState): GateDecision {
  if (leaseHeld(answer)) return { kind: 'start' };
  const { reason, detail } = describeAnswer(answer);
  if (s.nowMs - s.sinceMs >= s.timeoutMs) {
    return {
      kind: 'give-up',
      message: `the agent on 127.0.0.1:${s.port} (LEASEHOLD_NFS_LEASE_GATE_PORT) did not report the lease held within LEASEHOLD_NFS_LEASE_GATE_TIMEOUT=${s.timeoutMs}ms; ganesha was not started (last answer: ${reason}: ${detail})`,
    };
  }
  return { kind: 'wait', reason, detail };
}

export type WatchDecision =
  | { kind: 'held' }
  | { kind: 'tolerate'; missingMs: number; reason: WaitReason; detail: string }
  | { kind: 'stop'; message: string };

/**
 * While ganesha runs: `held` (the caller records askedAtMs as the last proof), `tolerate`
 * while the proof has been missing for less than WATCH_TOLERANCE_MS, else `stop`.
 * `lastHeldMs`: when the last `lease held` request was sent (monotonic ms; the gate's
 * passing answer first). NB: send times, not reply times: a late reply never extends
 * the proof.
 */
export function decideWatch(
  answer: AgentAnswer,
  s: { port: number; lastHeldMs: number; nowMs: number; toleranceMs?: number },
): WatchDecision {
  if (leaseHeld(answer)) return { kind: 'held' };
  const tolerance = s.toleranceMs ?? WATCH_TOLERANCE_MS;
  const missingMs = s.nowMs - s.lastHeldMs;
  const { reason, detail } = describeAnswer(answer);
  if (missingMs < tolerance) return { kind: 'tolerate', missingMs, reason, detail };
  return {
    kind: 'stop',
    message: `the agent on 127.0.0.1:${s.port} has not reported the lease held for ${Math.round(missingMs)}ms (tolerance ${tolerance}ms): stopping ganesha (last answer: ${reason}: ${detail})`,
  };
}
