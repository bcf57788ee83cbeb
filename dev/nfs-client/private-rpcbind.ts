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
 * Needs root (unshare, mount, nsenter), util-linux and rpcbind. `stop()` ends rpcbind;
 * the namespaces go with their last process (stop ganesha first). Not modelled: a pod's
 * rpcbind in Kubernetes, which would run in the pod's own network namespace.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { sleep } from '../../lib/clock.ts';

export interface PrivateRpcbind {
  pid: number;
  /** Executable wrapper running ganesha.nfsd beside this rpcbind. */
  ganeshaBin: string;
  stop(): Promise<void>;
}

export class PrivateRpcbindError extends Error {
  readonly code = 'E_PRIVATE_RPCBIND';
}

/** Starts rpcbind; `dir` (a writable directory) receives the ganesha wrapper script. */
export async function startPrivateRpcbind(dir: string, readyTimeoutMs = 10_000): Promise<PrivateRpcbind> {
  // NB: no --fork: unshare and sh exec in place, so the child's pid is rpcbind's.
  const child: ChildProcess = spawn(
    'unshare',
    [
      '--net',
      '--mount',
      '--propagation',
      'private',
      '--',
      'sh',
      '-c',
      'mount -t tmpfs -o size=1m,mode=755 leasehold-rpcbind /run && exec rpcbind -f',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (c: string) => {
    stderr += c;
  });
  const killOnExit = () => child.kill('SIGKILL');
  process.on('exit', killOnExit);
  let exited = false;
  const exit = new Promise<void>((resolve) =>
    child.once('exit', () => {
      exited = true;
      process.off('exit', killOnExit);
      resolve();
    }),
  );
  const stop = async () => {
    if (!exited) child.kill('SIGTERM');
    await exit;
  };
  const pid = child.pid;
  if (pid === undefined) {
    await stop();
    throw new PrivateRpcbindError(`cannot start unshare/rpcbind: ${stderr.trim()}`);
  }
  const socket = `/proc/${pid}/root/run/rpcbind.sock`;
  const until = performance.now() + readyTimeoutMs;
  while (!existsSync(socket)) {
    if (exited || performance.now() > until) {
      await stop();
      throw new PrivateRpcbindError(
        `private rpcbind did not create ${socket} within ${readyTimeoutMs} ms (exited: ${exited}); stderr: ${stderr.trim()}`,
      );
    }
    await sleep(20);
  }
  const ganeshaBin = join(dir, `ganesha-beside-rpcbind-${pid}`);
  writeFileSync(ganeshaBin, `#!/bin/sh\nexec nsenter --mount=/proc/${pid}/ns/mnt -- ganesha.nfsd "$@"\n`, {
    mode: 0o755,
  });
  return { pid, ganeshaBin, stop };
}
