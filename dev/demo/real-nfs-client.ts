/**
 * The NFS client of the real-node demo and benchmark: dev/nfs-client's libnfs writer
 * (NFSv3, numbered committed records; its connect bounded to about 3 s, as a kernel
 * client's) started in one real node's network namespace by RealNode.spawnInNetwork,
 * writing through the share's Service ClusterIP as a pod on that node would (the
 * node's kube-proxy DNATs it to the server pod, on this node or across the node
 * fabric). The writer is the node's process: a crash of *its* node kills it, so run
 * it on a node that is not crashed while it runs.
 * Guarantees: stop() ends the writer (SIGTERM, then SIGKILL); report() reads the file
 * back from the CSI volume's backing dir (not over NFS).
 */
import { LeaseholdError } from '../../lib/errors.ts';
import { withDeadline } from '../../lib/kube-client.ts';
import { analyzeWriteRun, type WriteRunReport } from '../nfs-client/write-analysis.ts';
import { buildWriter, startWriter, type WriterProcess } from '../nfs-client/writer-process.ts';
import { REAL_NFS_EXPORT, readRealShareFile } from '../system/real-share.ts';
import type { RealSystem } from '../system/real-system.ts';
import { SHARES_NAMESPACE } from '../system/real-system.ts';

export interface NodeNfsClient {
  node: string;
  share: string;
  file: string;
  host: string;
  writer: WriterProcess;
  /** The writer's view against the file on the volume, faults on CLOCK_MONOTONIC. */
  report(faultsMs: readonly number[]): WriteRunReport;
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
  const file = opts.file ?? 'records.bin';
  const writer = startWriter(
    binary,
    {
      version: 3,
      host,
      port,
      mountPort,
      exportPath: REAL_NFS_EXPORT,
      file,
      intervalMs: opts.intervalMs ?? 20,
    },
    (argv, spawnOpts) => node.spawnInNetwork(argv, spawnOpts),
  );
  let stopped = false;
  return {
    node: nodeName,
    share,
    file,
    host,
    writer,
    report: (faultsMs) =>
      analyzeWriteRun({ events: writer.events, faultsMs, content: readRealShareFile(sys, share, file) }),
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await writer.stop();
    },
  };
}
