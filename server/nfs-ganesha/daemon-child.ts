/**
 * A helper daemon the entrypoint runs beside ganesha (rpcbind for NFSv3, rpcbind.ts; the
 * private message bus for the metrics, private-bus.ts): spawned in the foreground as our
 * child, ready once it answers on its unix socket, stopped after ganesha.
 *
 * Invariants: the daemon runs in its own process group (a terminal's Ctrl-C reaches only
 * us); an exit hook SIGKILLs it while it runs, so none outlives the entrypoint (NB: a
 * SIGKILL of the entrypoint cannot be caught: in a pod the container's end takes it
 * along); `startDaemon` resolves only once it answers on its socket and on every failure
 * leaves none running; `stop` is SIGTERM, then SIGKILL after its timeout, idempotent,
 * and resolves once the daemon is gone. Its stderr passes through to ours.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { connect } from 'node:net';
import { type Clock, sleep } from '../../lib/clock.ts';
import { ServerStartError } from './exit-codes.ts';

/** Whether something accepts a connection on the unix socket `path` within `timeoutMs`. */
export function socketAnswers(path: string, timeoutMs = 1_000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ path });
    const done = (answers: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answers);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export interface DaemonProcess {
  readonly pid: number;
  /** SIGTERM, SIGKILL after `killAfterMs`; resolves once the daemon is gone. Idempotent. */
  stop(killAfterMs: number): Promise<void>;
  /** Resolves, describing how, when the daemon ended (asked or not). */
  readonly exited: Promise<string>;
}

export interface DaemonSpec {
  bin: string;
  args: string[];
  /** The socket it answers on once ready. */
  socket: string;
  startTimeoutMs: number;
  /** How the start failure reads: `<what>: <detail>. <hint>`, e.g. the env var that chose it. */
  what: string;
  hint: string;
  /** Signals the daemon; throws a ServerStartError naming the cause when the kernel refuses. */
  signal?: (pid: number, sig: NodeJS.Signals) => void;
}

/** Starts the daemon; resolves once it answers on its socket, else throws ServerStartError. */
export async function startDaemon(spec: DaemonSpec, clock: Clock): Promise<DaemonProcess> {
  const signal = spec.signal ?? ((pid, sig) => process.kill(pid, sig));
  const child: ChildProcess = spawn(spec.bin, spec.args, {
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    process.stderr.write(chunk);
    stderr = (stderr + chunk).slice(-2_000);
  });
  let running = true;
  let spawnError: string | undefined;
  const killOnExit = () => {
    if (!running || child.pid === undefined) return;
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {
      // gone, or EPERM: nothing more can be done at exit
    }
  };
  process.on('exit', killOnExit);
  const exited = new Promise<string>((resolve) => {
    // NB: `on`, not `once`: a later 'error' without a listener would throw.
    child.on('error', (err) => {
      if (child.pid !== undefined) return;
      running = false;
      spawnError = err.message;
      process.off('exit', killOnExit);
      resolve(`could not be run (${err.message})`);
    });
    child.once('exit', (code, sig) => {
      running = false;
      process.off('exit', killOnExit);
      resolve(sig !== null ? `was killed by ${sig}` : `exited with code ${code}`);
    });
  });
  const send = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      signal(child.pid, sig);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ESRCH') return;
      throw err;
    }
  };
  let stopping: Promise<void> | undefined;
  const stop = (killAfterMs: number): Promise<void> => {
    stopping ??= (async () => {
      if (!running) return;
      send('SIGTERM');
      const gone = await Promise.race([exited.then(() => true), sleep(killAfterMs).then(() => false)]);
      if (!gone) {
        send('SIGKILL');
        await exited;
      }
    })();
    return stopping;
  };

  const startedAtMs = clock.now();
  let outcome: string | undefined;
  void exited.then((o) => {
    outcome = o;
  });
  while (!(await socketAnswers(spec.socket, 200))) {
    if (outcome !== undefined) {
      const detail = spawnError !== undefined ? `cannot run it: ${spawnError}` : `it ${outcome}`;
      throw new ServerStartError(
        `${spec.what}: ${detail} before answering on ${spec.socket}${stderr.trim() === '' ? '' : `; its stderr: ${stderr.trim()}`}. ${spec.hint}`,
      );
    }
    if (clock.now() - startedAtMs > spec.startTimeoutMs) {
      await stop(1_000);
      throw new ServerStartError(
        `${spec.what}: did not answer on ${spec.socket} within LEASEHOLD_NFS_START_TIMEOUT=${spec.startTimeoutMs}ms. ${spec.hint}`,
      );
    }
    await Promise.race([sleep(20), exited]);
  }
  return { pid: child.pid ?? 0, stop, exited };
}
