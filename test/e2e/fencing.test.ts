/**
 * Fencing on the whole system (3 simulated nodes, a manager on each, the chart installed
 * by helm), default lease timings (D 6 s, R 2 s, T 4 s): the node serving a share is cut
 * from the API server, a manager fails the share over, and the old server must stop
 * before the replacement serves — by the default `pod` fence (no spec.fence; for the NFS
 * server that runs on real nodes now, see below), also when the server ignores SIGTERM (SIGKILL after the grace), or, when the fence cannot reach
 * the server, by the kubelet's liveness backstop.
 * Which server where:
 *  - `nofence-a` runs the shipped NFS server (no spec.server: ganesha, NFSv3 only, see
 *    E2E_NFS in e2e-support.ts; its fence and check are the preset ones) with a real NFS
 *    client writing through the Service address: after its failover the client's
 *    writes resumed, 0 acknowledged writes lost (read back byte for byte), 0
 *    duplicates, 0 stale handles, never two ganesha processes alive at once, and its
 *    clientWriteGap is printed. Its partition (stall) scenario, the preset pod fence
 *    stopping the partitioned ganesha before the replacement serves, moved to real
 *    nodes on 2026-12-01 with every check it made (test/e2e/real-node-failover.test.ts:
 *    the agent's fence, why the server stopped, stopped before the new one started,
 *    the client's view, the old pod gone after the heal);
 *  - `miss-b` and `stubborn-c` keep the toy record server (dev/share-server): they are
 *    hostile servers ganesha cannot play — one whose fence names no running process (so
 *    only the kubelet's backstop stops it), one that ignores SIGTERM — and the toy's
 *    serving-window log says how each stopped (its stop line, or none when killed).
 *    Their checks: windows never overlap, no acknowledged record lost.
 * Last, on the same cluster (its nodes all healed by then), on `nofence-a`: the share's
 * node crashes and its replacement is bound to a node whose kubelet starts no new pod
 * (SimNode holdNewPods), and that node crashes too before the replacement's agent could
 * acquire; the managers must fail over again (ReplacementLost) onto the third node,
 * never two servers at once, and the NFS client writes again with nothing lost. The
 * replacement's node is chosen as the one whose manager does not own the failover
 * (every node cordoned until then), so the owner survives and the time does not include
 * the 30 s takeover timeout (that path, the owner dying with the replacement's node, is
 * the takeover already tested plus the follower rule in failover-driver.ts; it is not
 * run here).
 * NB: kube-controller-manager runs with --attach-detach-reconcile-sync-period=2s, so the
 * times measure leasehold, not that controller's 1 min default sync.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { waitReadyNfsPod } from '../../dev/system/nfs-share.ts';
import {
  createShare,
  deleteShare,
  pvName,
  sharePods,
  shareStatus,
  waitServing,
} from '../../dev/system/shares.ts';
import { sleep } from '../../lib/clock.ts';
import { ANNOTATION_DELINQUENT, ANNOTATION_FAILOVER_BY } from '../../lib/lease-record.ts';
import { eventually } from '../support/cluster.ts';
import {
  assertNoOverlap,
  assertRecordsKept,
  eventsOf,
  faultAndWaitForReplacement,
  leaseOf,
  NfsClientShare,
  setUnschedulable,
  useSystem,
  waitPodForgotten,
} from './e2e-support.ts';

const system = useSystem({ nodes: 3, cluster: { attachDetachReconcileSyncPeriod: '2s' } });

let nfsShare: NfsClientShare | undefined;
const nofenceA = (): NfsClientShare => {
  assert.ok(nfsShare, 'nofence-a started');
  return nfsShare;
};

test('shares start and serve', { timeout: 120_000 }, async () => {
  nfsShare = await NfsClientShare.create(system(), 'nofence-a');
  await createShare(system(), 'miss-b', { fence: { action: 'signal', process: 'no-such-server' } });
  await createShare(system(), 'stubborn-c', { serverArgs: ['--sigterm-delay=never'] });
  await nfsShare.startWriting(90_000);
  await waitServing(system(), 'miss-b', 90_000);
  await waitServing(system(), 'stubborn-c', 90_000);
  await sleep(1_000); // some records on each volume
});

/** Partitions the (toy) share's node, waits for the replacement, returns the old and new windows. */
async function partitionAndFailOver(share: string) {
  const sys = system();
  const r = await faultAndWaitForReplacement(
    sys,
    share,
    async (node) => sys.sim.node(node).partition('stall'),
    90_000,
    'partitioned from the API server',
  );
  const windows = sys.sim.servingWindows(pvName(share));
  const old = windows.find((w) => w.id === r.before.pod);
  const fresh = windows.find((w) => w.id === r.after.pod);
  assert.ok(old && fresh, 'a serving window of the old and of the new pod');
  assert.ok(old.stopMonoMs !== undefined, 'the old server stopped while its node was cut off');
  const gapMs = fresh.startMonoMs - old.stopMonoMs;
  const exit = sys.sim.exits.find((e) => e.pod === r.before.pod && e.container === 'server');
  process.stderr.write(
    `${share}: partition to replacement serving ${r.toServingS.toFixed(2)} s; old server stopped ${gapMs.toFixed(0)} ms before the new one started (exit ${JSON.stringify(exit)})\n`,
  );
  assert.ok(gapMs > 0, `the old server stopped before the new one started (gap ${gapMs.toFixed(0)} ms)`);
  sys.sim.node(r.before.node).heal();
  // The healed kubelet drops the deleted pod (this replaced a fixed 3 s wait).
  await waitPodForgotten(sys, r.before.node, r.before.pod, 30_000);
  assertNoOverlap(sys, share);
  await assertRecordsKept(r.after, r.acked);
  return { r, old, fresh };
}

