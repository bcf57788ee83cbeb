/**
 * Storage that fences (issue 11), on the simulator's fencing storage
 * (dev/sim/storage/: each node reaches the volume through its own revocable FUSE view,
 * revoked by the attacher's ControllerUnpublish before the finalizer goes), next to
 * storage without an attach step (CSIDriver attachRequired: false), which cannot fence.
 * Two shares on sim-1:
 *  - sf-fenced: the shipped NFS server (no spec.server: real ganesha.nfsd) on the block
 *    kind of the fencing storage (one ext4 image; each node mounts it through a loop
 *    device over its own view: real kernel file handles for ganesha's VFS FSAL, the same
 *    on every node), a real NFSv3 client (libnfs nfs-writer) writing committed records
 *    through the Service;
 *  - sf-open: the toy HTTP share server, stubborn (it keeps appending 3 s after the
 *    agent's SIGTERM) and quick (a record every 20 ms), on the no-attach storage.
 * Freeze sim-1 for longer than D, then resume:
 *  - fencing storage: served again on sim-2 (StorageFencing=True); writes resumed; every
 *    acknowledged write is on the volume byte for byte (read from the image itself, its
 *    journal replayed and e2fsck clean: a stale metadata write of the old node's ext4
 *    would show as damage), 0 stale handles; never two ganesha processes at once; the
 *    storage's own log shows sim-1's access revoked before the volume was granted to
 *    sim-2, and its views' stats show the last write through sim-1's view before that
 *    revoke and the first through sim-2's after it: no write of the old server landed
 *    after the replacement's first;
 *  - no-attach storage, with the default LEASEHOLD_NONFENCING_STORAGE=require-node-down:
 *    WAITS (StorageFencing=False/AwaitingNodeDown, an event, no replacement pod, the
 *    lease not marked, nothing serving) until the test puts the out-of-service taint on
 *    sim-1; then it fails over (NodeDown). sim-1 was only frozen, not powered off, so on
 *    resume the old server's records DO land after the replacement's first: the taint
 *    is trusted as the operator's word that the machine is off, and here it was not
 *    (what lease-only would do at once, without the taint: storage-fencing.ts).
 * On real nodes now: (a)'s failover of a frozen node on the fencing ext4 storage with 0
 * stale acks and nothing lost (real-node-failover.test.ts's freeze), the storage's
 * revoke before the grant elsewhere and the old node's EIO after it
 * (real-node.test.ts's fencing test, real-node-fencing.ts), StorageFencing=True/
 * StorageFences, and all of (b) up to the failover after the taint
 * (real-node-handoff.test.ts, scenario 4, on the testbed driver's attach-less name).
 * Kept here because the real testbed does not show it: the per-view write counts
 * (`viewStats`, `writesAcrossRevokes`: the real driver's fencefs views report none), the
 * image read back with its journal replayed and e2fsck clean (on real nodes the ext4 is
 * mounted in the node's mount namespace), and (b)'s thaw of a node tainted while only
 * frozen (its old server writes after the replacement's first): the real scenario
 * powers the frozen node off instead, since a thawed old ganesha next to the
 * replacement is what its never-two check forbids.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { analyzeWriteRun } from '../../dev/nfs-client/write-analysis.ts';
import { parseRecords } from '../../dev/share-server/record-file.ts';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { NFS_SERVER_IMAGE, SHARE_SERVER_IMAGE } from '../../dev/sim/sim.ts';
import {
  accessOrderViolations,
  revokeBeforeGrantElsewhere,
  writesAcrossRevokes,
} from '../../dev/sim/storage/access-log.ts';
import { imagePath, readImageFile } from '../../dev/sim/storage/block-image.ts';
import { handoffOrderViolations } from '../../dev/sim/storage/csi-attacher.ts';
import { viewLink } from '../../dev/sim/storage/fencing-storage.ts';
import { hostStorageSnapshot } from '../../dev/sim/storage/storage-leftovers.ts';
import { createTestVolume, type TestStorageKind } from '../../dev/sim/storage/test-volume.ts';
import {
  createNfsShare,
  readyNfsPod,
  ServerProcessTracker,
  type ShareWriter,
  startShareWriter,
  waitReadyNfsPod,
} from '../../dev/system/nfs-share.ts';
import {
  pvName,
  SERVER_PORT,
  type Serving,
  shareStatus,
  unpinShare,
  waitServing,
} from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE } from '../../dev/system/system.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { OUT_OF_SERVICE_TAINT } from '../../manager/failover/storage-fencing.ts';
import { eventually } from '../support/cluster.ts';
import { setUnschedulable, useSystem } from './e2e-support.ts';

const FENCED = 'sf-fenced';
const OPEN = 'sf-open';
const LOST = 'sim-1';
const OTHER = 'sim-2';
const system = useSystem({ nodes: 2, cluster: { attachDetachReconcileSyncPeriod: '2s' } });
// As the NFSv4.0 client of real-node-failover.test.ts: what libnfs speaks, short grace and lease.
const NFS = { versions: ['3', '4.0'], gracePeriod: '5s', leaseLifetime: '5s' };
const WRITER_FILE = 'records-v3.bin';

let writer: ShareWriter | undefined;
let tracker: ServerProcessTracker | undefined;
// Also when a scenario failed half-way: no writer left retrying against a stopped system.
after(async () => {
  await writer?.writer.stop();
  await tracker?.stop();
});

/** The NFS share on the block kind of the fencing storage; sim-2 is cordoned meanwhile. */
async function createNfsShareOnExt4(share: string): Promise<void> {
  const sys = system();
  const claim = `${share}-data`;
  await createTestVolume(sys.kc, {
    pvName: pvName(share),
    namespace: SHARES_NAMESPACE,
    claimName: claim,
    storage: 'fencing-ext4',
  });
  await createNfsShare(sys, share, { claim, nfs: NFS });
}

