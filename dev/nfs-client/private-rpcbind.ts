/**
 * A private rpcbind for one ganesha with NFSv3, so that v3 runs on a machine shared with
 * other tests without a host-wide rpcbind on port 111.
 *
 * Why it is needed: ganesha 4.3 (built with RPCBIND, as Debian's is) registers NFS v3 and
 * MOUNT with rpcbind at start and exits when that fails (src/MainNFSD/
 * nfs_rpc_dispatcher_thread.c: Register_program -> Fatal; only the v4 registration is
 * optional). No config option turns that off; only the build option RPCBIND does.
 * ganesha's RPC library (ntirpc src/rpcb_clnt.c local_rpcb) reaches rpcbind through the
 * fixed socket /var/run/rpcbind.sock first and falls back to 127.0.0.1:111.
 *
 * What this does: runs Debian's real `rpcbind -f` in its own network namespace (its
 * ports 111 exist only there: no clash with the host or another test) and its own mount
 * namespace with a private tmpfs on /run (its rpcbind.sock and lock are invisible
 * outside). `ganeshaBin` is a wrapper script that execs ganesha.nfsd inside that mount
 * namespace (nsenter --mount, no fork: the pid stays ganesha's), and in the host's
 * network namespace, so ganesha registers through the private socket and clients still
 * reach it on loopback. Give it to the entrypoint as LEASEHOLD_NFS_GANESHA_BIN. v3
 * clients must be given the NFS and MOUNT ports (nothing answers portmapper queries on
 * the host): nfs-writer always is.
 *
 * `serverEnv` carries the wrapper and LEASEHOLD_NFS_RPCBIND=external: the entrypoint,
 * which runs outside that mount namespace, must not start an rpcbind of its own on the
 * host (server/nfs-ganesha/rpcbind.ts).
 *
 * Needs root (unshare, mount, nsenter), util-linux and rpcbind. `stop()` ends rpcbind;
 * the namespaces go with their last process (stop ganesha first). Not modelled: a pod's
 * rpcbind in Kubernetes, which runs in the pod's own network namespace (the real nodes
 * have that). Spawning and waiting: netns-rpcbind.ts.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startNetnsRpcbind } from './netns-rpcbind.ts';

export interface PrivateRpcbind {
  pid: number;
  /** Executable wrapper running ganesha.nfsd beside this rpcbind. */
  ganeshaBin: string;
  /** The entrypoint's env for ganesha beside this rpcbind. */
  serverEnv: { LEASEHOLD_NFS_GANESHA_BIN: string; LEASEHOLD_NFS_RPCBIND: 'external' };
  stop(): Promise<void>;
}

/** Starts rpcbind; `dir` (a writable directory) receives the ganesha wrapper script. */
export async function startPrivateRpcbind(dir: string, readyTimeoutMs = 10_000): Promise<PrivateRpcbind> {
  // NB: no --fork: unshare and sh exec in place, so the child's pid is rpcbind's.
  const rpcbind = await startNetnsRpcbind({
    what: 'private rpcbind',
    argv: [
      'unshare',
      '--net',
      '--mount',
      '--propagation',
      'private',
      '--',
      'sh',
      '-c',
      'mount -t tmpfs -o size=1m,mode=755 leasehold-rpcbind /run && exec rpcbind -f',
    ],
    socket: (pid) => `/proc/${pid}/root/run/rpcbind.sock`,
    readyTimeoutMs,
  });
  const { pid } = rpcbind;
  const ganeshaBin = join(dir, `ganesha-beside-rpcbind-${pid}`);
  writeFileSync(ganeshaBin, `#!/bin/sh\nexec nsenter --mount=/proc/${pid}/ns/mnt -- ganesha.nfsd "$@"\n`, {
    mode: 0o755,
  });
  return {
    pid,
    ganeshaBin,
    serverEnv: { LEASEHOLD_NFS_GANESHA_BIN: ganeshaBin, LEASEHOLD_NFS_RPCBIND: 'external' },
    stop: rpcbind.stop,
  };
}
