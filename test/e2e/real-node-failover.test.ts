/**
 * The first failover on real nodes (issue 12 item 7): the whole system of
 * dev/system/real-system.ts (a real control plane, two real nodes with the real
 * kubelet, containerd and runc, the project's images, the chart installed by helm) and
 * one share on the shipped NFS server (no spec.server; NFSv3, so the pod runs its
 * rpcbind) whose volume is a static PV of the testbed's CSI driver (attachRequired:
 * the real attach-detach controller and external-attacher move it, the manager's
 * handoff clears the lost node's status.volumesInUse). The share serves on one node
 * (its entrypoint logged `serving`: ganesha answered its NFS NULL probe inside the
 * pod); that node crashes (every process of it killed at once, its API connections
 * silent: RealNode.crash); the other node's manager fails the share over, and the
 * replacement on the other node serves. Asserted:
 *  - the failover timeline from status.lastFailover: each step present, in order,
 *    after the crash;
 *  - never two ganesha processes of the share at once: every ganesha.nfsd in a pod
 *    cgroup under either node's cgroup root, from the host's /proc
 *    (dev/system/real-share.ts GaneshaTracker; its windows never shorter than the
 *    process's life; test/unit/real-share-windows.test.ts proves the check fails on an
 *    overlap), both servers seen;
 *  - the Lease's holder is the new pod;
 *  - the NFS client's view across the crash: a libnfs NFSv3 writer in the surviving
 *    node's network namespace (e2e-support.ts RealNfsClient, RealNode.spawnInNetwork)
 *    writes through the Service's ClusterIP (that node's kube-proxy; before the crash
 *    over the node fabric to the other node's pod): writes resumed, 0 acknowledged
 *    writes lost (read back from the moved CSI volume), 0 duplicates, 0 stale handles;
 *  - the crashed node is not healed: the file ends with it down, and the system's stop
 *    runs every node's leftover check.
 * Printed: crash -> serving (the replacement's `serving` line), the clientWriteGap (with
 * the writer's errors and reconnects after the crash) and the timeline.
 * Cost: one system start (29 s quiet, 34-104 s with a load of 4-19) and one crash with
 * the client's checks (about 40 s): the file took 84-144 s on the loaded 2 cores.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { formatTimeline, PodTracker, timelineOf } from '../../dev/system/failover-facts.ts';
import { createRealNfsShare, GaneshaTracker, podLog, realVolumeHandle } from '../../dev/system/real-share.ts';
import { shareStatus } from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE } from '../../dev/system/system.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import {
  E2E_NFS,
  type ReadyRealPod,
  RealNfsClient,
  readyRealPod,
  realLogLineWall,
  useRealSystem,
} from './e2e-support.ts';

const system = useRealSystem({ nodes: 2, cluster: { attachDetachReconcileSyncPeriod: '2s' } });
const SHARE = 'realshare';
// Generous for a loaded 2-core machine: D 6 s + the replacement's start is ~10-15 s.
const SERVING_WITHIN_MS = 120_000;

let ganesha: GaneshaTracker | undefined;
after(async () => {
  await ganesha?.stop();
});

test('node crash on real nodes: the manager fails the share over, the NFS client writes on to the replacement (nothing acknowledged lost, no stale handle); never two ganesha; the lease held by the new pod', {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  ganesha = new GaneshaTracker(sys, SHARE);
  const t0 = performance.now();
  await createRealNfsShare(sys, SHARE, { nfs: E2E_NFS });
  const before = await eventually(
    `${SHARE}: a Ready pod whose server logged serving`,
    async () => {
      const ready = await readyRealPod(sys, SHARE);
      return ready && realLogLineWall(sys, ready.object, 'serving') !== undefined ? ready : undefined;
    },
    SERVING_WITHIN_MS,
    200,
  );
  t.diagnostic(
    `${before.pod} serving on ${before.node} ${((performance.now() - t0) / 1000).toFixed(1)} s after the ShareManager's create`,
  );
  await eventually(`ganesha of ${before.pod} seen in /proc`, async () =>
    ganesha?.windows().some((w) => w.id === before.pod && w.stopMonoMs === undefined) ? true : undefined,
  );
  // Under the preset's read-only root filesystem ganesha must still find a writable
  // /tmp for its OFD-lock test, or it serves with byte-range locking off (FSAL_VFS
  // "disabling lock support": every client LOCK refused).
  const serverLog = podLog(sys.node(before.node), before.object, 'server');
  assert.doesNotMatch(
    serverLog,
    /Could not create file \/tmp\/ganesha\.nfsd\.locktest/,
    'ganesha ran its OFD-lock test (lock support on)',
  );
  const other = sys.nodes.find((n) => n.name !== before.node);
  assert.ok(other, 'a second node');
  // The NFS client on the node that will survive, through the ClusterIP: before the
  // crash its writes cross the fabric to the server on the other node.
  const client = await RealNfsClient.start(sys, SHARE, other.name);
  await client.waitResumed(60_000);

  const pods = new PodTracker(sys, SHARE);
  const crashAt = new Date();
  const crashMono = client.markFault();
  await sys.node(before.node).crash();
  let after: ReadyRealPod & { servingWall: number };
  try {
    after = await eventually(
      `${SHARE}: a replacement Ready and serving`,
      async () => {
        const ready = await readyRealPod(sys, SHARE, before.pod);
        const servingWall = ready ? realLogLineWall(sys, ready.object, 'serving') : undefined;
        return ready && servingWall !== undefined ? { ...ready, servingWall } : undefined;
      },
      SERVING_WITHIN_MS,
      200,
    );
    await client.waitResumed(SERVING_WITHIN_MS);
  } finally {
    await pods.stop();
  }
  const { servingWall } = after;
  await ganesha.stop();
  assert.equal(after.node, other.name, 'the replacement runs on the other node');

  const status = await shareStatus(sys, SHARE);
  const lf = { ...(status.lastFailover ?? {}), ...pods.firstFailover };
  const attach = (await sys.csi.attachments(realVolumeHandle(SHARE))).find((a) => a.node === after.node);
  const steps = timelineOf({
    share: SHARE,
    crashedNode: before.node,
    crashAt,
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
  }).map((s) => ({
    ...s,
    source: s.source
      .replace('simulator', 'RealNode.crash')
      .replace('sim CSI attacher', 'CSI controller record'),
  }));
  process.stderr.write(`${SHARE}: timeline since the crash (real nodes)\n${formatTimeline(steps)}\n`);
  const crashToServingS = (servingWall - crashAt.getTime()) / 1000;
  process.stderr.write(
    `real-node failover: crash of ${before.node} -> ${after.pod} serving on ${after.node}: ${crashToServingS.toFixed(2)} s\n`,
  );
  t.diagnostic(`crash -> serving ${crashToServingS.toFixed(2)} s`);
  // Where the replacement's start went on the real kubelet (attach to acquisition).
  const replacement = await sys.core.readNamespacedPod(
    { namespace: SHARES_NAMESPACE, name: after.pod },
    withDeadline(5_000),
  );
  const since = (ms: number | undefined) =>
    ms === undefined || Number.isNaN(ms) ? '?' : `${((ms - crashAt.getTime()) / 1000).toFixed(2)} s`;
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

  // The manager's own record of the failover, each step after the crash and in order.
  const order = [
    'detectedAt',
    'markedAt',
    'podDeletedAt',
    'detachedAt',
    'replacementCreatedAt',
    'completedAt',
  ] as const;
  let prev = crashAt.getTime() - 1_000; // the status times are the manager's, in whole ms; one host clock
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

  const windows = ganesha.windows();
  const old = windows.filter((w) => w.id === before.pod);
  const fresh = windows.filter((w) => w.id === after.pod);
  assert.equal(old.length, 1, `one ganesha of ${before.pod}: ${JSON.stringify(windows)}`);
  assert.equal(fresh.length, 1, `one ganesha of ${after.pod}: ${JSON.stringify(windows)}`);
  assert.deepEqual(
    overlappingWindows(windows, monotonicMs()).map(
      ([a, b]) =>
        `${a.id}[${a.startWall}..${a.stopWall ?? 'open'}] x ${b.id}[${b.startWall}..${b.stopWall ?? 'open'}]`,
    ),
    [],
    `no two ganesha processes of ${SHARE} alive at once`,
  );
  const oldStop = old[0]?.stopMonoMs;
  assert.ok(oldStop !== undefined && oldStop >= crashMono, "the old ganesha ended with its node's crash");
  // The client's view across the crash: writes resumed, nothing acknowledged lost (read
  // back from the moved CSI volume), no duplicate, no stale handle.
  const [gapS] = client.assertClientView(`${SHARE} crash`);
  await client.stop();
  t.diagnostic(`clientWriteGap ${gapS?.toFixed(2)} s`);

  const cover = ganesha.coverage();
  process.stderr.write(
    `${SHARE}: ganesha windows ${windows.map((w) => `${w.id}[${w.startWall}..${w.stopWall ?? 'open'}]`).join(', ')}; old stop to new start ${((fresh[0]?.startMonoMs ?? 0) - oldStop).toFixed(0)} ms; ${cover.samples} samples, longest gap ${cover.maxGapMs.toFixed(0)} ms\n`,
  );
});
