/**
 * Failovers on real nodes (issue 12 item 7): the whole system of
 * dev/system/real-system.ts (a real control plane, two real nodes with the real
 * kubelet, containerd and runc, the project's images, the chart installed by helm) and
 * one share on the shipped NFS server (no spec.server; NFSv3, so the pod runs its
 * rpcbind) whose volume is a static PV of the testbed's CSI driver (attachRequired:
 * the real attach-detach controller and external-attacher move it, the manager's
 * handoff clears the lost node's status.volumesInUse) in its fencing mode, of the
 * block kind: an ext4 image each node mounts through its own revocable view, so
 * ganesha's file handles (ext4's) are the same on both nodes and the old node's I/O
 * fails once its view is revoked; a crash takes the node's view, loop device and
 * mount with it (RealNode.crash checks). The share serves on one node
 * (its entrypoint logged `serving`: ganesha answered its NFS NULL probe inside the
 * pod); that node suffers a fault, the other node's manager fails the share over and
 * the replacement on the other node serves; three scenarios in turn, the share moving
 * between the two nodes, on one system:
 *  - crash: every process of the node killed at once, its API connections silent
 *    (RealNode.crash); then healed (a reboot: the kubelet finds the old pod deleted);
 *  - partition stall: the node cut from the API server, everything it sends held
 *    (RealNode.partition('stall'); its pods keep running, the node fabric carries on);
 *    last, after the freeze, the same with `close` (every API connection reset);
 *    the old pod's agent must fence its ganesha (the preset pod fence; its log says
 *    `fenced`) before the replacement's ganesha starts; after the heal the healed
 *    kubelet kills the deleted pod and its ganesha never runs again;
 *  - freeze: every process of the node held by the cgroup freezer (RealNode.freeze);
 *    while frozen the old ganesha runs no instruction and is not counted as running;
 *    after the thaw it runs again beside the replacement until its fence (or the
 *    kubelet) stops it: that stretch is measured and bounded. A second writer pinned
 *    to the old pod's IP (not the Service) sends it writes across the freeze and the
 *    thaw: the old ganesha may take what was queued in its socket while frozen, but
 *    the volume is on the fencing CSI driver (dev/csi: the detach revoked the old
 *    node's view on the host while it was frozen), so its COMMITs fail (EIO) and it
 *    acknowledges nothing: 0 acks after the replacement's ganesha started (acksSince,
 *    unit-tested to find such acks; acksOutsideWindows checks the same acks against
 *    the thawed window); the Service's client loses nothing (the client's view below,
 *    across the thaw). The storage's own evidence (the driver's access log and its
 *    views' write counts, csi.viewStats: dev/csi README *view stats*): the old node's
 *    view was revoked while it was frozen, before the grant to the new node; its last
 *    write served before that revoke (what the thawed node sent since was refused,
 *    counted), the new node's first after its grant (writesAcrossRevokes, unit-tested
 *    to fail on a write after the revoke). And the never-two check on a real violation:
 *    without the thaw's excuse it reports the thawed old ganesha beside the replacement
 *    (asserted when a thawed window was seen: the old ganesha may be gone at the first
 *    sample);
 *  - last, the share deleted (its pod gone, the volume unstaged and detached): every
 *    view revoked and, over the whole file, every write through a node's view before
 *    its revoke and every one through a later view after it (a crashed node's view by
 *    its last counts); the volume's ext4 image read back (a copy, its journal replayed,
 *    e2fsck -fp clean: a stale metadata write of an old node would show as damage) and
 *    every Service client's acknowledged writes on it byte for byte, in place, once
 *    (past the last ack a piece may be no record: an unacknowledged write whose size the
 *    journal held and whose data its fenced node never wrote back, which NFS allows).
 * Asserted in each:
 *  - the failover timeline from status.lastFailover: each step present, in order,
 *    after the fault, naming the lost pod, its node and the replacement (the record
 *    steps on from the previous scenario's);
 *  - never two ganesha processes of the share running at once: every ganesha.nfsd in a
 *    pod cgroup under either node's cgroup root, from the host's /proc, frozen ones not
 *    running (dev/system/real-share.ts GaneshaTracker, one for the whole file, so a
 *    healed node's old pod starting ganesha again is caught too; its windows never
 *    shorter than the process's life; test/unit/real-share-windows.test.ts proves the
 *    check fails on an overlap, also on a thawed one), each old and new server seen;
 *    only the freeze's thawed stretch is excused, and only for a bounded time;
 *  - the Lease's holder is the new pod;
 *  - the Service's routing when its backend dies (held-connection.ts): a TCP connection
 *    held through the ClusterIP from the surviving node since before the fault (so to
 *    the old pod) hears nothing from the crashed machine (no FIN, no RST: a dead machine
 *    sends none and kube-proxy adds none) and is ended by the reconnector
 *    (server/reconnector/) once the replacement serves, not before, with ECONNABORTED
 *    (the kernel's SOCK_DESTROY), while a new connection to the same ClusterIP reaches
 *    the replacement; after a partition the live old node's
 *    kernel closes it when the fence stops ganesha (a FIN or a RST heard: what the
 *    crash's silence is measured against); after the freeze it is printed;
 *  - the NFS client's view across the fault: a libnfs NFSv3 writer in the surviving
 *    node's network namespace (e2e-support.ts RealNfsClient, RealNode.spawnInNetwork;
 *    one per scenario, each on its own file) writes through the Service's ClusterIP
 *    (that node's kube-proxy; before the fault over the node fabric to the other node's
 *    pod): writes resumed, 0 acknowledged writes lost (read back from the moved CSI
 *    volume), 0 duplicates, 0 stale handles; for partition and freeze the writer runs
 *    on past the heal, until the old pod is gone from its node.
 * Printed: fault -> serving (the replacement's `serving` line), the clientWriteGap (with
 * the writer's errors and reconnects after the fault) and the timeline.
 * NFSv4.0 and the checks of the sim's nfs-failover.test.ts (removed once they ran
 * here): the share serves NFSv3, NFSv4.0 and 4.1 (spec.nfs; the server's grace and lease,
 * 15 s / 10 s: a 5 s grace lost the kernel client's lock once), and across the crash a libnfs NFSv4.0 writer
 * runs beside the NFSv3 one (same node, same ClusterIP, its own file) with the same
 * checks; the crash also asserts that the other node's manager ran the failover
 * (lastFailover.by, not the crashed node's), one LeaseExpired event, the EndpointSlices
 * pointing at the replacement only, and the NFSv3 client writing again within 60 s.
 * The v4.0 gap is longer than the v3 one: v3 WRITE/COMMIT never wait for grace, but
 * with v4.0 enabled the replacement's ganesha runs its whole grace period (a v4.0
 * client never sends RECLAIM_COMPLETE) and libnfs never reclaims, so the reconnect's
 * OPEN gets NFS4ERR_GRACE until grace ends, which ganesha notices at its reaper's next
 * check (every min(10 s, lease / 2) in whole seconds: 2 s here). So v4.0 writes resume
 * 5-8 s after the replacement's ganesha started (grace + up to a reaper tick + one 1 s
 * backoff step), v3 ones about when it serves. Measured in two runs: v4.0
 * clientWriteGap 14.85 and 16.88 s (6.15 and 7.15 s after ganesha started; 5 and 6
 * NFS4ERR_GRACE answers) against v3 8.80 and 10.77 s; it costs the crash 2-6 s (the
 * wait past the v3 writer's). Not run with v4.0: the partitions and the freeze (a
 * v4.0 client's side of them is the crash's: its server gone, the replacement in grace).
 * Cost: one system start (29 s quiet, 32-104 s with a load of 4-19) and four failovers
 * with the client's checks and heals (each 11-35 s; the crash about 20 s): the file
 * took 96 s with three of them, 120-174 s with all four at a load of 7-13; on the
 * fencing storage 181 and 165 s at a load of 14 and 11 (two runs). The storage's counts
 * and the read-back at the end (2026-12-02, load 14-16): the last test 4.1-9.4 s, the
 * freeze's new checks under 1 s; the file 181, 191 and 269 s (203 s without them in a
 * run between, the same load: the noise of the loaded machine exceeds their cost).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, type TestContext, test } from 'node:test';
import {
  accessOrderViolations,
  revokeBeforeGrantElsewhere,
  writesAcrossRevokes,
} from '../../dev/csi/access-log.ts';
import { imagePath, readImageFile } from '../../dev/csi/block-image.ts';
import { analyzeWriteRun } from '../../dev/nfs-client/write-analysis.ts';
import type { RealNode } from '../../dev/node/node.ts';
import { overlappingWindows, type ServingWindow } from '../../dev/share-server/serving-window-log.ts';
import { PodTracker, timelineOf } from '../../dev/system/failover-facts.ts';
import {
  acksOutsideWindows,
  acksSince,
  createRealNfsShare,
  GaneshaTracker,
  podLog,
  realVolumeHandle,
} from '../../dev/system/real-share.ts';
import { SHARES_NAMESPACE } from '../../dev/system/real-system.ts';
import { serviceEndpointPods, shareStatus } from '../../dev/system/shares.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { formatTimeline } from '../../lib/failover-timeline.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import {
  eventsOf,
  REAL_SERVING_WITHIN_MS,
  type ReadyRealPod,
  RealNfsClient,
  readyRealPod,
  realLogLineWall,
  servingRealPod,
  useRealSystem,
  waitPodProcessesGone,
} from './e2e-support.ts';
import { type HeldConnection, holdConnection } from './held-connection.ts';
import { RealKernelClient } from './kernel-client-support.ts';

const system = useRealSystem({ nodes: 2, cluster: { attachDetachReconcileSyncPeriod: '2s' } });
const SHARE = 'realshare';
// NFSv3 and NFSv4.0 (what libnfs speaks) and NFSv4.1, which the share then publishes
// for the kernel client (kernel-client-support.ts). The server's grace and lease (15 s /
// 10 s): with a v4.0 client recorded every grace runs its whole length, and a shorter
// grace (this file had 5 s) ended before the kernel client, held by the frozen node until
// the thaw, came back to reclaim its lock (`lost 1 locks`, then EIO: one CI run).
const SHARE_NFS = { versions: ['3', '4.0', '4.1'] };
// Crash to the NFSv3 client writing again: ~9-16 s here; generous for a loaded 2-core machine.
const V3_RESUMED_WITHIN_S = 60;
// Generous for a loaded 2-core machine: D 6 s + the replacement's start is ~10-15 s.
// How long a thawed old ganesha may run beside its replacement before its fence (or
// the kubelet) stops it: the agent fences on its first pass after the thaw (its
// deadline long past), ~0.1-2 s; generous for the loaded machine.
const THAWED_RUN_MAX_MS = 20_000;
// How late the pinned writer may record an ack after the thawed server was seen gone.
const ACK_READ_SLACK_MS = 1_000;
const FENCED = 'fenced: readiness dropped, fence action done, exiting';
// What the old server's entrypoint logs when it stops ganesha: the pod fence's SIGTERM or its own lease gate.
const STOPPED_BY = {
  'SIGTERM (the pod fence)': 'stop requested: forwarding SIGTERM to ganesha',
  'its own lease gate': 'stopped: the lease proof lapsed',
} as const;
const FAULTED = { crash: 'crashed', partition: 'partitioned', freeze: 'frozen' } as const;

let ganesha: GaneshaTracker | undefined;
/** Each scenario's client through the Service (stopped ones too): read back from the image at the end. */
const serviceClients: RealNfsClient[] = [];
after(async () => {
  await ganesha?.stop();
});

