/**
 * The NFS client of the real-node demo and benchmark: dev/nfs-client's libnfs writer
 * (NFSv3, numbered committed records) as a host process in one real node's network
 * namespace, writing through the share's Service ClusterIP as a pod on that node
 * would (the node's kube-proxy DNATs it to the server pod, on this node or across the
 * node fabric). A small wrapper script `nsenter --net`s into the node's namespace and
 * execs the writer, so the writer's pid is the child's and stop() reaches it.
 * NB: not RealNode.spawnInNetwork: writer-process.ts spawns its binary itself; so the
 * writer is not the node's process (a crash of *its* node would not kill it, and it
 * would hold the namespace: a leftover). Hence: run it on a node that is not crashed
 * while it runs, and stop() it before the node stops (every caller here does; on
 * SIGINT `killNow()` first, then the nodes' own cleanup).
 * Guarantees: stop() ends the writer (SIGTERM, then SIGKILL) and removes the script;
 * report() reads the file back from the CSI volume's backing dir (not over NFS).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LeaseholdError } from '../../lib/errors.ts';
import { withDeadline } from '../../lib/kube-client.ts';
import { analyzeWriteRun, type WriteRunReport } from '../nfs-client/write-analysis.ts';
import { buildWriter, startWriter, type WriterProcess } from '../nfs-client/writer-process.ts';
import { REAL_NFS_EXPORT, readRealShareFile } from '../system/real-share.ts';
import type { RealSystem } from '../system/real-system.ts';
import { SHARES_NAMESPACE } from '../system/system.ts';

export interface NodeNfsClient {
  node: string;
  share: string;
  file: string;
  host: string;
  writer: WriterProcess;
  /** The writer's view against the file on the volume, faults on CLOCK_MONOTONIC. */
  report(faultsMs: readonly number[]): WriteRunReport;
  /** SIGKILL now, synchronously (the SIGINT path). */
  killNow(): void;
  stop(): Promise<void>;
}

export async function startNodeNfsClient(
  sys: RealSystem,
  share: string,
  nodeName: string,
  opts: { file?: string; intervalMs?: number } = {},
): Promise<NodeNfsClient> {
  const node = sys.node(nodeName);
  const netns = node.netnsPath;
  if (!netns)
    throw new LeaseholdError(
      'E_DEMO_CLIENT',
      `node ${nodeName} has no network namespace (crashed or stopped)`,
    );
  const svc = await sys.core.readNamespacedService(
    { namespace: SHARES_NAMESPACE, name: share },
    withDeadline(5_000),
  );
  const host = svc.spec?.clusterIP;
  const port = svc.spec?.ports?.find((p) => p.name === 'nfs')?.port;
  const mountPort = svc.spec?.ports?.find((p) => p.name === 'nfs-mount')?.port;
  if (!host || !port || !mountPort)
    throw new LeaseholdError(
      'E_DEMO_CLIENT',
      `Service ${SHARES_NAMESPACE}/${share} lacks a ClusterIP or its nfs and nfs-mount ports`,
    );
  const binary = await buildWriter();
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-demo-writer-'));
  const script = join(dir, 'nfs-writer');
  writeFileSync(script, `#!/bin/sh\nexec nsenter --net=${netns} -- ${binary} "$@"\n`, { mode: 0o755 });
  const file = opts.file ?? 'records.bin';
  let writer: WriterProcess;
  try {
    writer = startWriter(script, {
      version: 3,
      host,
      port,
      mountPort,
      exportPath: REAL_NFS_EXPORT,
      file,
      intervalMs: opts.intervalMs ?? 20,
    });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  let stopped = false;
  return {
    node: nodeName,
    share,
    file,
    host,
    writer,
    report: (faultsMs) =>
      analyzeWriteRun({ events: writer.events, faultsMs, content: readRealShareFile(sys, share, file) }),
    killNow: () => {
      try {
        process.kill(writer.pid, 'SIGKILL');
      } catch {}
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await writer.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
