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
 * Invariants (daemon-child.ts, shared with the metrics' private bus): `startRpcbind`
 * resolves only once rpcbind answers on its socket, and on every failure leaves no
 * rpcbind running; an exit hook SIGKILLs a running rpcbind, so none outlives the
 * entrypoint; like ganesha it runs in its own process group (Ctrl-C reaches only us).
 * NB: Debian's rpcbind switches to user `_rpc` once its sockets are bound (built with
 * --with-rpcuser=_rpc, no option turns it off; it calls setgroups/setgid/setuid, hence
 * CAP_SETGID/CAP_SETUID), and a root process without CAP_KILL gets EPERM signalling
 * another uid: stopping it needs CAP_KILL (manager/share-model/nfs-server-preset.ts adds it with v3).
 * Without CAP_NET_BIND_SERVICE rpcbind silently does not bind port 111 and serves its
 * socket only, which is all ganesha needs (clients are given the NFS and MOUNT ports).
 */
import type { Clock } from '../../lib/clock.ts';
import type { NfsServerConfig } from './config.ts';
import { type DaemonProcess, socketAnswers, startDaemon } from './daemon-child.ts';
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

/** Whether an rpcbind answers on `path` (RPCBIND_SOCKET by default). */
export function rpcbindAnswers(path = RPCBIND_SOCKET): Promise<boolean> {
  return socketAnswers(path);
}

export type RpcbindProcess = Pick<DaemonProcess, 'pid' | 'stop'>;

/** Starts `rpcbind -f` (daemon-child.ts); resolves once it answers on its socket, else throws ServerStartError. */
export function startRpcbind(
  config: Pick<NfsServerConfig, 'rpcbindBin' | 'startTimeoutMs'>,
  clock: Clock,
  socket = RPCBIND_SOCKET,
): Promise<RpcbindProcess> {
  return startDaemon(
    {
      bin: config.rpcbindBin,
      args: ['-f'],
      socket,
      startTimeoutMs: config.startTimeoutMs,
      what: `LEASEHOLD_NFS_RPCBIND=auto: could not start rpcbind (LEASEHOLD_NFS_RPCBIND_BIN=${config.rpcbindBin})`,
      hint: 'NFSv3 needs rpcbind; set LEASEHOLD_NFS_RPCBIND=external if the pod provides one, or leave version 3 out of LEASEHOLD_NFS_VERSIONS',
      signal,
    },
    clock,
  );
}

/** NB: without CAP_KILL the kernel refuses to signal rpcbind once it runs as _rpc. */
function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ESRCH') return;
    throw new ServerStartError(
      `cannot stop rpcbind (pid ${pid}, ${sig}): ${code} (it runs as user _rpc: the container needs CAP_KILL)`,
      { cause: err },
    );
  }
}
