/**
 * Pure: whether a simulated pod gets the sandbox's rpcbind (pod-sandbox.ts, the stand-in
 * for the rpcbind an NFSv3 server has in its pod's own network namespace). Yes when one
 * of its containers is the shipped NFS server and, from its resolved env, the server's
 * own rule (server/nfs-ganesha/rpcbind.ts decideRpcbind) would start one when none
 * answers: NFSv3 on and LEASEHOLD_NFS_RPCBIND not `external`. A container whose
 * settings are invalid gets none (it exits 2 before it would need one).
 */
import { ConfigError } from '../../lib/errors.ts';
import { readNfsServerConfig } from '../../server/nfs-ganesha/config.ts';
import { decideRpcbind } from '../../server/nfs-ganesha/rpcbind.ts';
import { NFS_SERVER_SCRIPT } from './container-launch.ts';

export function podNeedsRpcbind(
  launches: readonly { kind: string; script?: string; env?: Record<string, string> }[],
): boolean {
  return launches.some((l) => {
    if (l.kind !== 'process' || l.script !== NFS_SERVER_SCRIPT || l.env === undefined) return false;
    try {
      return decideRpcbind(readNfsServerConfig(l.env), false).kind === 'start';
    } catch (err) {
      if (err instanceof ConfigError) return false;
      throw err;
    }
  });
}