async function createShareOn(share: string, storage: TestStorageKind): Promise<void> {
  const sys = system();
  const claimName = `${share}-data`;
  await createTestVolume(sys.kc, { pvName: pvName(share), namespace: SHARES_NAMESPACE, claimName, storage });
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  await custom.createNamespacedCustomObject(
    {
      group: 'leasehold.dev',
      version: 'v1alpha1',
      plural: 'sharemanagers',
      namespace: SHARES_NAMESPACE,
      body: {
        apiVersion: 'leasehold.dev/v1alpha1',
        kind: 'ShareManager',
        metadata: { name: share, namespace: SHARES_NAMESPACE },
        spec: {
          volume: { pvc: claimName, mountPath: '/export' },
          server: {
            image: `${SHARE_SERVER_IMAGE}:dev`,
            args: ['--dir=/export', '--sigterm-delay=3s', '--interval=20ms'],
            ports: [{ name: 'http', containerPort: SERVER_PORT, protocol: 'TCP' }],
          },
          serviceAccountName: 'leasehold-agent',
          scheduling: { nodeSelector: { 'kubernetes.io/hostname': LOST } },
        },
      },
    },
    withDeadline(10_000),
  );
}

/** Records of the old writer that come after the replacement's first one, in file order. */
function oldRecordsAfterNewFirst(share: string, oldPod: string, newPod: string): { seq: number }[] {
  const dir = system().sim.volumeDir(pvName(share));
  const records = parseRecords(readFileSync(join(dir, 'records.jsonl'), 'utf8'));
  const firstNew = records.findIndex((r) => r.writer === newPod);
  assert.ok(firstNew >= 0, `${share}: the replacement ${newPod} wrote a record`);
  return records.slice(firstNew + 1).filter((r) => r.writer === oldPod);
}