test('signals made to fail (the fence names no running process): the kubelet backstop stops the server in time', {
  timeout: 180_000,
}, async () => {
  const { r, old } = await partitionAndFailOver('miss-b');
  // The agent's fence found nothing to signal; what stopped the server is the liveness
  // probe on the agent's /readyz, run by the (partitioned but alive) kubelet.
  const sys = system();
  const fenceLine = sys.sim.exits.filter((e) => e.pod === r.before.pod && e.container === 'agent').at(0);
  assert.ok(fenceLine, 'the agent exited (fenced)');
  assert.equal(fenceLine.code, 1, 'the agent fenced (exit 1)');
  assert.match(old.reason ?? '', /SIGTERM/, "the kubelet's kill (SIGTERM first)");
});

test('a server that ignores SIGTERM: the pod fence SIGKILLs it after the grace, before its replacement serves', {
  timeout: 180_000,
}, async () => {
  const { r, old } = await partitionAndFailOver('stubborn-c');
  const exit = system().sim.exits.find((e) => e.pod === r.before.pod && e.container === 'server');
  assert.equal(exit?.signal, 'SIGKILL', 'it ignored SIGTERM: only SIGKILL stopped it');
  assert.match(
    old.reason ?? '',
    /exit observed by the kubelet \(SIGKILL\)/,
    'no stop line: closed at the kill',
  );
});

