/**
 * Test harness for the agent's integration tests (not a test file): spawns the compiled
 * agent (dist/agent/main.js) as a real process in its own process group, collects its
 * pino lines, and reads/writes Leases through the admin client of the real API server.
 * Everything started here is stopped by `cleanup()` (call it from t.after / after).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoordinationV1Api, type V1Lease, V1MicroTime } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { startTcpProxy, type TcpProxy } from '../../dev/net/tcp-proxy.ts';
import { fromWire, type LeaseRecord } from '../../lib/lease-record.ts';
import { eventually } from '../support/cluster.ts';

export const AGENT_MAIN = join(import.meta.dirname, '../../dist/agent/main.js');
export const NAMESPACE = 'default';

export interface LogLine {
  msg: string;
  level: string;
  atMs: number;
  [key: string]: unknown;
}

export interface AgentProcess {
  child: ChildProcess;
  pid: number;
  lines: LogLine[];
  stderr: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; atMs: number }>;
  waitForLog(msg: string, timeoutMs?: number): Promise<LogLine>;
}

const started: Array<() => Promise<void>> = [];

/** Stops everything this harness started, newest first. */
export async function cleanup(): Promise<void> {
  for (const stop of started.splice(0).reverse()) await stop().catch(() => {});
}

export function agentEnv(
  leaseName: string,
  podName: string,
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    LEASEHOLD_LEASE_NAMESPACE: NAMESPACE,
    LEASEHOLD_LEASE_NAME: leaseName,
    LEASEHOLD_POD_NAME: podName,
    LEASEHOLD_NODE_NAME: 'node-a',
    LEASEHOLD_HTTP_PORT: '0',
    LEASEHOLD_HTTP_HOST: '127.0.0.1',
    // NB: these agents run on the host, not in a pod: the default `pod` fence would refuse
    // to start (PID 1 is their ancestor). Tests that fence say which action they want.
    LEASEHOLD_FENCE_ACTION: 'none',
    ...extra,
  };
}

/** Spawns `node dist/agent/main.js` with exactly `env` (plus PATH/KUBECONFIG as given), under `wrapper`. */
export function spawnAgent(env: Record<string, string>, wrapper: readonly string[] = []): AgentProcess {
  // `wrapper`: a command prefix (e.g. setpriv with fewer capabilities), exec'ing node.
  const [command, ...args] = [...wrapper, process.execPath, AGENT_MAIN];
  const child = spawn(command as string, args, {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  const lines: LogLine[] = [];
  const waiters: Array<() => void> = [];
  let stderr = '';
  let buffer = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    buffer += chunk;
    for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
      const text = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      try {
        lines.push({ ...(JSON.parse(text) as LogLine), atMs: performance.now() });
      } catch {
        lines.push({ msg: text, level: 'raw', atMs: performance.now() });
      }
    }
    for (const wake of waiters.splice(0)) wake();
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; atMs: number }>(
    (resolve) =>
      child.once('exit', (code, signal) => {
        resolve({ code, signal, atMs: performance.now() });
        for (const wake of waiters.splice(0)) wake();
      }),
  );
  started.push(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-(child.pid as number), 'SIGKILL');
      } catch {
        // already gone
      }
      await exited;
    }
  });
  const waitForLog = async (msg: string, timeoutMs = 20_000): Promise<LogLine> => {
    const until = performance.now() + timeoutMs;
    for (;;) {
      const found = lines.find((l) => l.msg === msg);
      if (found) return found;
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(
          `agent exited (${child.exitCode ?? child.signalCode}) before logging "${msg}"; stderr: ${stderr}`,
        );
      }
      const left = until - performance.now();
      if (left <= 0)
        throw new Error(
          `agent did not log "${msg}" within ${timeoutMs} ms; lines: ${lines.map((l) => l.msg).join(' | ')}`,
        );
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  };
  return { child, pid: child.pid as number, lines, stderr: () => stderr, exited, waitForLog };
}

/** A TCP proxy in front of the API server and a kubeconfig (admin creds) that goes through it. */
export async function proxiedApi(cluster: Cluster): Promise<{ proxy: TcpProxy; kubeconfigPath: string }> {
  const url = new URL(cluster.server);
  const proxy = await startTcpProxy({ target: { host: url.hostname, port: Number(url.port) } });
  started.push(() => proxy.close());
  return { proxy, kubeconfigPath: await kubeconfigThrough(cluster, proxy.port) };
}

/**
 * A loopback TCP forwarder for the slow and the half-dead API path (dev/net/tcp-proxy.ts
 * has neither; this one is the agent tests' own):
 *  - setResponseDelay(ms): every chunk from the API server reaches the client `ms` after it
 *    arrived (order kept). A request on an open connection answers ~ms late; a new
 *    connection pays it once more, for the server's TLS handshake flight.
 *  - holdAnswersOpen(): every connection open now still carries requests to the server
 *    but no answer back, and never closes (a write that commits, its answer lost);
 *    connections made later pass.
 *  - stallOpen(): every connection open now forwards nothing more, either way, and never
 *    closes (a peer that died silently: no RST); connections made later pass.
 * Not modelled: packet loss, bandwidth, a slow server CPU (the API server itself answers at
 * once; only the delivery of its answer is late).
 */