const fmt = (w: ServingWindow) =>
  `${w.id}[${w.startWall}..${w.stopWall ?? 'open'}${w.reason ? ` ${w.reason}` : ''}]`;

interface Failover {
  before: ReadyRealPod;
  after: ReadyRealPod & { servingWall: number };
  faultAt: Date;
  faultMono: number;
  client: RealNfsClient;
  /**
   * A connection held through the Service's ClusterIP (nfs port) from the surviving
   * node since before the fault, so to the old pod; the scenario stops it.
   */
  held: HeldConnection;
  /** A Linux 6.12 kernel client beside `client`, mounted as published; the scenario stops it. */
  kernel: RealKernelClient;
  /** When the replacement served, on the clients' clock (CLOCK_MONOTONIC). */
  servedMono: number;
  toServingS: number;
}

/**
 * The share's serving pod's node suffers `fault`; a client on the other node writes
 * throughout (on its own `file`), and a kernel client beside it. Resolves when the
 * replacement serves and the client writes again (and the kernel client's workloads
 * all succeeded again, unless `kernelWaits` is false), having checked the timeline,
 * lastFailover and the Lease; the clients keep running.
 */
async function failOver(
  label: keyof typeof FAULTED,
  fault: (node: string) => Promise<void> | void,
  file = `${label}.bin`,
  kernelWaits = true,
): Promise<Failover> {
  const sys = system();
  const before = await servingRealPod(sys, SHARE);
  const other = sys.nodes.find((n) => n.name !== before.node);
  assert.ok(other, 'a second node');
  await eventually(`ganesha of ${before.pod} seen running in /proc`, async () =>
    ganesha?.windows().some((w) => w.id === before.pod && w.stopMonoMs === undefined) ? true : undefined,
  );
  // The NFS client on the node that will survive, through the ClusterIP: before the
  // fault its writes cross the fabric to the server on the other node.
  const client = await RealNfsClient.start(sys, SHARE, other.name, { file });
  serviceClients.push(client);
  const held = await holdServiceConnection(other);
  const kernel = await RealKernelClient.start(sys, SHARE, other.name, { name: `kc-${label}`, index: 1 });
  await client.waitResumed(60_000);
  const pods = new PodTracker(sys, SHARE);
  const faultAt = new Date();
  const faultMono = client.markFault();
  kernel.markFault();
  let after: Failover['after'];
  let servedMono: number;
  try {
    await fault(before.node);
    after = await servingRealPod(sys, SHARE, { notPod: before.pod });
    // Acks after the replacement served (a partitioned old server acks until its fence).
    servedMono = monotonicMs() - (Date.now() - after.servingWall);
    await client.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    if (kernelWaits) await kernel.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
  } catch (err) {
    await kernel.stop();
    await held.stop();
    // The next scenario needs the node: a fault left in place would fail it too.
    await sys
      .node(before.node)
      .heal()
      .catch((e: unknown) =>
        process.stderr.write(`healing ${before.node} after a failed failover: ${String(e)}\n`),
      );
    throw err;
  } finally {
    await pods.stop();
  }
  const { servingWall } = after;
  assert.equal(after.node, other.name, 'the replacement runs on the other node');

  const status = await shareStatus(sys, SHARE);
  const lf = { ...(status.lastFailover ?? {}), ...pods.firstFailover };
  const attach = (await sys.csi.attachments(realVolumeHandle(SHARE))).find((a) => a.node === after.node);
  const steps = timelineOf({
    share: SHARE,
    crashedNode: before.node,
    crashAt: faultAt,
    oldPod: before.pod,
    newPod: after.pod,
    newNode: after.node,
    status: { ...status, lastFailover: lf },
    scheduledAt: pods.scheduled.get(after.pod)?.at,
    oldPodGoneAt: pods.gone.get(before.pod),
    newPodSeenAt: pods.created.get(after.pod),
    ...(attach ? { attachedAt: new Date(attach.atMs) } : {}),
    servingAt: new Date(servingWall),
    servingSource: 'NFS server log (serving)',
    clientResumedAt: client.resumed()?.at,
    fault: FAULTED[label],
    faultSource: `RealNode ${label}`,
  });
  process.stderr.write(`${SHARE}: timeline since the ${label} (real nodes)\n${formatTimeline(steps)}\n`);
  const toServingS = (servingWall - faultAt.getTime()) / 1000;
  process.stderr.write(
    `real-node failover: ${label} of ${before.node} -> ${after.pod} serving on ${after.node}: ${toServingS.toFixed(2)} s\n`,
  );
  // Where the replacement's start went on the real kubelet (attach to acquisition).
  const replacement = await sys.core.readNamespacedPod(
    { namespace: SHARES_NAMESPACE, name: after.pod },
    withDeadline(5_000),
  );
  const since = (ms: number | undefined) =>
    ms === undefined || Number.isNaN(ms) ? '?' : `${((ms - faultAt.getTime()) / 1000).toFixed(2)} s`;
  const startedOf = (name: string) => {
    const c = [
      ...(replacement.status?.initContainerStatuses ?? []),
      ...(replacement.status?.containerStatuses ?? []),
    ].find((x) => x.name === name);
    const at = c?.state?.running?.startedAt ?? c?.state?.terminated?.startedAt;
    return at ? new Date(at).getTime() : undefined;
  };
  process.stderr.write(
    `${after.pod} on the real kubelet: agent container started ${since(startedOf('agent'))} (whole seconds), agent logged its start ${since(realLogLineWall(sys, replacement, 'agent started', 'agent'))}, lease acquired ${since(realLogLineWall(sys, replacement, 'lease acquired', 'agent'))}, server container started ${since(startedOf('server'))}, ganesha started ${since(realLogLineWall(sys, replacement, 'ganesha started'))}\n`,
  );

  // The manager's own record of this failover, each step after the fault and in order.
  const order = [
    'detectedAt',
    'markedAt',
    'podDeletedAt',
    'detachedAt',
    'replacementCreatedAt',
    'completedAt',
  ] as const;
  let prev = faultAt.getTime() - 1_000; // the status times are the manager's, in whole ms; one host clock
  for (const k of order) {
    const v = lf[k];
    assert.ok(v, `status.lastFailover.${k} is set: ${JSON.stringify(lf)}`);
    const ms = Date.parse(v);
    assert.ok(
      ms >= prev,
      `status.lastFailover.${k} (${v}) not before the step before it: ${JSON.stringify(lf)}`,
    );
    prev = ms;
  }
  assert.ok(servingWall >= prev, 'the replacement served after its agent acquired the lease');
  assert.equal(lf.lostPod, before.pod, 'lastFailover names the lost pod');
  assert.equal(lf.lostNode, before.node, 'and the lost node');
  assert.equal(lf.replacementPod, after.pod, 'and the replacement');
  process.stderr.write(`${SHARE}: volume handoff ${lf.volumeHandoff ?? 'not recorded'} (by ${lf.by})\n`);

  const lease = await sys.kc
    .makeApiClient(k8s.CoordinationV1Api)
    .readNamespacedLease({ namespace: SHARES_NAMESPACE, name: SHARE }, withDeadline(5_000));
  assert.equal(lease.spec?.holderIdentity, after.pod, "the Lease's holder is the new pod");
  return { before, after, faultAt, faultMono, client, held, kernel, servedMono, toServingS };
}

