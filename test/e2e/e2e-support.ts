/**
 * What the end-to-end scenarios share, all on real nodes (dev/system/real-system.ts):
 * one whole system per test file (a real control plane, real nodes, the chart installed
 * with helm: a manager on every node), started in `before` and stopped in `after` (also
 * when a test fails), useRealSystem; the serving pod as its entrypoint's `serving` line
 * says (servingRealPod, readyRealPod), a pod's processes on the host; what the managers
 * did (failedOver, eventsOf, leaseOf); and the NFS client's view (RealNfsClient, issue
 * 9): a real libnfs client (dev/nfs-client nfs-writer: numbered, committed records) in
 * a node's network namespace writing through the share's Service, whose run is judged
 * from its own events and the file on the volume: writes resumed, 0 acknowledged writes
 * lost (read back byte for byte), 0 duplicates (nor records out of place or corrupt), 0
 * stale file handles (the write analysis's violations are proven by
 * test/unit/nfs-client-analysis.test.ts); it prints the clientWriteGap. Never two
 * ganesha at once is GaneshaTracker's (dev/system/real-share.ts). Writers still running
 * when a file ends are stopped before the system is.
 * Not guaranteed: a write gap bound (figures are printed; bench/failover measures them).
 * LEASEHOLD_KEEP_CLUSTER=1 keeps the cluster dir (logs) for reading.
 */

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before } from 'node:test';
import { analyzeWriteRun } from '../../dev/nfs-client/write-analysis.ts';
import { buildWriter, startWriter, type WriterProcess } from '../../dev/nfs-client/writer-process.ts';
import { podLog, REAL_NFS_EXPORT, readRealShareFile } from '../../dev/system/real-share.ts';
import {
  componentPodsByNode,
  RECONNECTOR_LABEL,
  type RealSystem,
  type RealSystemOptions,
  SHARES_NAMESPACE,
  startRealSystem,
} from '../../dev/system/real-system.ts';
import { type ShareStatus, sharePods } from '../../dev/system/shares.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { stopOpenKernelClients } from './kernel-client-support.ts';