test("the replacement's node crashes before its agent acquired: failed over again onto the third node; never two servers", {
  timeout: 240_000,
}, async () => {
  const sys = system();
  const nfs = nofenceA();
  const share = nfs.share;
  // Lean: only this share fails over.
  await deleteShare(sys, 'miss-b');
  await deleteShare(sys, 'stubborn-c');
  const before = await waitReadyNfsPod(sys, share, 60_000);
  const cordon = (node: string, unschedulable: boolean) => setUnschedulable(sys, node, unschedulable);
  const names = sys.sim.nodes.map((n) => n.name);
  // Deterministic: no replacement is bound until we choose y (the node whose manager does
  // not own the failover, so the owner survives y's crash), and it never starts there.
  for (const node of names) await cordon(node, true);
  let y = '';
  try {
    nfs.markFault();
    await sys.sim.node(before.node).crash();
    // NB: delinquent, not just failover-by: the annotation of the first test's failover
    // stays on the lease after the replacement acquired.
    const owner = await eventually(
      `a manager marks the lease of ${share}`,
      async () => {
        const annotations = (await leaseOf(sys, share)).metadata?.annotations ?? {};
        return annotations[ANNOTATION_DELINQUENT] ? annotations[ANNOTATION_FAILOVER_BY] : undefined;
      },
      60_000,
    );
    const managers = await sys.managerPods();
    const z = [...managers].find(([, pod]) => pod === owner)?.[0] ?? '';
    y = names.find((n) => n !== before.node && n !== z) ?? '';
    assert.ok(z !== before.node && y !== '', `the owner ${owner} runs on a surviving node (${z})`);
    sys.sim.node(y).holdNewPods();
    await cordon(y, false);
    const first = await eventually(
      `the first replacement of ${share} is bound to ${y}`,
      async () =>
        (await sharePods(sys, share)).find((p) => p.metadata?.name !== before.pod && p.spec?.nodeName === y),
      60_000,
    );
    const firstPod = first.metadata?.name ?? '';
    await cordon(z, false);
    const lostAt = nfs.markFault();
    await sys.sim.node(y).crash();
    const after = await waitReadyNfsPod(sys, share, 120_000, before.pod).catch(async (err: unknown) => {
      const pods = (await sharePods(sys, share).catch(() => [])).map(
        (p) => `${p.metadata?.name}@${p.spec?.nodeName || '-'}:${p.status?.phase}`,
      );
      throw new Error(`${String(err)}; pods of ${share}: ${pods.join(', ')}`, { cause: err });
    });
    await nfs.waitResumed(90_000);
    const window = nfs.tracker.windows().find((w) => w.id === after.pod);
    assert.ok(window, `a server window of ${after.pod}`);
    const toServingS = (window.startMonoMs - lostAt) / 1000;
    const status = await shareStatus(sys, share);
    const lf = status.lastFailover ?? {};
    process.stderr.write(
      `replacement lost: ${firstPod} on ${y} crashed before acquiring; ${after.pod}'s server started on ${after.node} ${toServingS.toFixed(2)} s after that crash, the NFS client wrote again ${nfs.resumed()?.afterS.toFixed(2)} s after it (failover by ${lf.by})\n`,
    );
    assert.equal(after.node, z, 'the third node serves');
    assert.equal(lf.by, owner, 'the surviving owner went round again (no takeover)');
    assert.notEqual(after.pod, firstPod);
    // Expected ~D + the 2 s heartbeat + a normal failover step chain (~12 s); generous.
    assert.ok(toServingS < 45, `lost replacement's node crash to serving ${toServingS.toFixed(2)} s < 45 s`);
    assert.equal(lf.reason, 'ReplacementLost');
    assert.equal(lf.lostPod, firstPod);
    assert.equal(lf.lostNode, y);
    const lost = (await eventsOf(sys, 'ReplacementLost')).filter((e) => e.startsWith(`${share}:`));
    assert.ok(lost.length >= 1, 'a ReplacementLost event');
    assert.match(lost[0] ?? '', new RegExp(`${firstPod} on node ${y}`));
    assert.equal((await leaseOf(sys, share)).spec?.holderIdentity, after.pod);
    assert.equal(
      nfs.tracker.windows().filter((w) => w.id === firstPod).length,
      0,
      'the lost replacement never ran its server',
    );
    // Both crashes: one stall of the client (its gap is printed per crash).
    nfs.assertClientView('replacement lost');
  } finally {
    for (const node of names) await cordon(node, false).catch(() => undefined);
  }
});
