/**
 * Shares on the shipped NFS server (the default server: a ShareManager without
 * `spec.server`) and the client's view of them, for the e2e tests, the failover
 * benchmark and the demo:
 *  - createNfsShare: a PV + PVC of the sim's test CSI driver (or a claim given) and a
 *    ShareManager with only `spec.volume` (and `spec.nfs` / `spec.lease` / a node pin
 *    when given);
 *  - startShareWriter: a real NFS client (dev/nfs-client nfs-writer, libnfs) writing
 *    numbered, committed records through the Service's stable address (the sim's
 *    kube-proxy stand-in), as a pod in the cluster would through the ClusterIP;
 *  - readShareFile: the file's bytes on the volume (the PV's directory), for the
 *    acknowledged-writes check (write-analysis.ts);
 *  - ServerProcessTracker: the NFS server containers of a share the simulated kubelets
 *    ran, sampled every `periodMs`, turned into serving windows by the pure
 *    server-process-windows.ts (ganesha keeps no window log of its own); NB: a window
 *    is the container's life, which with the entrypoint's lease gate begins before
 *    ganesha does (so an overlap check on them is stricter, never looser);
 *    `logLineWall` reads when the entrypoint logged a line (e.g. `ganesha started`).
 *
 * Not guaranteed: that the tracker sees the start of a container that lived shorter
 * than its sampling period (its window then starts where observation began: longer,
 * never shorter, see server-process-windows.ts).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { analyzeWriteRun, type WriteRunReport } from '../nfs-client/write-analysis.ts';
import { buildWriter, startWriter, type WriterProcess } from '../nfs-client/writer-process.ts';
import type { ServingWindow } from '../share-server/serving-window-log.ts';
import { NFS_SERVER_IMAGE } from '../sim/sim.ts';
import { type ObservedStart, processWindows } from './server-process-windows.ts';
import { createVolume, pvName, sharePods } from './shares.ts';
import { SHARES_NAMESPACE, type System } from './system.ts';

const SM = { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers' };
export const NFS_EXPORT = '/export';

export interface NfsShareOptions {
  /** spec.nfs (docs/operations.md "NFS settings of a share"); unset = the server's defaults. */
  nfs?: { versions?: string[]; gracePeriod?: string; leaseLifetime?: string };
  lease?: { duration?: string; renewInterval?: string; renewDeadline?: string; retryPeriod?: string };
  /**
   * An existing, bound PVC in the shares namespace to serve (e.g. on another storage kind:
   * dev/sim/storage/test-volume.ts createTestVolume); unset = a new volume on the shared
   * test storage (shares.ts createVolume). NB: readShareFile and analyzeShareWriter read
   * the PV's directory; on the fencing storage's ext4 kind that holds the image instead
   * (read it with dev/sim/storage/block-image.ts readImageFile).
   */
  claim?: string;
  /** Pin the share's pods to a node (spec.scheduling.nodeSelector; shares.ts unpinShare lifts it). */
  node?: string;
}

export async function createNfsShare(sys: System, name: string, opts: NfsShareOptions = {}): Promise<void> {
  const claim = opts.claim ?? (await createVolume(sys, name));
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  await custom.createNamespacedCustomObject(
    {
      ...SM,
      namespace: SHARES_NAMESPACE,
      body: {
        apiVersion: `${SM.group}/${SM.version}`,
        kind: 'ShareManager',
        metadata: { name, namespace: SHARES_NAMESPACE },
        spec: {
          volume: { pvc: claim, mountPath: NFS_EXPORT },
          serviceAccountName: 'leasehold-agent',
          ...(opts.nfs ? { nfs: opts.nfs } : {}),
          ...(opts.lease ? { lease: opts.lease } : {}),
          ...(opts.node ? { scheduling: { nodeSelector: { 'kubernetes.io/hostname': opts.node } } } : {}),
        },
      },
    },
    withDeadline(10_000),
  );
}

/** The share's Ready pod (name and node), or undefined. */
export async function readyNfsPod(
  sys: System,
  share: string,
  notPod?: string,
): Promise<{ pod: string; node: string } | undefined> {
  for (const p of await sharePods(sys, share).catch(() => [])) {
    const name = p.metadata?.name ?? '';
    if (name === notPod) continue;
    if (p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'))
      return { pod: name, node: p.spec?.nodeName ?? '' };
  }
  return undefined;
}

export async function waitReadyNfsPod(
  sys: System,
  share: string,
  timeoutMs: number,
  notPod?: string,
): Promise<{ pod: string; node: string }> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const ready = await readyNfsPod(sys, share, notPod);
    if (ready) return ready;
    await sleep(200);
  }
  throw new LeaseholdError(
    'E_SHARE_NOT_SERVING',
    `no Ready NFS server pod of ${SHARES_NAMESPACE}/${share}${notPod ? ` other than ${notPod}` : ''} within ${timeoutMs} ms`,
  );
}

export interface ShareWriter {
  writer: WriterProcess;
  version: 3 | 4;
  file: string;
  address: { host: string; port: number; mountPort?: number };
}

let writerBinary: Promise<string> | undefined;

/**
 * Starts nfs-writer on `file` of the share through the Service's address (NFSv4.0 with
 * version 4; NFSv3 with 3, which needs `3` in the share's spec.nfs.versions: the
 * Service then has the MOUNT port `nfs-mount`).
 */