/** The share Service's ClusterIP and nfs port. */
async function serviceAddress(): Promise<{ host: string; port: number }> {
  const svc = await system().core.readNamespacedService(
    { namespace: SHARES_NAMESPACE, name: SHARE },
    withDeadline(5_000),
  );
  const host = svc.spec?.clusterIP;
  const port = svc.spec?.ports?.find((p) => p.name === 'nfs')?.port;
  assert.ok(host && port, `Service ${SHARES_NAMESPACE}/${SHARE} has a ClusterIP and an nfs port`);
  return { host, port };
}

/** A connection through the share's Service from `node` (held-connection.ts), once established. */
async function holdServiceConnection(node: RealNode): Promise<HeldConnection> {
  const { host, port } = await serviceAddress();
  const held = holdConnection(node, host, port);
  await held.connected;
  return held;
}

/** How the held connection ended, for messages, in s since the fault. */
const endOf = (f: Failover) => {
  const end = f.held.ended();
  return end
    ? `${end.how} ${((end.monoMs - f.faultMono) / 1000).toFixed(2)} s after the fault (${end.detail})`
    : 'open';
};

/** The freeze's thawed windows of the old pod (bounded there), left out of every later check. */
const excused: ServingWindow[] = [];

/** The no-two-ganesha check over every window so far, but for the `excused` thawed ones. */
function assertNeverTwo(label: string): ServingWindow[] {
  const windows = ganesha?.windows() ?? [];
  assert.deepEqual(
    overlappingWindows(
      windows.filter((w) => !excused.some((e) => e.pid === w.pid && e.startMonoMs === w.startMonoMs)),
      monotonicMs(),
    ).map(([a, b]) => `${fmt(a)} x ${fmt(b)}`),
    [],
    `${label}: no two ganesha processes of ${SHARE} running at once`,
  );
  const cover = ganesha?.coverage();
  process.stderr.write(
    `${SHARE} after the ${label}: ganesha windows ${windows.map(fmt).join(', ')}; ${cover?.samples} samples, longest gap ${cover?.maxGapMs.toFixed(0)} ms\n`,
  );
  return windows;
}

