/**
 * The optional check of the local server before each renewal (docs/design.md, "The
 * lease protocol": fence): a TCP connect or an HTTP GET (2xx/3xx is healthy), each bounded by a
 * timeout. After N consecutive failures the agent stops renewing and fences, so a hung
 * server fails over like a dead node.
 *
 * NB: failures count only after the server has passed once. The agent acquires the
 * lease before the server container starts (native sidecar), so early failures are the
 * server still starting; a server that never starts ends the pod through its own probes.
 *
 * NB: the HTTP check uses node:http (required, see lib/http-endpoints.ts), never `fetch`:
 * fetch loads Node's bundled undici (~28 MB of RSS) and needs WebAssembly, which the
 * agent's default `--jitless` (manager/share-model/pod-spec.ts) turns off. Redirects are not
 * followed (a 3xx is healthy); the timeout covers connect and the response head.
 */
import { createRequire } from 'node:module';
import { connect } from 'node:net';
import type { ServerCheckTarget } from './config.ts';

const { get: httpGet } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

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

function checkHttp(url: string, timeoutMs: number): Promise<CheckResult> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (result: CheckResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req.destroy();
      resolve(result);
    };
    // Both callbacks run on later ticks, after `timer` and `req` are assigned.
    const timer = setTimeout(
      () => settle({ ok: false, detail: `GET ${url} failed: timed out after ${timeoutMs}ms` }),
      timeoutMs,
    );
    const req = httpGet(url, { agent: false, headers: { connection: 'close' } }, (res) => {
      const status = res.statusCode ?? 0;
      res.resume();
      settle(status < 400 ? { ok: true } : { ok: false, detail: `GET ${url} answered ${status}` });
    });
    req.once('error', (err) => settle({ ok: false, detail: `GET ${url} failed: ${err.message}` }));
  });
}
