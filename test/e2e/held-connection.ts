/**
 * A TCP connection held open from a real node's network namespace (RealNode.spawnInNetwork:
 * bash's /dev/tcp, nothing sent, only read), and how it ended as its client saw it: `FIN`
 * (the peer closed it), `RST` (reset), another error, or not yet. What it shows of a
 * Service: through a ClusterIP the node's kube-proxy DNATs the connection to one backend
 * pod; when that backend's machine dies nothing comes back (a dead kernel sends neither
 * FIN nor RST, and kube-proxy adds none), while a live machine's kernel closes or resets
 * it when the server stops.
 * Guarantees: `connected` resolves once the connection is established and rejects when
 * the client exits before (refused, unreachable); stop() kills the client and resolves
 * once it exited. NB: the client is the node's process: freeze stops it, crash kills it.
 */
import { once } from 'node:events';
import type { RealNode } from '../../dev/node/node.ts';
import { monotonicMs } from '../../lib/clock.ts';

export interface ConnectionEnd {
  how: 'FIN' | 'RST' | 'error';
  detail: string;
  /** CLOCK_MONOTONIC ms, when the client saw it. */
  monoMs: number;
}

export interface HeldConnection {
  readonly connected: Promise<void>;
  /** How the connection ended, or undefined while it is open. */
  ended(): ConnectionEnd | undefined;
  stop(): Promise<void>;
}

export function holdConnection(node: RealNode, host: string, port: number): HeldConnection {
  // bash connects, then execs `cat`, so the child is the reader itself (nsenter --net does
  // not fork): its exit is the connection's end (0 on the peer's FIN, 1 with "Connection
  // reset by peer" on a RST), and stop()'s SIGKILL leaves no reader behind holding the pipes.
  const script = `exec 3<>/dev/tcp/${host}/${port} || exit 3; echo connected; exec cat <&3 >/dev/null`;
  const child = node.spawnInNetwork(['bash', '-c', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  let exit: { code: number | null; monoMs: number } | undefined;
  let onConnected: () => void = () => {};
  const connected = new Promise<void>((resolve, reject) => {
    onConnected = resolve;
    child.once('exit', (code) => {
      if (!out.includes('connected\n'))
        reject(new Error(`no connection to ${host}:${port} from ${node.name} (exit ${code}): ${err.trim()}`));
    });
  });
  connected.catch(() => {}); // the caller awaits it; not an unhandled rejection meanwhile
  child.stdout?.on('data', (c) => {
    out += c;
    if (out.includes('connected\n')) onConnected();
  });
  child.stderr?.on('data', (c) => {
    err += c;
  });
  let stopping = false;
  child.once('exit', (code) => {
    if (!stopping && out.includes('connected\n')) exit = { code, monoMs: monotonicMs() };
  });
  const closed = once(child, 'close');
  return {
    connected,
    // Judged when asked: cat's message on stderr may come after its exit.
    ended: () =>
      exit && {
        how: exit.code === 0 ? 'FIN' : /reset by peer/i.test(err) ? 'RST' : 'error',
        detail: `cat exit ${exit.code}${err ? `: ${err.trim()}` : ''}`,
        monoMs: exit.monoMs,
      },
    stop: async () => {
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await closed;
    },
  };
}