/** The old and new pods' windows, one each before the fault's end; the old one ended after `faultMono`. */
function handover(f: Failover, windows: readonly ServingWindow[]) {
  const old = windows.filter((w) => w.id === f.before.pod && w.startMonoMs < f.faultMono);
  const fresh = windows.filter((w) => w.id === f.after.pod);
  assert.equal(old.length, 1, `one ganesha of ${f.before.pod} before the fault: ${windows.map(fmt)}`);
  assert.equal(fresh.length, 1, `one ganesha of ${f.after.pod}: ${windows.map(fmt)}`);
  const oldStop = old[0]?.stopMonoMs;
  const newStart = fresh[0]?.startMonoMs ?? Number.NaN;
  assert.ok(
    oldStop !== undefined && oldStop >= f.faultMono,
    `the old ganesha stopped running after the fault`,
  );
  assert.ok(oldStop <= newStart, 'and before the new one started');
  return { old: old[0] as ServingWindow, fresh: fresh[0] as ServingWindow, marginMs: newStart - oldStop };
}

test('node crash on real nodes: the manager of the other node fails the share over, an NFSv3 and an NFSv4.0 client write on to the replacement (nothing acknowledged lost, no stale handle); never two ganesha; the lease held by the new pod, the EndpointSlices point at it', {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  ganesha = new GaneshaTracker(sys, SHARE);
  const t0 = performance.now();
  await createRealNfsShare(sys, SHARE, { nfs: SHARE_NFS });
  const first = await servingRealPod(sys, SHARE);
  t.diagnostic(
    `${first.pod} serving on ${first.node} ${((performance.now() - t0) / 1000).toFixed(1)} s after the ShareManager's create`,
  );
  // Under the preset's read-only root filesystem ganesha must still find a writable
  // /tmp for its OFD-lock test, or it serves with byte-range locking off (FSAL_VFS
  // "disabling lock support": every client LOCK refused).
  assert.doesNotMatch(
    podLog(sys.node(first.node), first.object, 'server'),
    /Could not create file \/tmp\/ganesha\.nfsd\.locktest/,
    'ganesha ran its OFD-lock test (lock support on)',
  );
  // Beside failOver's NFSv3 client, an NFSv4.0 one on the same surviving node (through
  // the ClusterIP, its own file), and the manager pods, to tell which one failed over.
  const managersBefore = await sys.managerPods();
  const survivor = sys.nodes.find((n) => n.name !== first.node)?.name ?? '';
  // (A writer left running by a failure here is stopped by useRealSystem's after hook.)
  const v4 = await RealNfsClient.start(sys, SHARE, survivor, { file: 'crash-v4.bin', version: 4 });
  serviceClients.push(v4);
  await v4.waitResumed(60_000);
  const f = await failOver('crash', (node) => sys.node(node).crash());
  v4.markFaultAt(f.faultMono);
  const { marginMs } = handover(f, assertNeverTwo('crash'));
  // The manager on the crashed node died with it: the other node's ran the failover.
  const lf = (await shareStatus(sys, SHARE)).lastFailover ?? {};
  const crashedManager = managersBefore.get(f.before.node);
  assert.ok(lf.by, 'lastFailover.by names the manager that ran it');
  assert.notEqual(lf.by, crashedManager, 'not the manager of the crashed node');
  assert.ok([...managersBefore.values()].includes(lf.by as string), `${lf.by} is one of the manager pods`);
  const expired = (await eventsOf(sys, 'LeaseExpired')).filter((e) => e.startsWith(`${SHARE}:`));
  assert.equal(expired.length, 1, `one failover of ${SHARE} by leasehold: ${expired.join(' | ')}`);
  // What the manager published in the share's EndpointSlice: the replacement only.
  await eventually(
    `the EndpointSlices of the Service of ${SHARE} point at ${f.after.pod} only`,
    async () => {
      const pods = await serviceEndpointPods(sys, SHARE);
      return pods.length === 1 && pods[0] === f.after.pod ? pods : undefined;
    },
    30_000,
  ).catch(async (err: unknown) => {
    const now = await serviceEndpointPods(sys, SHARE).catch((e: unknown) => [String(e)]);
    throw new Error(`${String(err)}; endpoints now: ${JSON.stringify(now)}`, { cause: err });
  });
  // The Service when its backend's machine died: the connection it had routed there
  // heard nothing from the dead machine (no FIN, no RST: a dead kernel sends none and
  // kube-proxy adds none), until the reconnector on this node ended it once the
  // replacement answered (SOCK_DESTROY on a socket of the node's own network namespace:
  // its client reads ECONNABORTED and reconnects at once); without the reconnector its
  // client must time out. A new connection to the same ClusterIP reaches the replacement,
  // now the only endpoint.
  const end = await eventually(
    `the connection routed to the crashed ${f.before.pod} ended by the reconnector`,
    async () => f.held.ended(),
    10_000,
    100,
  );
  assert.equal(end.how, 'error', `ended locally, not by the dead machine: ${endOf(f)}`);
  assert.match(end.detail, /abort/i, `ECONNABORTED (SOCK_DESTROY), not a timeout: ${endOf(f)}`);
  assert.ok(end.monoMs >= f.servedMono, `not before the replacement served: ${endOf(f)}`);
  const endedS = (end.monoMs - f.faultMono) / 1000;
  const fresh = await holdServiceConnection(sys.node(survivor));
  await Promise.all([fresh.stop(), f.held.stop()]);
  process.stderr.write(
    `crash: the connection held to ${f.before.pod} through the ClusterIP heard nothing from it; the reconnector ended it ${endedS.toFixed(2)} s after the crash, ${((end.monoMs - f.servedMono) / 1000).toFixed(2)} s after the replacement served; a new one connected (${f.after.pod})\n`,
  );
  const [gapS] = f.client.assertClientView(`${SHARE} crash`);
  const kernelS = f.kernel.assertClientView(`${SHARE} crash`, f.servedMono);
  await f.kernel.stop();
  const v3ResumedS = f.client.resumed()?.afterS ?? Number.NaN;
  assert.ok(
    v3ResumedS < V3_RESUMED_WITHIN_S,
    `crash to the NFSv3 client writing again ${v3ResumedS.toFixed(2)} s < ${V3_RESUMED_WITHIN_S} s`,
  );
  await f.client.stop();
  // The NFSv4.0 client waits out the replacement's grace (its OPEN gets NFS4ERR_GRACE).
  await v4.waitResumed(REAL_SERVING_WITHIN_MS, monotonicMs() - (Date.now() - f.after.servingWall));
  const [v4GapS] = v4.assertClientView(`${SHARE} crash`);
  const v4ResumedS = v4.resumed()?.afterS ?? Number.NaN;
  const graceErrors = v4.w.writer.events.filter(
    (e) => e.event === 'error' && e.kind === 'grace' && e.ms > f.faultMono,
  ).length;
  const ganeshaStarted = realLogLineWall(sys, f.after.object, 'ganesha started');
  const afterStart = (s: number) =>
    ganeshaStarted === undefined
      ? '?'
      : `${(s - (ganeshaStarted - f.faultAt.getTime()) / 1000).toFixed(2)} s`;
  process.stderr.write(
    `crash: NFSv4.0 writes resumed ${v4ResumedS.toFixed(2)} s after the crash (${afterStart(v4ResumedS)} after the replacement's ganesha started, grace 15 s, the default; ${graceErrors} NFS4ERR_GRACE answers), NFSv3 ${v3ResumedS.toFixed(2)} s (${afterStart(v3ResumedS)})\n`,
  );
  t.diagnostic(
    `crash -> serving ${f.toServingS.toFixed(2)} s, clientWriteGap NFSv3 ${gapS?.toFixed(2)} s, NFSv4.0 ${v4GapS?.toFixed(2)} s; ${f.kernel.label}'s first write ${kernelS.toFixed(2)} s after the crash`,
  );
  process.stderr.write(`crash: old ganesha gone ${marginMs.toFixed(0)} ms before the new one started\n`);
  await v4.stop();
  // The reboot, for the next scenario: the kubelet finds the old pod deleted and does not
  // start it (the tracker runs on: a ganesha of it would be an overlap below).
  const t1 = performance.now();
  await sys.node(f.before.node).heal();
  await waitPodProcessesGone(f.before, 60_000);
  process.stderr.write(`crash: heal (reboot) to the old pod gone ${Math.round(performance.now() - t1)} ms\n`);
  assertNeverTwo('reboot after the crash');
});