export async function startShareWriter(
  sys: System,
  share: string,
  version: 3 | 4,
  file: string,
  opts: { intervalMs?: number; writerId?: number } = {},
): Promise<ShareWriter> {
  writerBinary ??= buildWriter();
  const binary = await writerBinary;
  const nfs = await sys.sim.serviceAddress(SHARES_NAMESPACE, share, 'nfs');
  const mount =
    version === 3 ? await sys.sim.serviceAddress(SHARES_NAMESPACE, share, 'nfs-mount') : undefined;
  const address = { host: nfs.host, port: nfs.port, ...(mount ? { mountPort: mount.port } : {}) };
  const writer = startWriter(binary, {
    version,
    host: address.host,
    port: address.port,
    ...(mount ? { mountPort: mount.port } : {}),
    exportPath: NFS_EXPORT,
    file,
    ...(opts.writerId === undefined ? {} : { writerId: opts.writerId }),
    ...(opts.intervalMs === undefined ? {} : { intervalMs: opts.intervalMs }),
  });
  return { writer, version, file, address };
}

/** The file's bytes in the share's volume (the PV's directory); empty when absent. */
export function readShareFile(sys: System, share: string, file: string): Buffer {
  try {
    return readFileSync(join(sys.sim.volumeDir(pvName(share)), file));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return Buffer.alloc(0);
    throw err;
  }
}

/** The write analysis of a writer's run so far, against the file as it is now. */
export function analyzeShareWriter(
  sys: System,
  share: string,
  w: ShareWriter,
  faultsMs: number[],
): WriteRunReport {
  return analyzeWriteRun({ events: w.writer.events, faultsMs, content: readShareFile(sys, share, w.file) });
}

/**
 * The NFS server containers of one share as the simulated kubelets ran them: samples the
 * pod workers of every node every `periodMs` for container starts, takes exits from
 * `sim.exits`. `windows()` may be called at any time (also after stop()).
 */
export class ServerProcessTracker {
  private readonly starts = new Map<string, ObservedStart>();
  /** Pod name -> uid (where its container logs are). */
  private readonly uids = new Map<string, string>();
  private readonly observedSinceMonoMs = monotonicMs();
  private running = true;
  private readonly done: Promise<void>;

  constructor(
    private readonly sys: System,
    private readonly share: string,
    periodMs = 50,
  ) {
    this.done = (async () => {
      while (this.running) {
        this.sample();
        await sleep(periodMs);
      }
    })();
  }

  private sample(): void {
    const offset = Date.now() - monotonicMs();
    const prefix = `${SHARES_NAMESPACE}/${this.share}-`;
    for (const node of this.sys.sim.nodes) {
      for (const worker of node.pods()) {
        if (!worker.key.startsWith(prefix)) continue;
        const pod = worker.key.slice(SHARES_NAMESPACE.length + 1);
        this.uids.set(pod, worker.uid);
        for (const c of worker.view.main) {
          if (!c.image.startsWith(`${NFS_SERVER_IMAGE}:`)) continue;
          const phase = c.phase.kind === 'running' || c.phase.kind === 'terminated' ? c.phase : undefined;
          if (!phase) continue;
          const key = `${pod}/${c.name}/${phase.startedAt.getTime()}`;
          if (!this.starts.has(key))
            this.starts.set(key, {
              pod,
              container: c.name,
              node: node.name,
              image: c.image,
              startMonoMs: phase.startedAt.getTime() - offset,
              startWall: phase.startedAt.toISOString(),
            });
        }
      }
    }
  }

  windows(): ServingWindow[] {
    if (this.running) this.sample();
    const offset = Date.now() - monotonicMs();
    return processWindows({
      starts: [...this.starts.values()],
      // generateName `<share>-`: a pod of this share, also one the sampler never saw.
      exits: this.sys.sim.exits.filter(
        (e) => e.namespace === SHARES_NAMESPACE && e.pod.startsWith(`${this.share}-`),
      ),
      imagePrefix: `${NFS_SERVER_IMAGE}:`,
      observedSinceMonoMs: this.observedSinceMonoMs,
      wallOf: (ms) => new Date(ms + offset).toISOString(),
    });
  }

  /**
   * When the entrypoint of `pod`'s server container first logged `msg` (wall ms), from
   * the container's log; undefined when not (yet) there. E.g. `ganesha started`, or
   * `waiting for the agent to hold the lease` (the entrypoint is up, its gate begins).
   */
  logLineWall(pod: string, msg: string, container = 'server'): number | undefined {
    const uid = this.uids.get(pod);
    if (uid === undefined) return undefined;
    let text: string;
    try {
      text = readFileSync(join(this.sys.sim.root, 'pods', uid, 'logs', `${container}.log`), 'utf8');
    } catch {
      return undefined;
    }
    const quoted = JSON.stringify(msg);
    for (const line of text.split('\n')) {
      if (!line.includes(quoted)) continue;
      try {
        const entry = JSON.parse(line) as { msg?: string; time?: string | number };
        if (entry.msg !== msg || entry.time === undefined) continue;
        const ms = typeof entry.time === 'number' ? entry.time : Date.parse(entry.time);
        if (Number.isFinite(ms)) return ms;
      } catch {}
    }
    return undefined;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}
