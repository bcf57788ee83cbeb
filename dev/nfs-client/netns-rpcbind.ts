/**
 * Debian's real `rpcbind -f` in a network namespace of its own, for a test rig that
 * needs one per ganesha with NFSv3 on a shared machine: private-rpcbind.ts (one per
 * server incarnation, outside any pod). Its port 111 exists only in its namespace, so
 * nothing clashes with the host or with another rpcbind; ganesha registers through the
 * unix socket, which a file system path reaches from any network namespace.
 *
 * The caller gives the command line (which namespaces to enter or create; it must end
 * by exec'ing `rpcbind -f`) and where the socket appears as seen from the host
 * (/proc/<pid>/root/run/rpcbind.sock of a process in rpcbind's mount namespace).
 * Guarantees: `startNetnsRpcbind` resolves once that socket exists; on failure nothing
 * it started is left running; an exit hook SIGKILLs the command while it runs.
 * Needs root (unshare, nsenter, mount).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';

export interface NetnsRpcbind {
  /** The command's process (rpcbind itself when the command execs all the way). */
  readonly pid: number;
  readonly socket: string;
  /** SIGTERM to the command's process; resolves once it exited. */
  stop(): Promise<void>;
  readonly exited: Promise<void>;
}

export class NetnsRpcbindError extends LeaseholdError {
  constructor(message: string) {
    super('E_NETNS_RPCBIND', message);
  }
}

export async function startNetnsRpcbind(opts: {
  /** What is starting it, for the error (e.g. `pod ns/name`). */
  what: string;
  argv: readonly [string, ...string[]];
  socket: (pid: number) => string;
  readyTimeoutMs?: number;
}): Promise<NetnsRpcbind> {
  const [command, ...args] = opts.argv;
  const readyTimeoutMs = opts.readyTimeoutMs ?? 10_000;
  const child: ChildProcess = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (c: string) => {
    stderr = (stderr + c).slice(-2_000);
  });
  const killOnExit = () => child.kill('SIGKILL');
  process.on('exit', killOnExit);
  let done = false;
  const exited = new Promise<void>((resolve) => {
    const end = () => {
      done = true;
      process.off('exit', killOnExit);
      resolve();
    };
    child.once('exit', end);
    child.once('error', () => {
      if (child.pid === undefined) end();
    });
  });
  const stop = async () => {
    if (!done) child.kill('SIGTERM');
    await exited;
  };
  const pid = child.pid;
  if (pid === undefined) {
    await stop();
    throw new NetnsRpcbindError(`${opts.what}: cannot run ${command} for rpcbind: ${stderr.trim()}`);
  }
  const socket = opts.socket(pid);
  const until = performance.now() + readyTimeoutMs;
  while (!existsSync(socket)) {
    if (done || performance.now() > until) {
      await stop();
      throw new NetnsRpcbindError(
        `${opts.what}: rpcbind did not create ${socket} within ${readyTimeoutMs} ms (exited: ${done}); stderr: ${stderr.trim()}`,
      );
    }
    await sleep(20);
  }
  return { pid, socket, stop, exited };
}