/** A partition of the serving node from the API server (`mode`), then its heal. */
async function partitionAndHeal(t: TestContext, mode: 'stall' | 'close'): Promise<void> {
  const sys = system();
  const f = await failOver('partition', (node) => sys.node(node).partition(mode), `partition-${mode}.bin`);
  let healed = false;
  try {
    const { marginMs } = handover(f, assertNeverTwo(`partition ${mode}`));
    // The preset pod fence stopped it: the old agent's log (on the partitioned node's disk).
    const fencedWall = realLogLineWall(sys, f.before.object, FENCED, 'agent');
    assert.ok(fencedWall !== undefined, `${f.before.pod}'s agent logged ${JSON.stringify(FENCED)}`);
    assert.ok(fencedWall <= f.after.servingWall, 'its fence before the replacement served');
    const oldServerLog = podLog(sys.node(f.before.node), f.before.object, 'server');
    const by = Object.entries(STOPPED_BY).find(([, line]) => oldServerLog.includes(`"msg":"${line}`))?.[0];
    assert.ok(by, `${f.before.pod}'s server logged why it stopped (the fence or its lease gate)`);
    // The partitioned machine lives: its kernel closed the connection the Service had
    // routed to the fenced ganesha, and the client heard it (what the crash's silence
    // is measured against).
    const heard = await eventually(
      `the connection held to ${f.before.pod} through the ClusterIP heard its end`,
      async () => f.held.ended(),
      10_000,
      100,
    );
    assert.ok(heard.how === 'FIN' || heard.how === 'RST', `a FIN or a RST: ${endOf(f)}`);
    process.stderr.write(
      `partition ${mode}: the old agent fenced ${((fencedWall - f.faultAt.getTime()) / 1000).toFixed(2)} s after the partition; its ganesha stopped by ${by}, gone ${marginMs.toFixed(0)} ms before the new one started; the connection held to it through the ClusterIP: ${endOf(f)}\n`,
    );
    const t1 = performance.now();
    await sys.node(f.before.node).heal();
    healed = true;
    // The healed kubelet learns the pod was deleted and kills what is left of it.
    await waitPodProcessesGone(f.before, 60_000);
    process.stderr.write(
      `partition ${mode}: heal to the old pod gone ${Math.round(performance.now() - t1)} ms\n`,
    );
    await sleep(1_000); // the client writes on past the heal
    const windows = assertNeverTwo(`partition ${mode} heal`);
    assert.equal(
      windows.filter((w) => w.id === f.before.pod).length,
      1,
      'the old pod never ran ganesha again',
    );
    assert.equal(
      (await readyRealPod(sys, SHARE))?.pod,
      f.after.pod,
      'the replacement still serves after the heal',
    );
    const [gapS] = f.client.assertClientView(`${SHARE} partition ${mode}`);
    const kernelS = f.kernel.assertClientView(`${SHARE} partition ${mode}`, f.servedMono);
    t.diagnostic(
      `partition ${mode} -> serving ${f.toServingS.toFixed(2)} s, clientWriteGap ${gapS?.toFixed(2)} s; ${f.kernel.label}'s first write ${kernelS.toFixed(2)} s after the partition`,
    );
  } finally {
    if (!healed) await sys.node(f.before.node).heal(); // the next scenario needs the node
    await f.client.stop();
    await f.kernel.stop();
    await f.held.stop();
  }
}

