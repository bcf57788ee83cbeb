/**
 * What the end-to-end scenarios share: one whole system per test file (control plane,
 * simulated nodes, the chart installed with helm: a manager on every node), started in
 * `before` and stopped in `after` (also when a test fails); and the checks every
 * scenario makes: the share's serving windows never overlap, every record written
 * before a fault is readable after it, how many failovers the managers ran.
 *
 * The NFS client's view (issue 9), for every scenario that expects a failover: an
 * NfsClientShare is a share on the shipped NFS server (no spec.server; NFSv3, see
 * E2E_NFS) with one real NFS client (dev/nfs-client nfs-writer, libnfs: numbered,
 * committed records through the Service's stable address) and a tracker of its ganesha
 * containers; nfsFaultAndWaitForReplacement faults its node and then asserts, from the
 * client's own events and the file on the volume: writes resumed, 0 acknowledged writes
 * lost (read back byte for byte), 0 duplicates (nor records out of place or corrupt),
 * 0 stale file handles, and never two ganesha processes of the share alive at once
 * (dev/system/server-process-windows.ts, whose overlap check
 * test/unit/server-process-windows.test.ts proves fails on an overlap; the write
 * analysis's violations are proven by test/unit/nfs-client-analysis.test.ts); it prints
 * the clientWriteGap. Writers and trackers still running when a file ends are stopped
 * before the system is.
 * Not guaranteed: a write gap bound (figures are printed; bench/failover measures them).
 * LEASEHOLD_KEEP_CLUSTER=1 keeps the cluster dir and the sim root (logs) for reading.
 */

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { after, before } from 'node:test';
import { analyzeWriteRun } from '../../dev/nfs-client/write-analysis.ts';
import { buildWriter, startWriter } from '../../dev/nfs-client/writer-process.ts';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import {
  type FailoverFacts,
  formatTimeline,
  gatherFacts,
  PodTracker,
  timelineOf,
} from '../../dev/system/failover-facts.ts';
import {
  analyzeShareWriter,
  createNfsShare,
  readyNfsPod,
  ServerProcessTracker,
  type ShareWriter,
  startShareWriter,
  waitReadyNfsPod,
} from '../../dev/system/nfs-share.ts';
import { podLog, REAL_NFS_EXPORT, readRealShareFile } from '../../dev/system/real-share.ts';
import { type RealSystem, type RealSystemOptions, startRealSystem } from '../../dev/system/real-system.ts';
import {
  fetchRecords,
  pvName,
  type Serving,
  type ShareStatus,
  sharePods,
  shareStatus,
  waitServing,
} from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE, type System, type SystemOptions, startSystem } from '../../dev/system/system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { leftoverPodProcesses } from '../integration/sim-harness.ts';
import { eventually } from '../support/cluster.ts';

export function useSystem(opts: SystemOptions): () => System {
  let sys: System | undefined;
  before(
    async () => {
      sys = await startSystem({ ...opts, keepDirs: process.env.LEASEHOLD_KEEP_CLUSTER === '1' });
    },
    { timeout: 300_000 },
  );
  after(async () => {
    // No writer left retrying against a stopped system (also when a scenario failed half-way).
    for (const nfs of [...openNfsShares]) await nfs.stop();
    if (process.env.LEASEHOLD_KEEP_CLUSTER === '1' && sys)
      process.stderr.write(`kept: cluster ${sys.cluster.dir}, sim ${sys.sim.root}\n`);
    await sys?.stop();
    const left = leftoverPodProcesses();
    if (left.length > 0) throw new Error(`the e2e system left pod processes behind: ${left.join(', ')}`);
  });
  return () => {
    if (!sys) throw new Error('the e2e system is not running (did its start fail? see the before hook)');
    return sys;
  };
}

