/**
 * The optional check of the local server before each renewal (docs/design.md, "The
 * lease protocol": fence): a TCP connect or an HTTP GET (2xx/3xx is healthy), each bounded by a
 * timeout. After N consecutive failures the agent stops renewing and fences, so a hung
 * server fails over like a dead node.
 *
 * NB: failures count only after the server has passed once. The agent acquires the
 * lease before the server container starts (native sidecar), so early failures are the
 * server still starting; a server that never starts ends the pod through its own probes.
 */
import { connect } from 'node:net';
import type { ServerCheckTarget } from './config.ts';

export type CheckResult = { ok: true } | { ok: false; detail: string };

export interface ServerCheckState {
  seenHealthy: boolean;
  consecutiveFailures: number;
}

export const INITIAL_SERVER_CHECK_STATE: ServerCheckState = { seenHealthy: false, consecutiveFailures: 0 };

/** Pure: the next state and whether to fence now. */
export function nextServerCheckState(
  state: ServerCheckState,
  result: CheckResult,
  failuresToFence: number,
): { state: ServerCheckState; fence: boolean } {
  if (result.ok) return { state: { seenHealthy: true, consecutiveFailures: 0 }, fence: false };
  if (!state.seenHealthy) return { state, fence: false };
  const consecutiveFailures = state.consecutiveFailures + 1;
  return { state: { seenHealthy: true, consecutiveFailures }, fence: consecutiveFailures >= failuresToFence };
}

/** Runs one check; never throws. */
export async function checkServer(target: ServerCheckTarget, timeoutMs: number): Promise<CheckResult> {
  return target.kind === 'tcp'
    ? checkTcp(target.host, target.port, timeoutMs)
    : checkHttp(target.url, timeoutMs);
}

function checkTcp(host: string, port: number, timeoutMs: number): Promise<CheckResult> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ ok: false, detail: `tcp connect to ${host}:${port} timed out after ${timeoutMs}ms` });
    }, timeoutMs);
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ ok: true });
    });
    socket.once('error', (err) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ ok: false, detail: `tcp connect to ${host}:${port} failed: ${err.message}` });
    });
  });
}

async function checkHttp(url: string, timeoutMs: number): Promise<CheckResult> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: 'manual' });
    await res.body?.cancel();
    return res.status < 400 ? { ok: true } : { ok: false, detail: `GET ${url} answered ${res.status}` };
  } catch (err) {
    const reason = (err as Error).name === 'TimeoutError' ? `timed out after ${timeoutMs}ms` : String(err);
    return { ok: false, detail: `GET ${url} failed: ${reason}` };
  }
}