test('two shares on sim-1: NFS on the fencing ext4 storage with a writer, a stubborn one on no-attach storage', {
  timeout: 150_000,
}, async () => {
  const sys = system();
  const t0 = monotonicMs();
  const since = () => `${((monotonicMs() - t0) / 1000).toFixed(1)} s`;
  tracker = new ServerProcessTracker(sys, FENCED);
  await setUnschedulable(system(), OTHER, true);
  let phases = '';
  try {
    await createNfsShareOnExt4(FENCED);
    await createShareOn(OPEN, 'no-attach');
    phases += `created ${since()}`;
    const nfs = await waitReadyNfsPod(sys, FENCED, 120_000);
    assert.equal(nfs.node, LOST);
    phases += `, NFS server Ready ${since()}`;
    const serving = await waitServing(sys, OPEN, 120_000);
    assert.equal(serving.node, LOST);
  } finally {
    await setUnschedulable(system(), OTHER, false);
  }
  await unpinShare(sys, OPEN);
  writer = await startShareWriter(sys, FENCED, 3, WRITER_FILE, { writerId: 3 });
  await writer.writer.waitForAck(10, 60_000);
  process.stderr.write(`storage-fencing: ${phases}, 10 NFS writes acknowledged ${since()}\n`);
  // NB: a replaced pod at start may revoke and grant sim-1's view again (the attach-detach
  // controller detached it meanwhile); all of it on sim-1.
  const views = sys.sim.attacher.fencing?.log ?? [];
  assert.deepEqual(
    [...new Set(views.map((e) => `${e.pv} ${e.node}`))],
    [`${pvName(FENCED)} ${LOST}`],
    `only the fencing volume has a view, on sim-1: ${JSON.stringify(views)}`,
  );
  assert.equal(views.at(-1)?.op, 'grant', 'granted to sim-1 now');
  const fs = realpathSync(viewLink(sys.sim.root, pvName(FENCED), LOST));
  assert.equal(
    hostStorageSnapshot().mounts.find((m) => m.mountpoint === fs)?.fstype,
    'ext4',
    `sim-1's pods use the ext4 file system mounted through its view (${fs})`,
  );
});

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

async function storageFencingCondition(share: string): Promise<Condition | undefined> {
  const status = (await shareStatus(system(), share)) as { conditions?: Condition[] };
  return status.conditions?.find((c) => c.type === 'StorageFencing');
}

/** The share's pods (any phase) other than `pod`. */
async function otherPods(share: string, pod: string): Promise<string[]> {
  const list = await system().core.listNamespacedPod(
    { namespace: SHARES_NAMESPACE, labelSelector: `leasehold.dev/share-manager=${share}` },
    withDeadline(5_000),
  );
  return list.items.map((p) => p.metadata?.name ?? '').filter((name) => name !== pod);
}

/** As an operator who powered the node off would (kubectl taint ... :NoExecute). */
async function taintOutOfService(node: string): Promise<void> {
  const core = system().core;
  const current = await core.readNode({ name: node }, withDeadline(5_000));
  const taint = { key: OUT_OF_SERVICE_TAINT, value: 'nodeshutdown', effect: 'NoExecute' };
  const body = current.spec?.taints
    ? [{ op: 'add', path: '/spec/taints/-', value: taint }]
    : [{ op: 'add', path: '/spec/taints', value: [taint] }];
  await core.patchNode(
    { name: node, body },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch, withDeadline(5_000)),
  );
}

