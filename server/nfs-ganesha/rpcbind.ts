/**
 * The pod's rpcbind for NFSv3: whether the entrypoint starts one (`decideRpcbind`, pure)
 * and running it (`startRpcbind`).
 *
 * Why: ganesha 4.3 with NFSv3 registers NFS v3 and MOUNT with rpcbind at start and exits
 * when it cannot (src/MainNFSD/nfs_rpc_dispatcher_thread.c Register_program -> Fatal; no
 * config option avoids it). Its RPC library reaches rpcbind through the fixed socket
 * /var/run/rpcbind.sock first, then 127.0.0.1:111 (ntirpc src/rpcb_clnt.c local_rpcb).
 * In Kubernetes the pod has its own network namespace and the container its own /run,
 * so an rpcbind started here is private to the pod: it clashes with nothing.
 *
 * Decision (LEASEHOLD_NFS_RPCBIND): `auto` starts Debian's `rpcbind -f` as our child
 * when version 3 is on and nothing answers on the rpcbind socket (something does: a
 * sidecar sharing /run, the rpcbind of an earlier incarnation of this container that was
 * SIGKILLed (the pod's /run outlives it), or a test rig's private one
 * (dev/nfs-client/private-rpcbind.ts)); `external` never starts one (the user provides
 * rpcbind some other way, e.g. on the pod's 127.0.0.1:111). NB: a socket file nobody answers on (its
 * rpcbind was SIGKILLed) counts as none; rpcbind replaces it at start.
 *
 * Invariants: `startRpcbind` resolves only once rpcbind answers on its socket, and on every failure
 * leaves no rpcbind running; an exit hook SIGKILLs a running rpcbind, so none outlives
 * the entrypoint; like ganesha it runs in its own process group (Ctrl-C reaches only us).
 * NB: Debian's rpcbind switches to user `_rpc` once its sockets are bound (built with
 * --with-rpcuser=_rpc, no option turns it off; it calls setgroups/setgid/setuid, hence
 * CAP_SETGID/CAP_SETUID), and a root process without CAP_KILL gets EPERM signalling
 * another uid: stopping it needs CAP_KILL (manager/share-model/nfs-server-preset.ts adds it with v3).
 * Without CAP_NET_BIND_SERVICE rpcbind silently does not bind port 111 and serves its
 * socket only, which is all ganesha needs (clients are given the NFS and MOUNT ports).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { connect } from 'node:net';
import { type Clock, sleep } from '../../lib/clock.ts';
import type { NfsServerConfig } from './config.ts';
import { ServerStartError } from './exit-codes.ts';

/** The socket ganesha's RPC library tries first; rpcbind creates it as /run/rpcbind.sock. */
export const RPCBIND_SOCKET = '/var/run/rpcbind.sock';

export type RpcbindDecision =
  | { kind: 'start' }
  | { kind: 'none'; reason: 'no NFSv3' | 'LEASEHOLD_NFS_RPCBIND=external' | 'rpcbind answers' };

/** Pure: whether the entrypoint starts its own rpcbind, given whether one answers on the socket. */
export function decideRpcbind(
  config: Pick<NfsServerConfig, 'versions' | 'rpcbind'>,
  socketAnswers: boolean,
): RpcbindDecision {
  if (!config.versions.includes('3')) return { kind: 'none', reason: 'no NFSv3' };
  if (config.rpcbind === 'external') return { kind: 'none', reason: 'LEASEHOLD_NFS_RPCBIND=external' };
  if (socketAnswers) return { kind: 'none', reason: 'rpcbind answers' };
  return { kind: 'start' };
}

/** Whether something accepts a connection on the unix socket `path` within `timeoutMs`. */
export function socketAnswers(path = RPCBIND_SOCKET, timeoutMs = 1_000): Promise<boolean> {
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

export interface RpcbindProcess {
  readonly pid: number;
  /** SIGTERM, SIGKILL after `killAfterMs`; resolves once rpcbind is gone. Idempotent. */
  stop(killAfterMs: number): Promise<void>;
}

const hint =
  'NFSv3 needs rpcbind; set LEASEHOLD_NFS_RPCBIND=external if the pod provides one, or leave version 3 out of LEASEHOLD_NFS_VERSIONS';

/** Starts `rpcbind -f`; resolves once it answers on its socket, else throws ServerStartError. */
export async function startRpcbind(
  config: Pick<NfsServerConfig, 'rpcbindBin' | 'startTimeoutMs'>,
  clock: Clock,
  socket = RPCBIND_SOCKET,
): Promise<RpcbindProcess> {
  const child: ChildProcess = spawn(config.rpcbindBin, ['-f'], {
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
      // gone, or EPERM without CAP_KILL: nothing more can be done at exit
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
    child.once('exit', (code, signal) => {
      running = false;
      process.off('exit', killOnExit);
      resolve(signal !== null ? `was killed by ${signal}` : `exited with code ${code}`);
    });
  });
  let stopping: Promise<void> | undefined;
  const stop = (killAfterMs: number): Promise<void> => {
    stopping ??= (async () => {
      if (!running) return;
      signal(child, 'SIGTERM');
      const gone = await Promise.race([exited.then(() => true), sleep(killAfterMs).then(() => false)]);
      if (!gone) {
        signal(child, 'SIGKILL');
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
  while (!(await socketAnswers(socket, 200))) {
    if (outcome !== undefined) {
      const detail = spawnError !== undefined ? `cannot run it: ${spawnError}` : `it ${outcome}`;
      throw new ServerStartError(
        `LEASEHOLD_NFS_RPCBIND=auto: could not start rpcbind (LEASEHOLD_NFS_RPCBIND_BIN=${config.rpcbindBin}): ${detail} before answering on ${socket}${stderr.trim() === '' ? '' : `; its stderr: ${stderr.trim()}`}. ${hint}`,
      );
    }
    if (clock.now() - startedAtMs > config.startTimeoutMs) {
      await stop(1_000);
      throw new ServerStartError(
        `LEASEHOLD_NFS_RPCBIND=auto: rpcbind (LEASEHOLD_NFS_RPCBIND_BIN=${config.rpcbindBin}) did not answer on ${socket} within LEASEHOLD_NFS_START_TIMEOUT=${config.startTimeoutMs}ms. ${hint}`,
      );
    }
    await Promise.race([sleep(20), exited]);
  }
  return { pid: child.pid ?? 0, stop };
}

/** NB: without CAP_KILL the kernel refuses to signal rpcbind once it runs as _rpc. */
function signal(child: ChildProcess, sig: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(child.pid, sig);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ESRCH') return;
    throw new ServerStartError(
      `cannot stop rpcbind (pid ${child.pid}, ${sig}): ${code} (it runs as user _rpc: the container needs CAP_KILL)`,
      { cause: err },
    );
  }
}