export interface SlowProxy {
  readonly port: number;
  setResponseDelay(ms: number): void;
  stallOpen(): void;
  holdAnswersOpen(): void;
  connections(): { accepted: number; open: number };
}

export async function slowApi(cluster: Cluster): Promise<{ proxy: SlowProxy; kubeconfigPath: string }> {
  const target = new URL(cluster.server);
  let delayMs = 0;
  let accepted = 0;
  const links = new Set<{ client: Socket; upstream: Socket; stalled: boolean; answersHeld: boolean }>();
  const server = createServer((client) => {
    accepted++;
    const upstream = connect({ host: target.hostname, port: Number(target.port) });
    const link = { client, upstream, stalled: false, answersHeld: false };
    links.add(link);
    let lastDeliveryAtMs = 0;
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on('data', (chunk) => {
      if (!link.stalled) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (link.stalled || link.answersHeld) return;
      const atMs = Math.max(performance.now() + delayMs, lastDeliveryAtMs);
      lastDeliveryAtMs = atMs;
      setTimeout(
        () => {
          if (!link.stalled && !link.answersHeld && !client.destroyed) client.write(chunk);
        },
        Math.max(0, atMs - performance.now()),
      ).unref();
    });
    const close = () => {
      links.delete(link);
      client.destroy();
      upstream.destroy();
    };
    // The server's close reaches the client after the data before it (NB: a server closes
    // right after its answer to a `Connection: close` request). A stalled link passes no
    // close on; the client's own close ends it.
    const closeAfterData = () => {
      if (link.stalled || link.answersHeld) return;
      const waitMs = Math.max(0, lastDeliveryAtMs - performance.now()) + 1;
      setTimeout(() => {
        if (!link.stalled && !link.answersHeld) client.end(() => close());
      }, waitMs).unref();
    };
    client.on('error', close);
    client.on('close', close);
    upstream.on('error', closeAfterData);
    upstream.on('close', closeAfterData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  const kubeconfigPath = await kubeconfigThrough(cluster, port);
  started.push(
    () =>
      new Promise<void>((resolve) => {
        for (const link of links) {
          link.client.destroy();
          link.upstream.destroy();
        }
        server.close(() => resolve());
      }),
  );
  return {
    kubeconfigPath,
    proxy: {
      port,
      setResponseDelay: (ms) => {
        delayMs = ms;
      },
      holdAnswersOpen: () => {
        for (const link of links) link.answersHeld = true;
      },
      stallOpen: () => {
        for (const link of links) link.stalled = true;
      },
      connections: () => ({ accepted, open: links.size }),
    },
  };
}

/** A kubeconfig (admin creds) whose server is 127.0.0.1:`port`; removed by cleanup(). */
async function kubeconfigThrough(cluster: Cluster, port: number): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-agent-test-'));
  started.push(() => rm(dir, { recursive: true, force: true }));
  const config = JSON.parse(await readFile(cluster.kubeconfigPath, 'utf8')) as {
    clusters: Array<{ cluster: { server: string } }>;
  };
  for (const entry of config.clusters) entry.cluster.server = `https://127.0.0.1:${port}`;
  const kubeconfigPath = join(dir, 'kubeconfig.json');
  await writeFile(kubeconfigPath, JSON.stringify(config), { mode: 0o600 });
  return kubeconfigPath;
}

/** The agent's /metrics sample `name` (no labels), or undefined. */
export async function agentMetric(port: number, name: string): Promise<number | undefined> {
  const { text } = await probe(port, '/metrics');
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

export function leaseApi(cluster: Cluster): CoordinationV1Api {
  return cluster.kubeConfig.makeApiClient(CoordinationV1Api);
}

export async function readLease(api: CoordinationV1Api, name: string): Promise<LeaseRecord | undefined> {
  try {
    return fromWire(await api.readNamespacedLease({ namespace: NAMESPACE, name }));
  } catch (err) {
    if ((err as { code?: number }).code === 404) return undefined;
    throw err;
  }
}

/** Creates a Lease as another holder would have written it. */
export async function createLease(
  api: CoordinationV1Api,
  name: string,
  spec: {
    holder: string;
    durationSeconds?: number;
    transitions?: number;
    annotations?: Record<string, string>;
  },
): Promise<LeaseRecord> {
  const body: V1Lease = {
    metadata: { name, namespace: NAMESPACE, annotations: spec.annotations ?? {} },
    spec: {
      holderIdentity: spec.holder,
      leaseDurationSeconds: spec.durationSeconds ?? 6,
      leaseTransitions: spec.transitions ?? 0,
      renewTime: new V1MicroTime(),
      acquireTime: new V1MicroTime(),
    },
  };
  return fromWire(await api.createNamespacedLease({ namespace: NAMESPACE, body }));
}

/** Polls every 50 ms until `check` returns a value; fails after `timeoutMs`. */
export function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  return eventually(what, check, timeoutMs, 50);
}

/** GET on the agent's HTTP endpoint; returns the status. */
export async function probe(
  port: number,
  path: '/readyz' | '/healthz' | '/metrics',
): Promise<{ status: number; text: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { signal: AbortSignal.timeout(2_000) });
  return { status: res.status, text: await res.text() };
}