test(
  'partition (stall) from the API server on real nodes: the agent fences its ganesha before the replacement serves; after the heal the old pod is gone and never served again; nothing lost',
  {
    timeout: 300_000,
  },
  (t) => partitionAndHeal(t, 'stall'),
);

test('freeze (cgroup freezer) on real nodes: failed over while frozen; after the thaw the old ganesha is stopped within a bound and the client loses nothing; never two running ganesha while frozen', {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  // A second writer that stays with the old server (its pod IP, not the Service): what
  // a client still connected to it when the node froze would send it on the thaw.
  const old = await servingRealPod(sys, SHARE);
  const podIP = old.object.status?.podIP;
  assert.ok(podIP, `${old.pod} has a pod IP`);
  const pinnedNode = sys.nodes.find((n) => n.name !== old.node)?.name ?? '';
  const pinned = await RealNfsClient.start(sys, SHARE, pinnedNode, { file: 'freeze-pinned.bin', podIP });
  await pinned.waitResumed(60_000);
  // NB: the kernel client is waited for after the thaw, not before (see below).
  const f = await failOver('freeze', (node) => sys.node(node).freeze(), undefined, false);
  let healed = false;
  try {
    // While frozen: the old ganesha ran no instruction since the first sample that saw it frozen.
    const { marginMs } = handover(f, assertNeverTwo('freeze'));
    process.stderr.write(`freeze: old ganesha frozen ${marginMs.toFixed(0)} ms before the new one started\n`);
    // The kernel client is still stuck: the freezer stops the node's processes, not its
    // kernel, which goes on acknowledging the client's segments into the frozen ganesha's
    // socket; a v4 client never retransmits an RPC on a connection TCP calls alive, so it
    // waits for that reply until the old pod's socket closes (its death, after the thaw).
    const stuck = !f.kernel.resumedSince(f.servedMono);
    const thawMono = monotonicMs();
    await sys.node(f.before.node).heal();
    healed = true;
    await waitPodProcessesGone(f.before, 60_000);
    const goneMs = monotonicMs() - thawMono;

    await sleep(1_000); // the client writes on past the thaw
    const windows = ganesha?.windows() ?? [];
    // What the old pod ran after the thaw, beside the replacement: bounded, then gone.
    const thawed = windows.filter((w) => w.id === f.before.pod && w.startMonoMs >= f.faultMono);
    for (const w of thawed) {
      assert.ok(w.stopMonoMs !== undefined, `the thawed old ganesha stopped: ${fmt(w)}`);
      assert.ok(
        w.stopMonoMs - thawMono <= THAWED_RUN_MAX_MS,
        `the thawed old ganesha ran ${(w.stopMonoMs - thawMono).toFixed(0)} ms after the thaw, at most ${THAWED_RUN_MAX_MS} ms`,
      );
    }
    // The never-two check on a real violation: the thawed old ganesha ran beside the
    // replacement (both seen running in /proc), and without the excuse the check says so.
    const caught = overlappingWindows(windows, monotonicMs()).filter(
      ([a, b]) => thawed.includes(a) !== thawed.includes(b),
    );
    if (thawed.length > 0)
      assert.ok(
        caught.some(([a, b]) => a.id === f.after.pod || b.id === f.after.pod),
        `the never-two check catches the thawed old ganesha beside ${f.after.pod}: ${windows.map(fmt)}`,
      );
    process.stderr.write(
      `freeze: the never-two check without the thaw's excuse: ${caught.map(([a, b]) => `${fmt(a)} x ${fmt(b)}`).join(', ') || 'no overlap (no thawed window seen)'}\n`,
    );
    excused.push(...thawed);
    assertNeverTwo('thaw');
    // Through the client: what the thawed old ganesha acknowledged once the
    // replacement's had started (the writer pinned to its pod IP). A request queued in
    // its socket while frozen is taken on the thaw, before anything stops it; but the
    // fencing CSI volume revoked the old node's view at the detach, on the host, while
    // it was frozen: its COMMIT (fsync) fails EIO, so it acknowledges nothing the new
    // server does not have. Asserted: none (acksSince is unit-tested to find such acks).
    const replacementStart = windows.find((w) => w.id === f.after.pod)?.startMonoMs ?? Number.NaN;
    const stale = acksSince(pinned.w.writer.events, replacementStart);
    const pinnedLast = acksSince(pinned.w.writer.events, 0).at(-1);
    const pinnedErrors = pinned.w.writer.events.filter((e) => e.event !== 'ack' && e.ms >= replacementStart);
    process.stderr.write(
      `freeze: the writer pinned to ${f.before.pod} (${podIP}): last ack ${pinnedLast ? `${(pinnedLast.ms - f.faultMono).toFixed(0)} ms from the freeze (negative: before it)` : 'none'}; ${stale.length} acknowledged by the thawed old ganesha after the replacement's started; its other events since: ${[...new Set(pinnedErrors.map((e) => e.event))].join(', ') || 'none'}\n`,
    );
    assert.deepEqual(
      stale,
      [],
      `${f.before.pod} acknowledged no write after ${f.after.pod}'s ganesha started (fenced storage; thawed windows ${thawed.map(fmt)})`,
    );
    // And so none outside its thawed window either (the check before fencing storage).
    assert.deepEqual(acksOutsideWindows(stale, thawed, ACK_READ_SLACK_MS), []);
    // The storage's own evidence (the driver's log and its views' counts, dev/csi): the
    // old node's view was revoked while it was frozen, before the grant to the new node;
    // nothing written through it landed at or after that revoke (what the thawed ganesha
    // and its ext4 sent since was refused: `refused`); the new node's first write came
    // after its grant.
    const handle = realVolumeHandle(SHARE);
    const log = await sys.csi.accessLog();
    assert.deepEqual(accessOrderViolations(log), [], "the storage's grants and revokes in order");
    // NB: of this freeze: the log since it (the file's earlier failovers are in it too).
    const pair = revokeBeforeGrantElsewhere(
      log.filter((e) => e.monoMs >= f.faultMono),
      handle,
      f.before.node,
    );
    assert.ok(pair, `${f.before.node}'s view revoked before a grant elsewhere: ${JSON.stringify(log)}`);
    assert.equal(pair.grant.node, f.after.node, "then granted to the replacement's node");
    assert.ok(pair.revoke.monoMs < thawMono, `${f.before.node}'s view was revoked before the thaw`);
    const views = await sys.csi.viewStats(handle);
    const oldView = views.filter((v) => v.node === f.before.node && v.grantSeq < pair.revoke.seq).at(-1);
    const newView = views.find((v) => v.grantSeq === pair.grant.seq);
    assert.ok(
      oldView?.hasStats && newView?.hasStats && oldView.writes > 0 && newView.writes > 0,
      `both views reported writes: ${JSON.stringify(views)}`,
    );
    assert.ok(
      (oldView.lastWriteMonoMs ?? Number.POSITIVE_INFINITY) < pair.revoke.monoMs,
      `the last write through ${f.before.node}'s view (${oldView.lastWriteMonoMs} ms) before its revoke (${pair.revoke.monoMs} ms)`,
    );
    assert.ok(
      (newView.firstWriteMonoMs ?? Number.NEGATIVE_INFINITY) > pair.grant.monoMs,
      `the first write through ${f.after.node}'s view (${newView.firstWriteMonoMs} ms) after its grant (${pair.grant.monoMs} ms)`,
    );
    assert.deepEqual(
      writesAcrossRevokes(log, handle, views),
      [],
      "every write through a node's view before its revoke, every one through a later view after it",
    );
    process.stderr.write(
      `freeze: the storage: revoke on ${f.before.node} ${((pair.revoke.monoMs - f.faultMono) / 1000).toFixed(2)} s after the freeze -> grant on ${pair.grant.node} ${(pair.grant.monoMs - pair.revoke.monoMs).toFixed(0)} ms later; ${f.before.node}'s view: ${oldView.writes} writes, the last ${((pair.revoke.monoMs - (oldView.lastWriteMonoMs ?? 0)) / 1000).toFixed(2)} s before its revoke, ${oldView.refused} requests refused after it (the thaw ${((thawMono - pair.revoke.monoMs) / 1000).toFixed(2)} s after the revoke); ${pair.grant.node}'s first write ${((newView.firstWriteMonoMs ?? Number.NaN) - pair.grant.monoMs).toFixed(0)} ms after its grant\n`,
    );
    const fencedWall = realLogLineWall(sys, f.before.object, FENCED, 'agent');
    process.stderr.write(
      `freeze: after the thaw the old ganesha ran ${thawed.map((w) => `${((w.stopMonoMs ?? Number.NaN) - thawMono).toFixed(0)} ms`).join(', ') || 'not once (seen gone at the first sample)'}; its agent ${fencedWall === undefined ? 'logged no fence (the kubelet stopped it)' : 'logged its fence'}; every process of the old pod gone ${goneMs.toFixed(0)} ms after the thaw\n`,
    );
    assert.equal(
      (await readyRealPod(sys, SHARE))?.pod,
      f.after.pod,
      'the replacement still serves after the thaw',
    );
    // The kernel client, held by the frozen node until the thaw (above), after it. NB:
    // printed, not asserted: in 2 of 4 whole-file runs on 2026-12-04 it had not written
    // again 120 s after the thaw, in the other 2 it wrote 0.06 and 0.16 s after it. Once
    // its lock was lost to a 5 s grace (since raised); once its connection, held on the
    // frozen pod, was answered by the thawed old ganesha, whose storage view had been
    // revoked: its state recovery failed (`error = -30`, EROFS) and its open files gave
    // EIO and EBADF from then on. Asserted still: no ESTALE, every acknowledged record on
    // the volume.
    const kernelResumed = await f.kernel.waitResumed(60_000, f.servedMono).then(
      () => true,
      () => false,
    );
    if (!kernelResumed)
      process.stderr.write(
        `freeze: ${f.kernel.label} had not written again 60 s after the thaw; its console since the freeze:\n${f.kernel.console()}\n`,
      );
    const kernelFirst = f.kernel.firstWriteAfterMs(f.servedMono);
    process.stderr.write(
      `freeze: ${f.kernel.label} ${stuck ? 'had not resumed when the thaw began' : 'had resumed before the thaw'} (${((thawMono - f.faultMono) / 1000).toFixed(2)} s after the freeze; the replacement served at ${((f.servedMono - f.faultMono) / 1000).toFixed(2)} s); its first write ${kernelFirst === undefined ? 'never' : `${((kernelFirst - f.faultMono) / 1000).toFixed(2)} s after the freeze, ${((kernelFirst - thawMono) / 1000).toFixed(2)} s after the thaw began`}\n`,
    );
    // Through the client: every write acknowledged across the freeze and the thaw is on
    // the volume once, in order; none lost to a thawed server.
    const [gapS] = f.client.assertClientView(`${SHARE} freeze`);
    // The kernel client kept running across the thaw (its writes reach the replacement only).
    const kernelS = f.kernel.assertClientView(`${SHARE} freeze`, f.servedMono, { requireResumed: false });
    t.diagnostic(
      `freeze -> serving ${f.toServingS.toFixed(2)} s, clientWriteGap ${gapS?.toFixed(2)} s; ${f.kernel.label}'s first write ${kernelS.toFixed(2)} s after the freeze`,
    );
  } finally {
    if (!healed) await sys.node(f.before.node).heal(); // thaw before stop (a frozen task ignores SIGKILL)
    process.stderr.write(
      `freeze: the connection held to ${f.before.pod} through the ClusterIP: ${endOf(f)}\n`,
    );
    await f.client.stop();
    await f.kernel.stop();
    await f.held.stop();
    await pinned.stop();
  }
});