/** Cordons (true) or uncordons (false) the nodes: spec.unschedulable, by merge patch. */
export async function setUnschedulable(
  sys: Pick<RealSystem, 'core'>,
  nodes: string | string[],
  unschedulable: boolean,
): Promise<void> {
  for (const name of typeof nodes === 'string' ? [nodes] : nodes)
    await sys.core.patchNode(
      { name, body: { spec: { unschedulable } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(5_000)),
    );
}

/** ShareManagers that went through a failover (status.lastFailover set), by name. */
export async function failedOver(sys: Pick<RealSystem, 'kc'>): Promise<Map<string, ShareStatus>> {
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  const list = (await custom.listNamespacedCustomObject(
    { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers', namespace: SHARES_NAMESPACE },
    withDeadline(10_000),
  )) as { items: Array<{ metadata: { name: string }; status?: ShareStatus }> };
  return new Map(
    list.items.filter((i) => i.status?.lastFailover).map((i) => [i.metadata.name, i.status as ShareStatus]),
  );
}

/** Events of a reason in the shares namespace (e.g. LeaseExpired), as "object: message". */
export async function eventsOf(sys: Pick<RealSystem, 'core'>, reason: string): Promise<string[]> {
  const list = await sys.core.listNamespacedEvent(
    { namespace: SHARES_NAMESPACE, fieldSelector: `reason=${reason}` },
    withDeadline(10_000),
  );
  return list.items.map((e) => `${e.involvedObject.name}: ${e.message ?? ''}`);
}

/** The Lease of a share (same name as its ShareManager). */
export async function leaseOf(sys: Pick<RealSystem, 'kc'>, share: string): Promise<k8s.V1Lease> {
  const coord = sys.kc.makeApiClient(k8s.CoordinationV1Api);
  return coord.readNamespacedLease({ namespace: SHARES_NAMESPACE, name: share }, withDeadline(5_000));
}

// ---- The NFS client's view ----

/**
 * spec.nfs of the e2e tier's NFS shares: NFSv3 for the libnfs writer (RealNfsClient) and
 * NFSv4.1, which the share then publishes in status.export.mountOptions, for the kernel
 * clients (kernel-client-support.ts). v3 WRITE and COMMIT never wait for ganesha's grace
 * period, so the libnfs writer's gap is the failover itself; the v4.1 kernel client
 * reclaims its state and ends grace early (every recorded client sent RECLAIM_COMPLETE;
 * NLM is off). An NFSv4.0 client waits out the whole grace after every start
 * (real-node-failover.test.ts runs one across its crash with a 5 s grace; bench/failover
 * measures both).
 */
export const E2E_NFS = { versions: ['3', '4.1'] };
/**
 * One committed record every 100 ms (the writer's default is 20 ms): a tenth of a
 * second is resolution enough for these checks (bench/failover measures the gap at
 * 20 ms), and a writer plus its ganesha at 50 WRITE+COMMIT a second is CPU the other
 * processes of a 2-core machine need.
 */
const WRITE_INTERVAL_MS = 100;
/** Acknowledged writes after a fault that count as "writes resumed". */
const RESUMED_ACKS = 5;
// ---- The system on real nodes (dev/system/real-system.ts) ----

/**
 * One real-node system per test file (real kubelets, the real images, the chart by
 * helm), started in `before` and stopped in `after` (also when a test fails); the
 * stop runs every node's leftover check, so anything a node left fails the file.
 */
export function useRealSystem(opts: RealSystemOptions): () => RealSystem {
  let sys: RealSystem | undefined;
  before(
    async () => {
      const t0 = performance.now();
      sys = await startRealSystem({
        ...opts,
        keepDirs: process.env.LEASEHOLD_KEEP_CLUSTER === '1',
        progress: (l) => process.stderr.write(`real system: ${l}\n`),
      });
      process.stderr.write(
        `real system: ${sys.nodes.length} nodes with a ready manager ${((performance.now() - t0) / 1000).toFixed(1)} s after the start\n`,
      );
    },
    { timeout: 300_000 },
  );
  after(async () => {
    // No writer left retrying against a stopped system (also when a scenario failed half-way).
    for (const c of [...openRealClients]) await c.stop();
    await stopOpenKernelClients();
    if (process.env.LEASEHOLD_KEEP_CLUSTER === '1' && sys)
      process.stderr.write(`kept: cluster ${sys.cluster.dir}\n`);
    await sys?.stop();
  });
  return () => {
    if (!sys)
      throw new Error('the real-node system is not running (did its start fail? see the before hook)');
    return sys;
  };
}

export interface ReadyRealPod {
  pod: string;
  node: string;
  object: k8s.V1Pod;
}

/** How long a real-node test waits for a share to serve (a start or a failover). */
export const REAL_SERVING_WITHIN_MS = 120_000;

/**
 * The share's Ready pod (other than `notPod`) whose server logged `serving`; with
 * `running`, also one whose ganesha runs now (after an outage the API may still show a
 * pod Ready whose ganesha its fence stopped).
 */
export async function servingRealPod(
  sys: RealSystem,
  share: string,
  opts: { notPod?: string; timeoutMs?: number; running?: (pod: string) => boolean; namespace?: string } = {},
): Promise<ReadyRealPod & { servingWall: number }> {
  const { notPod, running, namespace } = opts;
  return eventually(
    `${share}: a Ready pod${notPod ? ` other than ${notPod}` : ''} whose server logged serving${running ? ' and whose ganesha runs' : ''}`,
    async () => {
      const ready = await readyRealPod(sys, share, notPod, namespace);
      const servingWall = ready ? realLogLineWall(sys, ready.object, 'serving') : undefined;
      if (!ready || servingWall === undefined || (running && !running(ready.pod))) return undefined;
      return { ...ready, servingWall };
    },
    opts.timeoutMs ?? REAL_SERVING_WITHIN_MS,
    200,
  );
}

/** Host pids of every process in the pod's cgroups (any real node), from the host's /proc. */
export function podProcesses(uid: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readFileSync(`/proc/${name}/cgroup`, 'utf8').includes(`pod${uid}`)) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** Waits until (the healed kubelet has killed) every process of the deleted `pod`. */
export async function waitPodProcessesGone(pod: ReadyRealPod, timeoutMs: number): Promise<void> {
  const uid = pod.object.metadata?.uid ?? '';
  assert.ok(uid, `${pod.pod} has a uid`);
  await eventually(
    `every process of the deleted ${pod.pod} gone from ${pod.node}`,
    async () => (podProcesses(uid).length === 0 ? true : undefined),
    timeoutMs,
    200,
  );
}

/** The share's Ready pod other than `notPod` (name, node and the pod), or undefined. */
export async function readyRealPod(
  sys: RealSystem,
  share: string,
  notPod?: string,
  namespace?: string,
): Promise<ReadyRealPod | undefined> {
  for (const p of await sharePods(sys, share, namespace).catch(() => [])) {
    const name = p.metadata?.name ?? '';
    if (name === notPod || !p.spec?.nodeName) continue;
    if (p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'))
      return { pod: name, node: p.spec.nodeName, object: p };
  }
  return undefined;
}

/**
 * When the real pod's NFS server entrypoint first logged `msg` (its JSON `time`, wall
 * ms), from the log the node's kubelet wrote; undefined when not (yet) there.
 */
export function realLogLineWall(
  sys: RealSystem,
  pod: k8s.V1Pod,
  msg: string,
  container = 'server',
): number | undefined {
  const text = podLog(sys.node(pod.spec?.nodeName ?? ''), pod, container);
  const quoted = JSON.stringify(msg);
  for (const line of text.split('\n')) {
    const at = line.indexOf('{');
    if (at < 0 || !line.includes(quoted)) continue;
    try {
      const entry = JSON.parse(line.slice(at)) as { msg?: string; time?: string | number };
      if (entry.msg !== msg || entry.time === undefined) continue;
      const ms = typeof entry.time === 'number' ? entry.time : Date.parse(entry.time);
      if (Number.isFinite(ms)) return ms;
    } catch {}
  }
  return undefined;
}

/**
 * The NFS client's view on real nodes: the libnfs writer (dev/nfs-client, NFSv3 or
 * NFSv4.0, numbered committed records) as a host process in a real node's network namespace
 * (RealNode.spawnInNetwork: the node's process, so freeze stops it and crash kills
 * it), writing through the share's Service ClusterIP as a pod on that node would (the
 * node's kube-proxy DNATs it to the server pod, on this node or over the fabric on
 * another). Its checks (assertClientView, the header's) read the file back from the
 * volume (readRealShareFile). NB: an NFSv4.0 writer needs a share whose spec.nfs.versions
 * has 4.0 (E2E_NFS has not) and waits out the replacement's grace period: libnfs never
 * reclaims (dev/nfs-client/README.md).
 */
/** A running writer and what it writes to: the file, the protocol and the address. */
interface ShareWriter {
  writer: WriterProcess;
  version: 3 | 4;
  file: string;
  address: { host: string; port: number; mountPort?: number };
}

export class RealNfsClient {
  readonly faultsMs: number[] = [];
  private constructor(
    private readonly sys: RealSystem,
    readonly share: string,
    readonly w: ShareWriter,
  ) {}

  /**
   * Starts the writer on `node` (a RealNode name), on `file` of the share; through the
   * ClusterIP unless `podIP`; NFSv3 (default) or `version` 4 (NFSv4.0: the nfs port alone).
   */
  static async start(
    sys: RealSystem,
    share: string,
    node: string,
    opts: { file?: string; intervalMs?: number; podIP?: string; version?: 3 | 4 } = {},
  ): Promise<RealNfsClient> {
    const version = opts.version ?? 3;
    const svc = await sys.core.readNamespacedService(
      { namespace: SHARES_NAMESPACE, name: share },
      withDeadline(5_000),
    );
    // NB: with podIP, straight to that pod's server (the preset's container ports), not
    // the Service: a client that stays with one server whatever the failover does.
    const host = opts.podIP ?? svc.spec?.clusterIP;
    const portOf = (name: string) => {
      const p = svc.spec?.ports?.find((x) => x.name === name);
      return opts.podIP ? Number(p?.targetPort ?? p?.port) : p?.port;
    };
    const port = portOf('nfs');
    const mountPort = version === 3 ? portOf('nfs-mount') : undefined;
    assert.ok(
      host && port && (version === 4 || mountPort),
      `Service ${SHARES_NAMESPACE}/${share} has a ClusterIP and the nfs${version === 3 ? ' and nfs-mount ports' : ' port'} (numeric target ports for podIP)`,
    );
    const binary = await buildWriter();
    const on = sys.node(node);
    const file = opts.file ?? 'records.bin';
    const writer = startWriter(
      binary,
      {
        version,
        host,
        port,
        ...(mountPort ? { mountPort } : {}),
        exportPath: REAL_NFS_EXPORT,
        file,
        intervalMs: opts.intervalMs ?? WRITE_INTERVAL_MS,
      },
      (argv, spawnOpts) => on.spawnInNetwork(argv, spawnOpts),
    );
    const client = new RealNfsClient(sys, share, {
      writer,
      version,
      file,
      address: { host, port, ...(mountPort ? { mountPort } : {}) },
    });
    openRealClients.add(client);
    return client;
  }

  /** NFSv3 or NFSv4.0: what the writer speaks, for messages. */
  get protocol(): string {
    return this.w.version === 3 ? 'NFSv3' : 'NFSv4.0';
  }

  /** Marks a fault now, on the writer's clock (CLOCK_MONOTONIC): call right before causing it. */
  markFault(): number {
    const ms = monotonicMs();
    this.faultsMs.push(ms);
    return ms;
  }

  /** Marks `ms` (CLOCK_MONOTONIC) as a fault: another writer's mark of the same fault. */
  markFaultAt(ms: number): void {
    this.faultsMs.push(ms);
  }

  /**
   * Waits until the writer had RESUMED_ACKS acks after `sinceMonoMs` (default: the last
   * fault, or its start). NB: after a partition the old server acks on until its fence:
   * pass when the replacement served to wait for writes to it.
   */
  async waitResumed(timeoutMs: number, sinceMonoMs?: number): Promise<void> {
    const since = sinceMonoMs ?? this.faultsMs.at(-1) ?? 0;
    await eventually(
      `${this.share}: ${RESUMED_ACKS} acknowledged ${this.protocol} writes from the node's netns${this.faultsMs.length > 0 ? ' after the fault' : ''}`,
      async () =>
        this.w.writer.events.filter((e) => e.event === 'ack' && e.ms > since).length >= RESUMED_ACKS
          ? true
          : undefined,
      timeoutMs,
      200,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; the writer's stderr: ${this.w.writer.stderr().slice(-2000)}`);
    });
  }

  /**
   * When writes resumed after the last fault: the write analysis's first ack after the
   * gap (NB: not the first ack after the mark: a write in flight when the fault was
   * marked may be acknowledged by the old server just before the crash takes it).
   */
  resumed(): { afterS: number; at: Date } | undefined {
    const report = analyzeWriteRun({
      events: this.w.writer.events,
      faultsMs: this.faultsMs,
      content: readRealShareFile(this.sys, this.share, this.w.file),
    });
    const gap = report.clientWriteGaps.at(-1);
    if (!gap?.firstAck) return undefined;
    return {
      afterS: (gap.firstAck.ms - gap.faultMs) / 1000,
      at: new Date(gap.firstAck.ms + Date.now() - monotonicMs()),
    };
  }

  /** The client's view upholds every guarantee of the header, against the file on the CSI volume; the gaps (s). */
  assertClientView(label: string): number[] {
    const report = analyzeWriteRun({
      events: this.w.writer.events,
      faultsMs: this.faultsMs,
      content: readRealShareFile(this.sys, this.share, this.w.file),
    });
    const gapsS = report.clientWriteGaps.map((g) => (g.gapMs ?? Number.NaN) / 1000);
    const resumedS = report.clientWriteGaps.map((g) => (g.resumedAfterMs ?? Number.NaN) / 1000);
    const gaps =
      gapsS.length === 0
        ? 'no fault marked'
        : `clientWriteGap ${gapsS.map((g) => g.toFixed(2)).join(', ')} s (writes resumed ${resumedS.map((g) => g.toFixed(2)).join(', ')} s after the fault)`;
    // Each error and reconnect after the first fault, in seconds after it: where a long gap went.
    const since = this.faultsMs[0];
    const after =
      since === undefined
        ? []
        : this.w.writer.events
            .filter((e) => (e.event === 'error' || e.event === 'connected') && e.ms > since)
            .map(
              (e) =>
                `+${((e.ms - since) / 1000).toFixed(1)} s ${e.event === 'error' ? `${e.kind} (${e.op}: ${e.message.slice(0, 120)})` : 'connected'}`,
            );
    process.stderr.write(
      `${label}: ${this.share} ${this.protocol} from a real node's netns: ${gaps}; acked ${report.acked}, lost ${report.ackedWritesLost}, duplicates ${report.duplicates.length}, stale ${report.staleHandles}, errors ${JSON.stringify(report.errors)}${after.length > 0 ? `; after the fault: ${after.join('; ')}` : ''}\n`,
    );
    assert.deepEqual(report.violations, [], `${this.share}: the NFS client's view upholds every guarantee`);
    assert.equal(report.ackedWritesLost, 0, 'acknowledged writes lost');
    assert.equal(report.duplicates.length, 0, 'records written twice');
    assert.equal(report.staleHandles, 0, 'stale file handles');
    for (const g of report.clientWriteGaps) assert.ok(g.firstAck, 'writes resumed after the fault');
    return gapsS;
  }

  async stop(): Promise<void> {
    openRealClients.delete(this);
    await this.w.writer.stop();
  }
}
const openRealClients = new Set<RealNfsClient>();

/** The log lines of the reconnector pod on `nodeName` (its container's log as the kubelet wrote it). */
export async function reconnectorLogOn(
  sys: Pick<RealSystem, 'core' | 'node'>,
  nodeName: string,
): Promise<string[]> {
  const pod = (await componentPodsByNode(sys.core, RECONNECTOR_LABEL)).get(nodeName);
  assert.ok(pod, `a reconnector pod on ${nodeName}`);
  return podLog(sys.node(nodeName), pod, 'reconnector')
    .split('\n')
    .filter((l) => l.trim() !== '');
}