/** Cordons (true) or uncordons (false) the nodes: spec.unschedulable, by merge patch. */
export async function setUnschedulable(
  sys: Pick<System, 'core'>,
  nodes: string | string[],
  unschedulable: boolean,
): Promise<void> {
  for (const name of typeof nodes === 'string' ? [nodes] : nodes)
    await sys.core.patchNode(
      { name, body: { spec: { unschedulable } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(5_000)),
    );
}

/** Asserts that no two share servers of the share's volume ever served at the same time. */
export function assertNoOverlap(sys: System, share: string): void {
  const windows = sys.sim.servingWindows(pvName(share));
  const overlaps = overlappingWindows(windows, monotonicMs());
  assert.deepEqual(
    overlaps.map(
      ([a, b]) =>
        `${a.id}[${a.startWall}..${a.stopWall ?? 'open'}] x ${b.id}[${b.startWall}..${b.stopWall ?? 'open'}]`,
    ),
    [],
    `serving windows of ${share} overlap`,
  );
}

/** Every record 1..ackedSeq is readable from the server now serving (none lost, none out of order). */
export async function assertRecordsKept(serving: Serving, ackedSeq: number): Promise<void> {
  // NB: a server that just started may not have appended its first record yet: wait
  // (up to 5 s, its interval is 100 ms) for one, then check everything.
  let answer = await fetchRecords(serving.port);
  for (let i = 0; i < 50 && answer && answer.lastSeq <= ackedSeq; i++) {
    await sleep(100);
    answer = await fetchRecords(serving.port);
  }
  assert.ok(answer, `${serving.pod} answers GET /records`);
  const seqs = answer.records.map((r) => r.seq);
  const have = new Set(seqs);
  const lost = Array.from({ length: ackedSeq }, (_, i) => i + 1).filter((s) => !have.has(s));
  assert.deepEqual(
    lost,
    [],
    `records written before the fault but missing after it (acked up to ${ackedSeq})`,
  );
  assert.ok(
    answer.lastSeq > ackedSeq,
    `the new server appends after the old records (${answer.lastSeq} > ${ackedSeq})`,
  );
  assert.deepEqual(
    seqs,
    [...seqs].sort((a, b) => a - b),
    'records in sequence order',
  );
}

/** The last record sequence number the share's current server acknowledged over HTTP. */
export async function ackedSeq(serving: Serving): Promise<number> {
  const answer = await fetchRecords(serving.port, Number.MAX_SAFE_INTEGER - 1);
  assert.ok(answer, `${serving.pod} answers`);
  return answer.lastSeq;
}

/** ShareManagers that went through a failover (status.lastFailover set), by name. */
export async function failedOver(sys: Pick<System, 'kc'>): Promise<Map<string, ShareStatus>> {
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
export async function eventsOf(sys: Pick<System, 'core'>, reason: string): Promise<string[]> {
  const list = await sys.core.listNamespacedEvent(
    { namespace: SHARES_NAMESPACE, fieldSelector: `reason=${reason}` },
    withDeadline(10_000),
  );
  return list.items.map((e) => `${e.involvedObject.name}: ${e.message ?? ''}`);
}

/**
 * Waits until the kubelet of simulated node `node` dropped `pod` (after a heal: it
 * re-listed, found the pod deleted and killed what was left of it), so that "the old
 * pod never came back" is checked after the one moment it could have.
 */
export async function waitPodForgotten(
  sys: System,
  node: string,
  pod: string,
  timeoutMs: number,
): Promise<void> {
  await eventually(
    `the kubelet of ${node} dropped ${pod}`,
    async () =>
      sys.sim
        .node(node)
        .pods()
        .some((p) => p.key === `${SHARES_NAMESPACE}/${pod}`)
        ? undefined
        : true,
    timeoutMs,
    200,
  );
}

/** The Lease of a share (same name as its ShareManager). */
export async function leaseOf(sys: Pick<System, 'kc'>, share: string): Promise<k8s.V1Lease> {
  const coord = sys.kc.makeApiClient(k8s.CoordinationV1Api);
  return coord.readNamespacedLease({ namespace: SHARES_NAMESPACE, name: share }, withDeadline(5_000));
}

export interface FaultResult {
  before: Serving;
  after: Serving;
  acked: number;
  /** Seconds from the fault to the replacement serving (its serving window start). */
  toServingS: number;
  status: ShareStatus;
  tracker: PodTracker;
}

/**
 * Runs `fault` against the node serving `share` (the demo share server), then waits until
 * another pod serves it; returns both servings and the time from the fault to the new
 * serving window.
 */
export async function faultAndWaitForReplacement(
  sys: System,
  share: string,
  fault: (node: string) => Promise<void>,
  timeoutMs: number,
  faultName = 'crashed',
): Promise<FaultResult> {
  const before = await waitServing(sys, share, 60_000);
  const acked = await ackedSeq(before);
  const r = await faultAndFollow(sys, share, before, fault, faultName, async () => {
    const after = await waitServing(sys, share, timeoutMs, before.pod);
    const window = sys.sim.servingWindows(pvName(share)).find((w) => w.id === after.pod);
    assert.ok(window, `a serving window of ${after.pod}`);
    return { after, servingAt: new Date(window.startWall) };
  });
  return { ...r, acked, toServingS: r.toServingS ?? Number.NaN };
}

/**
 * The common part of a fault: a pod tracker, the fault, the wait for the replacement
 * (`follow`, which says when it served), the share's status and its printed timeline.
 */
async function faultAndFollow<S extends { pod: string; node: string }>(
  sys: System,
  share: string,
  before: S,
  fault: (node: string) => Promise<void>,
  faultName: string,
  follow: () => Promise<
    Pick<FailoverFacts, 'servingAt' | 'servingSource' | 'clientResumedAt'> & { after: S }
  >,
): Promise<{
  before: S;
  after: S;
  toServingS: number | undefined;
  status: ShareStatus;
  tracker: PodTracker;
}> {
  const tracker = new PodTracker(sys, share);
  const faultAt = Date.now();
  let followed: Awaited<ReturnType<typeof follow>>;
  try {
    await fault(before.node);
    followed = await follow();
  } finally {
    await tracker.stop();
  }
  const { after, ...served } = followed;
  const status = await shareStatus(sys, share);
  const facts = gatherFacts(sys, tracker, {
    share,
    fault: faultName,
    crashedNode: before.node,
    crashAt: new Date(faultAt),
    oldPod: before.pod,
    newPod: after.pod,
    newNode: after.node,
    status,
    ...served,
  });
  process.stderr.write(`${share}: timeline since the fault\n${formatTimeline(timelineOf(facts))}\n`);
  const toServingS = facts.servingAt ? (facts.servingAt.getTime() - faultAt) / 1000 : undefined;
  return { before, after, toServingS, status, tracker };
}

// ---- The NFS client's view ----

/**
 * spec.nfs of the e2e tier's NFS shares: NFSv3 only (the pod gets its rpcbind). v3
 * WRITE and COMMIT never wait for ganesha's grace period, so the client's gap is the
 * failover itself and the server's grace and lease defaults (15 s / 10 s) cost these
 * files nothing; an NFSv4.0 client waits out the whole grace after every start
 * (real-node-failover.test.ts runs one across its crash with a 5 s grace; bench/failover
 * measures both).
 */
export const E2E_NFS = { versions: ['3'] };
/**
 * One committed record every 100 ms (the writer's default is 20 ms): a tenth of a
 * second is resolution enough for these checks (bench/failover measures the gap at
 * 20 ms), and a writer plus its ganesha at 50 WRITE+COMMIT a second is CPU the other
 * processes of a 2-core machine need.
 */
const WRITE_INTERVAL_MS = 100;
/** Acknowledged writes after a fault that count as "writes resumed". */
const RESUMED_ACKS = 5;
const openNfsShares = new Set<NfsClientShare>();

/**
 * A share on the shipped NFS server watched by a real NFS client: create() starts the
 * server-process tracker (first, so it sees the first container start) and the
 * ShareManager; startWriting() the NFSv3 writer once a server pod is Ready. The writer
 * runs until stop() (or the end of the file): each fault is marked with markFault().
 */
export class NfsClientShare {
  readonly faultsMs: number[] = [];
  private writer: ShareWriter | undefined;
  private readonly createdMs = monotonicMs();

  private constructor(
    private readonly sys: System,
    readonly share: string,
    readonly tracker: ServerProcessTracker,
  ) {}

  static async create(sys: System, share: string, opts: { node?: string } = {}): Promise<NfsClientShare> {
    const nfs = new NfsClientShare(sys, share, new ServerProcessTracker(sys, share));
    openNfsShares.add(nfs);
    await createNfsShare(sys, share, { nfs: E2E_NFS, ...(opts.node ? { node: opts.node } : {}) });
    return nfs;
  }

  /** Waits for a Ready server pod, starts the writer, waits for its first acks; the pod. */
  async startWriting(readyWithinMs: number): Promise<{ pod: string; node: string }> {
    const ready = await waitReadyNfsPod(this.sys, this.share, readyWithinMs);
    // Where a slow start went (a restarted container is the usual suspect).
    const exits = this.sys.sim.exits.filter((e) => e.pod.startsWith(`${this.share}-`));
    process.stderr.write(
      `${this.share}: ${ready.pod} Ready on ${ready.node} ${((monotonicMs() - this.createdMs) / 1000).toFixed(1)} s after its creation; container exits before: ${exits.length === 0 ? 'none' : exits.map((e) => `${e.pod}/${e.container} ${e.signal ?? e.code} (${e.reason})`).join(', ')}\n`,
    );
    this.writer = await startShareWriter(this.sys, this.share, 3, 'records.bin', {
      intervalMs: WRITE_INTERVAL_MS,
    });
    await this.writer.writer.waitForAck(RESUMED_ACKS, 60_000);
    return ready;
  }

  private get w(): ShareWriter {
    if (!this.writer) throw new Error(`${this.share}: the NFS writer was not started (startWriting)`);
    return this.writer;
  }

  /** Marks a fault now, on the writer's clock (CLOCK_MONOTONIC): call right before causing it. */
  markFault(): number {
    const ms = monotonicMs();
    this.faultsMs.push(ms);
    return ms;
  }

  /** Waits until the writer had RESUMED_ACKS acks after the last fault. */
  async waitResumed(timeoutMs: number): Promise<void> {
    const since = this.faultsMs.at(-1) ?? 0;
    await eventually(
      `${this.share}: ${RESUMED_ACKS} acknowledged NFS writes after the fault`,
      async () =>
        this.w.writer.events.filter((e) => e.event === 'ack' && e.ms > since).length >= RESUMED_ACKS
          ? true
          : undefined,
      timeoutMs,
      200,
    );
  }

  /**
   * When writes resumed after the last fault: seconds after it, and when (wall clock).
   * The write analysis's first ack after the gap, not the first ack after the mark: a
   * write in flight when the fault was marked may be acknowledged by the old server
   * just before the fault takes it (as RealNfsClient.resumed).
   */
  resumed(): { afterS: number; at: Date } | undefined {
    const gap = analyzeShareWriter(this.sys, this.share, this.w, this.faultsMs).clientWriteGaps.at(-1);
    if (!gap?.firstAck) return undefined;
    return {
      afterS: (gap.firstAck.ms - gap.faultMs) / 1000,
      at: new Date(gap.firstAck.ms + Date.now() - monotonicMs()),
    };
  }

  /**
   * Asserts the client's view of every fault so far (writes resumed after each, nothing
   * acknowledged lost, no duplicate, no stale handle) and that no two ganesha servers
   * of the share were alive at once; prints and returns each fault's clientWriteGap (s).
   * Valid while the writer runs: an ack is printed only after its COMMIT returned, and
   * the file is read in the same tick as the events.
   */
  assertClientView(label: string): number[] {
    const report = analyzeShareWriter(this.sys, this.share, this.w, this.faultsMs);
    const gapsS = report.clientWriteGaps.map((g) => (g.gapMs ?? Number.NaN) / 1000);
    const resumedS = report.clientWriteGaps.map((g) => (g.resumedAfterMs ?? Number.NaN) / 1000);
    process.stderr.write(
      `${label}: ${this.share} NFSv3 clientWriteGap ${gapsS.map((g) => g.toFixed(2)).join(', ')} s (writes resumed ${resumedS.map((g) => g.toFixed(2)).join(', ')} s after the fault); acked ${report.acked}, lost ${report.ackedWritesLost}, duplicates ${report.duplicates.length}, stale ${report.staleHandles}, errors ${JSON.stringify(report.errors)}\n`,
    );
    assert.deepEqual(report.violations, [], `${this.share}: the NFS client's view upholds every guarantee`);
    assert.equal(report.ackedWritesLost, 0, 'acknowledged writes lost');
    assert.equal(report.duplicates.length, 0, 'records written twice');
    assert.equal(report.staleHandles, 0, 'stale file handles');
    for (const g of report.clientWriteGaps) assert.ok(g.firstAck, 'writes resumed after the fault');
    this.assertOneServerAtATime();
    return gapsS;
  }

  /** No two ganesha containers of the share alive at once (as the kubelets saw them). */
  assertOneServerAtATime(): void {
    assert.deepEqual(
      overlappingWindows(this.tracker.windows(), monotonicMs()).map(
        ([a, b]) =>
          `${a.id}[${a.startWall}..${a.stopWall ?? 'open'}] x ${b.id}[${b.startWall}..${b.stopWall ?? 'open'}]`,
      ),
      [],
      `no two ganesha servers of ${this.share} alive at once`,
    );
  }

  /** When the entrypoint of `pod`'s server logged `serving` (ganesha answered), wall ms. */
  servingWall(pod: string): number | undefined {
    return this.tracker.logLineWall(pod, 'serving');
  }

  async stop(): Promise<void> {
    openNfsShares.delete(this);
    await this.writer?.writer.stop();
    await this.tracker.stop();
  }
}

export interface NfsFaultResult {
  before: { pod: string; node: string };
  after: { pod: string; node: string };
  /** Seconds from the fault to the replacement's entrypoint logging `serving`. */
  toServingS: number | undefined;
  /** Seconds from the fault to the client's first acknowledged write after it. */
  resumedS: number;
  /** clientWriteGap of this fault, seconds. */
  gapS: number;
  status: ShareStatus;
  tracker: PodTracker;
}

/**
 * Runs `fault` against the node of the share's Ready NFS server pod, waits for a Ready
 * replacement on another pod and for the client's writes to resume, prints the timeline
 * and asserts the client's view (NfsClientShare.assertClientView) of every fault so far.
 */
export async function nfsFaultAndWaitForReplacement(
  sys: System,
  nfs: NfsClientShare,
  fault: (node: string) => Promise<void>,
  timeoutMs: number,
  faultName = 'crashed',
): Promise<NfsFaultResult> {
  const before = await readyNfsPod(sys, nfs.share);
  assert.ok(before, `${nfs.share} has a Ready NFS server pod`);
  const r = await faultAndFollow(
    sys,
    nfs.share,
    before,
    async (node) => {
      nfs.markFault();
      await fault(node);
    },
    faultName,
    async () => {
      const after = await waitReadyNfsPod(sys, nfs.share, timeoutMs, before.pod);
      await nfs.waitResumed(timeoutMs);
      const served = nfs.servingWall(after.pod);
      return {
        after,
        ...(served === undefined ? {} : { servingAt: new Date(served) }),
        servingSource: 'NFS server log (serving)',
        clientResumedAt: nfs.resumed()?.at,
      };
    },
  );
  assert.notEqual(r.after.node, r.before.node, 'the replacement runs on another node');
  const gaps = nfs.assertClientView(`${nfs.share} ${faultName}`);
  return { ...r, resumedS: nfs.resumed()?.afterS ?? Number.NaN, gapS: gaps.at(-1) ?? Number.NaN };
}

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
  opts: { notPod?: string; timeoutMs?: number; running?: (pod: string) => boolean } = {},
): Promise<ReadyRealPod & { servingWall: number }> {
  const { notPod, running } = opts;
  return eventually(
    `${share}: a Ready pod${notPod ? ` other than ${notPod}` : ''} whose server logged serving${running ? ' and whose ganesha runs' : ''}`,
    async () => {
      const ready = await readyRealPod(sys, share, notPod);
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
): Promise<ReadyRealPod | undefined> {
  for (const p of await sharePods(sys, share).catch(() => [])) {
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
 * another). The checks are NfsClientShare's, the file read back from the volume (the
 * CSI driver's backing dir). NB: an NFSv4.0 writer needs a share whose spec.nfs.versions
 * has 4.0 (E2E_NFS has not) and waits out the replacement's grace period: libnfs never
 * reclaims (dev/nfs-client/README.md).
 */
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

  /** As NfsClientShare.assertClientView, against the file on the CSI volume; the gaps (s). */
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