test(
  'partition (close: every API connection reset) on real nodes: the same as the stall, the share moving back',
  {
    timeout: 300_000,
  },
  (t) => partitionAndHeal(t, 'close'),
);

test('after the last scenario, the share deleted: every view revoked, every write through each before its revoke (the whole file), the image clean (journal replayed, e2fsck) and every acknowledged write of each Service client on it', {
  timeout: 120_000,
}, async () => {
  const sys = system();
  const handle = realVolumeHandle(SHARE);
  const t0 = monotonicMs();
  // Deleted, its pod goes, the kubelet unstages (the ext4 unmounted), the volume is
  // detached and its last view revoked: nothing holds the image any more.
  await sys.kc.makeApiClient(k8s.CustomObjectsApi).deleteNamespacedCustomObject(
    {
      group: 'leasehold.dev',
      version: 'v1alpha1',
      plural: 'sharemanagers',
      namespace: SHARES_NAMESPACE,
      name: SHARE,
    },
    withDeadline(10_000),
  );
  const views = await eventually(
    `every view of ${handle} revoked (the share's pod gone, the volume unstaged and detached)`,
    async () => {
      const v = await sys.csi.viewStats(handle);
      return v.length > 0 && v.every((x) => x.revoked) ? v : undefined;
    },
    90_000,
    500,
  );
  const detachedS = (monotonicMs() - t0) / 1000;
  const log = await sys.csi.accessLog();
  assert.deepEqual(accessOrderViolations(log), [], "the storage's grants and revokes in order");
  assert.deepEqual(
    views.filter((v) => !v.hasStats).map((v) => v.view),
    [],
    "every view reported its counts (a crashed node's view its last ones)",
  );
  assert.deepEqual(
    writesAcrossRevokes(log, handle, views),
    [],
    "over the whole file: every write through a node's view before its revoke, every one through a later view after it",
  );
  const t1 = monotonicMs();
  const image = imagePath(join(sys.csi.backingDir, handle));
  const read = readImageFile(image, 'freeze.bin');
  assert.ok(
    read.clean,
    `the image's ext4, its journal replayed, is clean (e2fsck -fp; a stale metadata write of an old node would show as damage): ${read.fsckOutput}`,
  );
  // Every acknowledged write of each scenario's Service client, read from the image:
  // each byte for byte in its place, none twice or elsewhere. NB: not the per-scenario
  // check's "no corrupt record" past the last ack: a record in flight at the writer's
  // stop (WRITE done, no COMMIT) whose node was fenced later may be on the image as its
  // size without its data (ext4 journals the size of a write into an allocated block
  // before writing its data back; the fenced node's writeback is refused): no record, an
  // unacknowledged write lost, which NFS allows (seen in two of four runs, freeze.bin).
  const tails: string[] = [];
  for (const c of serviceClients) {
    const content = readImageFile(image, c.w.file).content ?? Buffer.alloc(0);
    const report = analyzeWriteRun({ events: c.w.writer.events, faultsMs: c.faultsMs, content });
    const lastAcked = Math.max(0, ...c.w.writer.events.flatMap((e) => (e.event === 'ack' ? [e.seq] : [])));
    const what = `${c.w.file} on the image (acked ${report.acked}, the last seq ${lastAcked})`;
    assert.equal(report.ackedWritesLost, 0, `${what}: every acknowledged write on it byte for byte`);
    assert.deepEqual(report.duplicates, [], `${what}: no record twice`);
    assert.deepEqual(report.outOfOrder, [], `${what}: no record out of place`);
    assert.deepEqual(
      report.corrupt.filter((place) => place + 1 <= lastAcked),
      [],
      `${what}: nothing but records up to the last acknowledged one`,
    );
    if (report.corrupt.length > 0)
      tails.push(`${c.w.file}: places ${report.corrupt.join(',')} past the last ack`);
  }
  process.stderr.write(
    `after the last scenario: ${views.length} views (${views.map((v) => `${v.node}#${v.grantSeq} ${v.writes}w/${v.refused}r`).join(', ')}); deleted to every view revoked ${detachedS.toFixed(1)} s; image e2fsck (exit ${read.fsckCode}) and ${serviceClients.length} files read back ${((monotonicMs() - t1) / 1000).toFixed(1)} s; unacknowledged records not on the image: ${tails.join('; ') || 'none'}\n`,
  );
});