test('freeze sim-1 longer than D: the fencing NFS share fails over, the no-attach share waits for node-down evidence, the taint lets it go; resume', {
  timeout: 240_000,
}, async () => {
  const sys = system();
  const w = writer;
  const track = tracker;
  assert.ok(w && track, 'the NFS share and its writer started');
  const started = monotonicMs();
  const before = await readyNfsPod(sys, FENCED);
  assert.equal(before?.node, LOST, `${FENCED} is served from sim-1`);
  const openBefore = await waitServing(sys, OPEN, 10_000);
  const faultMs = monotonicMs();
  await sys.sim.node(LOST).freeze();
  const frozenAt = monotonicMs();
  const fencedAfter = await waitReadyNfsPod(sys, FENCED, 90_000, before.pod);
  assert.notEqual(fencedAfter.node, LOST);
  process.stderr.write(
    `storage-fencing: ${FENCED} Ready on ${fencedAfter.node} ${((monotonicMs() - faultMs) / 1000).toFixed(2)} s after the freeze\n`,
  );
  const fenced = await storageFencingCondition(FENCED);
  assert.deepEqual(
    [fenced?.status, fenced?.reason],
    ['True', 'StorageFences'],
    'the fencing storage (CSIDriver attachRequired true) was judged to fence',
  );

  // No-attach storage, default LEASEHOLD_NONFENCING_STORAGE=require-node-down: its lease
  // went stale with FENCED's (D after the freeze), and it WAITS, serving nowhere.
  const waiting = await eventually(
    `${OPEN} says StorageFencing=False/AwaitingNodeDown`,
    async () => {
      const c = await storageFencingCondition(OPEN);
      return c?.reason === 'AwaitingNodeDown' ? c : undefined;
    },
    30_000,
    200,
  );
  assert.equal(waiting.status, 'False');
  assert.match(waiting.message ?? '', /attachRequired: false/);
  assert.match(waiting.message ?? '', /node\.kubernetes\.io\/out-of-service.*or delete its Node object/);
  // It keeps waiting: 3 s more is twice what FENCED took from its verdict to its
  // replacement pod, and the Node's status changes (NotReady, taints) make the managers
  // look again meanwhile.
  const leases = sys.kc.makeApiClient(k8s.CoordinationV1Api);
  const holdUntil = monotonicMs() + 3_000;
  do {
    assert.deepEqual(await otherPods(OPEN, openBefore.pod), [], `${OPEN}: no replacement pod while it waits`);
    const lease = await leases.readNamespacedLease(
      { namespace: SHARES_NAMESPACE, name: OPEN },
      withDeadline(5_000),
    );
    assert.equal(
      lease.metadata?.annotations?.['leasehold.dev/delinquent'],
      undefined,
      'its lease is not marked',
    );
    await sleep(300);
  } while (monotonicMs() < holdUntil);
  assert.deepEqual(
    sys.sim.servingWindows(pvName(OPEN)).filter((x) => x.id !== openBefore.pod),
    [],
    `${OPEN}: nothing but the frozen old server ever served it`,
  );
  const events = await sys.core.listNamespacedEvent(
    { namespace: SHARES_NAMESPACE, fieldSelector: `involvedObject.name=${OPEN},reason=AwaitingNodeDown` },
    withDeadline(5_000),
  );
  assert.ok(events.items.length > 0, `a Warning event AwaitingNodeDown on ${OPEN}`);
  const freezeToTaintS = (monotonicMs() - started) / 1000;

  // The operator's word that sim-1 is down: the out-of-service taint. The manager reads
  // it on the Node event and fails over.
  const taintedAt = monotonicMs();
  await taintOutOfService(LOST);
  const openAfter: Serving = await waitServing(sys, OPEN, 60_000, openBefore.pod);
  assert.notEqual(openAfter.node, LOST);
  process.stderr.write(
    `storage-fencing: ${OPEN} waited ${freezeToTaintS.toFixed(1)} s after the freeze with no replacement; served again ${((monotonicMs() - taintedAt) / 1000).toFixed(2)} s after the taint\n`,
  );
  const afterTaint = await storageFencingCondition(OPEN);
  assert.deepEqual([afterTaint?.status, afterTaint?.reason], ['False', 'NodeDown']);

  // The NFS client's writes resumed on the replacement (v3 WRITE/COMMIT do not wait for grace).
  await eventually(
    `${FENCED}: 20 acknowledged NFSv3 writes after the freeze`,
    async () =>
      w.writer.events.filter((e) => e.event === 'ack' && e.ms > faultMs).length >= 20 ? true : undefined,
    90_000,
    200,
  );
  sys.sim.node(LOST).heal();
  const healedAt = monotonicMs();
  // The old servers resume; what ends them (the storage's EIO, the agent's fence, the
  // healed kubelet killing the deleted pods) is what this checks. Wait for both to have exited.
  const oldExit = (pod: string, image: string) =>
    sys.sim.exits.find((e) => e.pod === pod && e.image.startsWith(image));
  await eventually(
    'both old servers exited after the resume',
    async () =>
      oldExit(before.pod, NFS_SERVER_IMAGE) && oldExit(openBefore.pod, SHARE_SERVER_IMAGE) ? true : undefined,
    30_000,
    100,
  );
  const nfsExit = oldExit(before.pod, NFS_SERVER_IMAGE);
  assert.ok(
    nfsExit && nfsExit.monoMs >= healedAt,
    `the old ganesha ended after the resume: ${JSON.stringify(nfsExit)}`,
  );
  // What a resumed machine's kernel would do: write back what its page cache holds (in the
  // sim that kernel is the host's and ran on during the freeze). It must not land.
  const oldFs =
    sys.sim.attacher.fencing?.log.filter((e) => e.op === 'grant' && e.node === LOST).at(-1)?.view ?? '';
  const oldSync = spawnSync('sync', ['-f', oldFs], { encoding: 'utf8' });

  await w.writer.stop();
  await track.stop();
  // The replacement's file system holds its acknowledged writes (COMMITted: fsynced);
  // syncfs so the image read below also has its metadata on the disk.
  const newFs = realpathSync(viewLink(sys.sim.root, pvName(FENCED), fencedAfter.node));
  assert.equal(spawnSync('sync', ['-f', newFs]).status, 0, `syncfs of ${newFs} on ${fencedAfter.node}`);

  // The volume's contents: the image itself, as the next node would mount it (a copy
  // taken with the replacement's file system frozen, as a storage snapshot).
  const read = readImageFile(imagePath(sys.sim.volumeDir(pvName(FENCED))), WRITER_FILE, newFs);
  assert.ok(read.clean, `e2fsck -fp finds the volume's file system clean: ${read.fsckOutput}`);
  const report = analyzeWriteRun({
    events: w.writer.events,
    faultsMs: [faultMs],
    content: read.content ?? Buffer.alloc(0),
  });
  const gap = report.clientWriteGaps[0];
  process.stderr.write(
    `storage-fencing: ${FENCED} NFSv3 clientWriteGap ${((gap?.gapMs ?? Number.NaN) / 1000).toFixed(2)} s; acked ${report.acked}, lost ${report.ackedWritesLost}, duplicates ${report.duplicates.length}, stale ${report.staleHandles}, errors ${JSON.stringify(report.errors)}\n`,
  );
  assert.deepEqual(report.violations, [], `${FENCED}: the client's view upholds every guarantee`);
  assert.equal(report.ackedWritesLost, 0, 'every acknowledged write is on the volume byte for byte');
  assert.equal(report.staleHandles, 0, 'no stale handle: the ext4 handles are the same on every node');
  assert.equal(report.duplicates.length, 0);
  assert.ok(gap?.firstAck, 'writes resumed after the freeze');

  // Never two ganesha processes running at once, a frozen one not counting as running:
  // the old one's window is cut at the freeze and goes on at the resume, until its exit.
  // The resumed one does run next to the replacement for a moment (no lease stops a
  // paused process's first steps on resume): that moment is checked below to come after
  // sim-1's access was revoked, when every write of it fails on the storage.
  const windows = track.windows();
  assert.ok(
    windows.some((x) => x.id === before.pod) && windows.some((x) => x.id === fencedAfter.pod),
    `windows of both servers were observed: ${windows.map((x) => x.id).join(', ')}`,
  );
  const running = windows.flatMap((x) =>
    x.id !== before.pod
      ? [x]
      : [
          { ...x, stopMonoMs: frozenAt, stopWall: 'freeze' },
          { ...x, id: `${x.id} (resumed)`, startMonoMs: healedAt, startWall: 'resume' },
        ],
  );
  const overlaps = overlappingWindows(running, monotonicMs());
  assert.deepEqual(
    overlaps
      .filter(([a, b]) => a.id !== `${before.pod} (resumed)` && b.id !== `${before.pod} (resumed)`)
      .map(
        ([a, b]) =>
          `${a.id}[${a.startWall}..${a.stopWall ?? 'open'}] x ${b.id}[${b.startWall}..${b.stopWall ?? 'open'}]`,
      ),
    [],
    `no two running ganesha servers of ${FENCED} at once but the resumed old one`,
  );
  const resumedRunMs = nfsExit.monoMs - healedAt;

  // The storage's own log: sim-1 revoked before the volume was granted elsewhere, and
  // every write through sim-1's view before that revoke, every one through the
  // replacement's after it: no write of the old server after the replacement's first.
  const storage = sys.sim.attacher.fencing;
  const log = storage?.log ?? [];
  assert.deepEqual(accessOrderViolations(log), []);
  const pair = revokeBeforeGrantElsewhere(log, pvName(FENCED), LOST);
  assert.ok(pair, `revoke on ${LOST} before a grant elsewhere: ${JSON.stringify(log)}`);
  assert.equal(pair.grant.node, fencedAfter.node);
  assert.ok(pair.revoke.monoMs < healedAt, "sim-1's access was revoked before it resumed");
  const stats = (await storage?.viewStats(pvName(FENCED))) ?? [];
  // The view the resumed node had: sim-1's last before its revoke.
  const oldView = stats.filter((v) => v.node === LOST && v.grantSeq < pair.revoke.seq).at(-1)?.stats;
  const newView = stats.find((v) => v.node === fencedAfter.node)?.stats;
  assert.ok(
    oldView && newView && oldView.writes > 0 && newView.writes > 0,
    `both views wrote: ${JSON.stringify(stats)}`,
  );
  // NB: the replacement's first write is its mount's (journal replay), before its grant is logged.
  assert.deepEqual(
    writesAcrossRevokes(
      log,
      pvName(FENCED),
      stats.flatMap((v) => (v.stats ? [{ node: v.node, grantSeq: v.grantSeq, ...v.stats }] : [])),
    ),
    [],
    `every write through sim-1's view came before its revoke, every one through ${fencedAfter.node}'s after it`,
  );
  process.stderr.write(
    `storage-fencing: revoke on ${LOST} -> grant on ${pair.grant.node}: ${(pair.grant.monoMs - pair.revoke.monoMs).toFixed(0)} ms; sim-1's view: ${oldView.writes} writes, the last ${((pair.revoke.monoMs - (oldView.lastWriteMonoMs ?? 0)) / 1000).toFixed(2)} s before its revoke, ${oldView.refused} requests refused after it (syncfs of sim-1's mount after the resume: exit ${oldSync.status}); the old ganesha ran ${resumedRunMs.toFixed(0)} ms after the resume, fenced, exit ${nfsExit.code ?? nfsExit.signal}\n`,
  );
  assert.deepEqual(handoffOrderViolations(sys.sim.attacher.events), []);

  // No-attach storage after the taint: the taint is trusted as "this machine is off", and
  // here it was a lie: sim-1 was only frozen. On resume its old server wrote after the
  // replacement's first record (until the healed kubelet killed the deleted pod): two
  // writers, which nothing but a real power-off (or storage that fences) prevents. This
  // is the documented trust in the taint (docs/operations.md), and it shows that the
  // check above does catch an old writer.
  const late = oldRecordsAfterNewFirst(OPEN, openBefore.pod, openAfter.pod);
  process.stderr.write(
    `storage-fencing: no-attach, tainted while only frozen: ${late.length} records of the old server after the replacement's first (seq ${late.map((x) => x.seq).join(',')})\n`,
  );
  assert.ok(late.length > 0, `${OPEN}: a frozen (not powered-off) node wrote on resume despite the taint`);
  assert.equal(
    log.some((e) => e.pv === pvName(OPEN)),
    false,
    'the no-attach volume never had a view',
  );
  process.stderr.write(`storage-fencing: scenario took ${((monotonicMs() - started) / 1000).toFixed(1)} s\n`);
});
