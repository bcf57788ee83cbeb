/**
 * Node loss, the volume handoff and the out-of-service taint on real nodes (issue 12;
 * what volume-handoff, node-loss and out-of-service.test.ts ran on simulated nodes):
 * one real-node system (dev/system/real-system.ts: two real nodes, the real kubelet,
 * containerd, runc and kube-proxy, the project's images, the chart by helm) on
 * kube-controller-manager's DEFAULT --attach-detach-reconcile-sync-period (1 min);
 * the testbed's node timings otherwise (kubelet heartbeat every 2 s, node-monitor grace
 * 8 s: dev/node/config.ts, dev/cluster). Every share runs the shipped NFS server
 * (NFSv3) on a static CSI volume of the testbed driver (attachRequired: the real
 * attach-detach controller (ADC) and external-attacher move it).
 *  1. Four shares (rh-a..rh-d) and an unrelated pod with its own CSI volume on real-1.
 *  2. crash real-1 (chart defaults, volume handoff volumes-in-use), node-loss and
 *     volume-handoff's claims together: every share's volume attached to real-2 well
 *     under the ADC's 1 min sync (its new VolumeAttachment within 25 s; without the
 *     handoff the ADC waits 6 min), each share serving again from real-2 and rh-a's NFS
 *     client (libnfs in real-2's netns, through the ClusterIP) writing again within 90 s
 *     (the real kubelet's start of four pods on the loaded machine; figures printed),
 *     nothing acknowledged lost; each share's status.lastFailover
 *     steps in order, naming the lost pod and node, volumeHandoff the volumesInUse one;
 *     no storm pause: each share marked delinquent within 5 s of its detection (a pause
 *     holds it for the guard's window), no StormGuardActive event, no `storm guard`
 *     line in the surviving manager's log, one LeaseExpired per share; the handoff order
 *     from a VolumeAttachment watch (API order): each share's old VolumeAttachment gone
 *     before its new one was created (handoffOrderViolations); the unrelated pod not
 *     deleted, its VolumeAttachment not deleted, its volume still in real-1's
 *     status.volumesInUse (ours gone), no out-of-service taint. Then the reboot.
 *  3. partition real-2 (now serving rh-a alone; the other three deleted), `close`, then
 *     heal: rh-a moves once to real-1, the lone share's figure is the reference the
 *     four of the crash are held to (each replacement created at most 10 s later after
 *     its fault than the lone one's: the manager's part; a storm pause holds it 15-30 s;
 *     the serving figures printed beside it); after the heal the
 *     healed kubelet drops the old pod and posts its status without the volume, the
 *     replacement still serves, the volume attached to real-1 alone, the old pod never
 *     ran ganesha again.
 *  4. storage WITHOUT an attach step (the testbed driver's second name, CSIDriver
 *     attachRequired: false, dev/csi; a plain directory, no VolumeAttachment): rh-a's
 *     StorageFencing=True/StorageFences (the fencing storage, from its failovers above);
 *     rh-open serving on real-2 with an NFS client on real-1; freeze real-2 longer than D:
 *     with the default LEASEHOLD_NONFENCING_STORAGE=require-node-down it WAITS
 *     (StorageFencing=False/AwaitingNodeDown naming attachRequired false and the taint,
 *     the AwaitingNodeDown event, for 6 s no replacement pod, the lease unmarked and
 *     still the frozen pod's, no other ganesha); then the test taints real-2
 *     out-of-service as an operator who powered it off would: it fails over
 *     (StorageFencing=False/NodeDown) to real-1, the Lease the replacement's, the client
 *     writes again; then the frozen machine is powered off (RealNode.crash of the frozen
 *     node: killed while frozen, nothing of it runs again; the taint's word made true:
 *     a thaw instead would run the old ganesha next to the replacement, the hazard the
 *     gate leaves to the operator: docs/testing.md),
 *     rebooted, untainted, a manager ready there again. Never two ganesha; the client's
 *     view (nothing acknowledged lost).
 *  5. `helm upgrade` to manager.outOfServiceTaint=true, nodeLeaseGrace=8s (the node-monitor
 *     grace) and volumeHandoff=none, then crash real-1: the manager taints it
 *     node.kubernetes.io/out-of-service=nodeshutdown:NoExecute (with its mark) only after
 *     it was seen NotReady, the ADC force-detaches (the old VolumeAttachment deleted after
 *     the taint: with `none` nothing of ours touches it, and the ADC alone would wait its
 *     6 min), the client writes again within 60 s; heal: Ready, taint and mark removed,
 *     OutOfServiceTaintRemoved, a manager runs there again. NB: `none`, not the bench's
 *     leasehold-oos (`volume-attachment`): there the ADC's 1 min sync can free the volume
 *     before the taint is due, the failover ends and no taint comes (out-of-service.test.ts
 *     repeated the crash up to 3 times for it; each repeat costs a reboot here); with
 *     `none` only the taint moves the volume within 6 min, so one crash always tests it.
 * Throughout: never two ganesha processes of a share running at once (one GaneshaTracker,
 * from the host's /proc, its windows split by pod name; test/unit/real-share-windows.test.ts proves the check
 * fails on an overlap); the Lease held by the replacement.
 * Not here: Kubernetes' real-world node timings (kubelet heartbeat 10 s, node-monitor
 * grace 40 s: the simulator's node-loss.test.ts had them; `bench -- failover` runs
 * its crashes on a 40 s grace). The managers' own nodeLeaseGrace is the chart's 40 s in
 * steps 2-3, so to them the crashed node looks healthy throughout, which is what the
 * storm guard's by-node rule is about (under the old rule, 4 of 4 leases stale on
 * healthy-looking nodes paused the failovers).
 * Cost (three passing runs at a load of 10-14): the system start 38-81 s, the four
 * shares 8-17 s, the crash with its reboot 21-64 s, the partition 15-38 s, the helm
 * upgrade 6-28 s (the old managers deleted at once; 37.9 s by the rolling update) and
 * the out-of-service crash with its heal 27-35 s; the file 190-224 s. Scenario 4 (the
 * attach-less share, three runs at a load of 12-14): 28.8, 33.0 and 30.3 s (serving
 * 4.1-6.0 s after its create, AwaitingNodeDown 5.6-5.9 s after the freeze, the 6 s
 * hold, serving 2.2-4.5 s after the taint, the reboot and untaint 6.9-7.9 s); the
 * file 206 and 220 s in the two passing runs with it (173 and 190 s without it).
 * 2026-12-02 (trying to trim it): the file 183 s at a load of 4-9 (start 50.3 s, shares
 * 9.2, crash 24.1, partition 17.3, scenario 4 28.4, scenario 5 34.7 s); the four shares
 * are now created together (their start is the kubelet's: 20-33 s at a load of 16-24).
 * Nothing else here is a wait of this file's that a scenario does not need: the reboots
 * are the next scenario's precondition, the 6 s hold must outlast NotReady, and the helm
 * upgrade is what step 5 tests (its values would break steps 2-4 at install). Letting
 * step 4's manager restart overlap step 5's upgrade was tried and taken back: no
 * measurable gain under load (upgrade 20.7-51.2 s at 16-24) and one run at 24 whose
 * step 5 found rh-a moved to real-2 before its crash, unexplained. After: 177 s (load
 * 4-14, start 47.5 s) and 157 s (load 2-6, start 32.2 s; scenarios 41.2 with the start,
 * 20.7, 14.4, 28.8, 31.8 s): the same as before within the machine's noise.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import type { V1VolumeAttachment } from '@kubernetes/client-node';
import { managerRestarts, waitManagerRestarted } from '../../bench/failover/real-node-runs.ts';
import { helm } from '../../dev/helm/helm.ts';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import { CHART_DIR } from '../../dev/system/helm-install.ts';
import {
  createRealNfsShare,
  createRealVolume,
  GaneshaTracker,
  podLog,
  realPvName,
  realVolumeHandle,
} from '../../dev/system/real-share.ts';
import type { RealSystem } from '../../dev/system/real-system.ts';
import {
  MANAGER_LABEL,
  managerPodsByNode,
  RELEASE,
  SHARES_NAMESPACE,
  SYSTEM_NAMESPACE,
} from '../../dev/system/real-system.ts';
import { shareStatus } from '../../dev/system/shares.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { ANNOTATION_DELINQUENT, LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { eventually } from '../support/cluster.ts';
import { type AttachEvent, handoffOrderViolations } from '../support/handoff-order.ts';
import { startListWatch } from '../support/list-watch.ts';
import {
  E2E_NFS,
  REAL_SERVING_WITHIN_MS,
  type ReadyRealPod,
  RealNfsClient,
  readyRealPod,
  realLogLineWall,
  servingRealPod,
  useRealSystem,
  waitPodProcessesGone,
} from './e2e-support.ts';
import { RealKernelClient } from './kernel-client-support.ts';

// ADC sync: the cluster's default, 1m; the attach-less driver for scenario 4.
const system = useRealSystem({ nodes: 2, noAttachDriver: true });
const NFS = 'rh-a';
const SHARES = [NFS, 'rh-b', 'rh-c', 'rh-d'];
const BYSTANDER = 'rh-bystander';
const LOST = 'real-1';
const OTHER = 'real-2';
/**
 * Crash to the volume's new VolumeAttachment: "well under the ADC's 1 min sync" (without
 * a handoff the ADC waits 6 min). Measured 7.2 s with four shares at a load of 10.
 */
const HANDOFF_BOUND_S = 25;
/**
 * Crash to serving and to the client writing again: the replacement's start on a real
 * kubelet is the loaded machine's (four pods at once: 18.5 s at a load of 10, 57.6 s in a
 * run at a load of 4-10, the attach at 11 s in both).
 */
const BOUND_S = 90;
/** The out-of-service crash: the taint comes ~8 s (grace) + D after the node's last heartbeat. */
const OOS_BOUND_S = 60;
/** A storm pause holds a failover between detection and its mark for the guard's window. */
const MARK_WITHIN_MS = 5_000;
/**
 * How much later than the lone share's each of the crashed node's four may have its
 * replacement created (the manager's part: a storm pause holds it 15-30 s, the guard's
 * rejudge at half its 30 s window). The kubelet's start after it is the loaded machine's
 * and is printed, not compared.
 */
const LONE_SLACK_S = 10;
const TAINT_KEY = 'node.kubernetes.io/out-of-service';
const MARK = 'leasehold.dev/out-of-service-by';
const SM = { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers' };

const uniqueName = (sys: RealSystem, share: string) =>
  `kubernetes.io/csi/${sys.csi.driverName}^${realVolumeHandle(share)}`;

/**
 * Every VolumeAttachment's creation and deletion in the order one watch delivered
 * them (the API server's resourceVersion order), as handoffOrderViolations reads them.
 * A relist adds what it finds new and deletes what it misses.
 */
class AttachmentLog {
  readonly events: AttachEvent[] = [];
  private readonly live = new Map<string, V1VolumeAttachment>();
  private readonly watch;
  constructor(sys: RealSystem) {
    const storage = sys.kc.makeApiClient(k8s.StorageV1Api);
    this.watch = startListWatch<V1VolumeAttachment>({
      kubeConfig: sys.kc,
      what: 'VolumeAttachments',
      path: '/apis/storage.k8s.io/v1/volumeattachments',
      list: async () => {
        const list = await storage.listVolumeAttachment({}, withDeadline(10_000));
        return { items: list.items, resourceVersion: list.metadata?.resourceVersion ?? '' };
      },
      onList: (items) => {
        const names = new Set(items.map((va) => va.metadata?.name ?? ''));
        for (const [name, va] of this.live) if (!names.has(name)) this.note('deleted', va);
        for (const va of items) if (!this.live.has(va.metadata?.name ?? '')) this.note('created', va);
      },
      onEvent: (type, va) => {
        if (type === 'DELETED') this.note('deleted', va);
        else if (!this.live.has(va.metadata?.name ?? '')) this.note('created', va);
      },
    });
  }
  private note(event: 'created' | 'deleted', va: V1VolumeAttachment): void {
    const name = va.metadata?.name ?? '';
    if (event === 'created') this.live.set(name, va);
    else this.live.delete(name);
    this.events.push({
      seq: this.events.length,
      event,
      volumeAttachment: name,
      pv: va.spec.source.persistentVolumeName ?? '',
      node: va.spec.nodeName,
      monoMs: monotonicMs(),
      wall: new Date(),
    });
  }
  of(pv: string): AttachEvent[] {
    return this.events.filter((e) => e.pv === pv);
  }
  /** The nodes `pv` has a VolumeAttachment on now. */
  nodesOf(pv: string): string[] {
    return [...this.live.values()]
      .filter((va) => va.spec.source.persistentVolumeName === pv)
      .map((va) => va.spec.nodeName);
  }
  stop(): void {
    this.watch.stop();
  }
}

let attachments: AttachmentLog | undefined;
/**
 * Every ganesha of this file's shares (rh-a..rh-d), one tracker for all of them (one
 * /proc scan per sample: `owns` takes every pod labelled for an `rh-` share); a
 * share's windows are those of its pods (`<share>-…`).
 */
let ganesha: GaneshaTracker | undefined;
after(async () => {
  attachments?.stop();
  await ganesha?.stop();
});
const vaLog = (): AttachmentLog => {
  assert.ok(attachments, 'the VolumeAttachment log runs');
  return attachments;
};

/** No two ganesha of `share` ever running at once; its windows. */
function assertNeverTwo(share: string, label: string) {
  const windows = (ganesha?.windows() ?? []).filter((w) => w.id.startsWith(`${share}-`));
  const fmt = (w: (typeof windows)[number]) => `${w.id}[${w.startWall}..${w.stopWall ?? 'open'}]`;
  assert.deepEqual(
    overlappingWindows(windows, monotonicMs()).map(([a, b]) => `${fmt(a)} x ${fmt(b)}`),
    [],
    `${label}: no two ganesha processes of ${share} running at once`,
  );
  return windows;
}

/** Events of `reason` on the ShareManagers (the shares namespace). */
async function eventsAll(sys: RealSystem, reason: string): Promise<k8s.CoreV1Event[]> {
  const list = await sys.core.listNamespacedEvent(
    { namespace: SHARES_NAMESPACE, fieldSelector: `reason=${reason}` },
    withDeadline(10_000),
  );
  return list.items;
}

async function volumesInUse(sys: RealSystem, node: string): Promise<string[]> {
  return (await sys.core.readNode({ name: node }, withDeadline(5_000))).status?.volumesInUse ?? [];
}

const FAILOVER_STEPS = [
  'detectedAt',
  'markedAt',
  'podDeletedAt',
  'detachedAt',
  'replacementCreatedAt',
  'completedAt',
] as const;

/** status.lastFailover of `share`: each step set, after the fault and in order, naming the pods and node. */
async function assertFailoverRecord(
  sys: RealSystem,
  share: string,
  f: { before: ReadyRealPod; after: ReadyRealPod; faultWall: number },
): Promise<Record<string, string | undefined>> {
  const lf = (await shareStatus(sys, share)).lastFailover ?? {};
  let prev = f.faultWall - 1_000; // the manager's times, whole ms; one host clock
  for (const k of FAILOVER_STEPS) {
    const v = lf[k];
    assert.ok(v, `${share}: status.lastFailover.${k} is set: ${JSON.stringify(lf)}`);
    assert.ok(Date.parse(v) >= prev, `${share}: lastFailover.${k} (${v}) not before the step before it`);
    prev = Date.parse(v);
  }
  assert.equal(lf.lostPod, f.before.pod, `${share}: lastFailover names the lost pod`);
  assert.equal(lf.lostNode, f.before.node, `${share}: and the lost node`);
  assert.equal(lf.replacementPod, f.after.pod, `${share}: and the replacement`);
  const lease = await sys.kc
    .makeApiClient(k8s.CoordinationV1Api)
    .readNamespacedLease({ namespace: SHARES_NAMESPACE, name: share }, withDeadline(5_000));
  assert.equal(lease.spec?.holderIdentity, f.after.pod, `${share}: the Lease's holder is the new pod`);
  return lf;
}

/** The old VolumeAttachment of `share` on `from` deleted before its new one on another node was created. */
function assertHandedOver(
  share: string,
  from: string,
  sinceSeq: number,
): { gone: AttachEvent; created: AttachEvent } {
  const events = vaLog()
    .of(realPvName(share))
    .filter((e) => e.seq >= sinceSeq);
  const gone = events.find((e) => e.node === from && e.event === 'deleted');
  const created = events.find((e) => e.node !== from && e.event === 'created');
  assert.ok(
    gone && created,
    `${share}: the old attachment deleted and a new one created: ${JSON.stringify(events)}`,
  );
  assert.ok(
    gone.seq < created.seq,
    `${share}: old VolumeAttachment gone (#${gone.seq}) before the new one (#${created.seq})`,
  );
  return { gone, created };
}

const sinceS = (wall: number | string | undefined, fromWall: number) =>
  wall === undefined ? Number.NaN : ((typeof wall === 'string' ? Date.parse(wall) : wall) - fromWall) / 1000;

/** Where a replacement's start went on the real kubelet (s since the fault), and its pod's events. */
async function describeReplacement(
  sys: RealSystem,
  share: string,
  pod: string,
  faultWall: number,
): Promise<string> {
  const p = await sys.core.readNamespacedPod({ namespace: SHARES_NAMESPACE, name: pod }, withDeadline(5_000));
  const at = (x: Date | string | number | undefined) =>
    x === undefined ? '?' : sinceS(new Date(x).getTime(), faultWall).toFixed(2);
  const started = (name: string) => {
    const c = [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])].find(
      (x) => x.name === name,
    );
    return at(c?.state?.running?.startedAt ?? c?.state?.terminated?.startedAt);
  };
  const attach = (await sys.csi.attachments(realVolumeHandle(share))).find(
    (a) => a.node === p.spec?.nodeName,
  );
  const events = await sys.core.listNamespacedEvent(
    { namespace: SHARES_NAMESPACE, fieldSelector: `involvedObject.name=${pod}` },
    withDeadline(5_000),
  );
  const evs = events.items
    .map(
      (e) =>
        `${at(e.eventTime ?? e.firstTimestamp)} ${e.reason}${(e.count ?? 1) > 1 ? ` x${e.count}` : ''}: ${(e.message ?? '').slice(0, 160)}`,
    )
    .join(' | ');
  return `${pod}: created ${at(p.metadata?.creationTimestamp)}, scheduled ${at(p.status?.conditions?.find((c) => c.type === 'PodScheduled')?.lastTransitionTime)}, attached (driver) ${attach ? at(new Date(attach.atMs)) : '?'}, agent started ${started('agent')}, lease acquired ${at(realLogLineWall(sys, p, 'lease acquired', 'agent'))}, server started ${started('server')}; events: ${evs}`;
}

async function deleteShare(sys: RealSystem, share: string): Promise<void> {
  await sys.kc
    .makeApiClient(k8s.CustomObjectsApi)
    .deleteNamespacedCustomObject({ ...SM, namespace: SHARES_NAMESPACE, name: share }, withDeadline(10_000));
}

test('four shares and an unrelated pod with its own CSI volume run on real-1', {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  attachments = new AttachmentLog(sys);
  ganesha = new GaneshaTracker(
    sys,
    'rh',
    100,
    (pod) => pod.metadata?.labels?.[LABEL_SHARE_MANAGER]?.startsWith('rh-') === true,
  );
  const t0 = performance.now();
  // Together: the creates' API round trips overlap, the first pods start meanwhile.
  const [claim] = await Promise.all([
    createRealVolume(sys, BYSTANDER),
    Promise.all(SHARES.map((share) => createRealNfsShare(sys, share, { nfs: E2E_NFS, node: LOST }))),
  ]);
  await sys.core.createNamespacedPod(
    {
      namespace: SHARES_NAMESPACE,
      body: {
        metadata: { name: BYSTANDER },
        spec: {
          nodeName: LOST,
          containers: [
            {
              name: 'app',
              image: sys.images.leasehold.ref,
              imagePullPolicy: 'Never',
              command: ['/nodejs/bin/node', '-e', 'setInterval(() => {}, 3_600_000)'],
              volumeMounts: [{ name: 'data', mountPath: '/data' }],
            },
          ],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: claim } }],
        },
      },
    },
    withDeadline(10_000),
  );
  const served = await Promise.all(SHARES.map((share) => servingRealPod(sys, share)));
  for (const [i, share] of SHARES.entries())
    assert.equal(served[i]?.node, LOST, `${share} serves on ${LOST}`);
  const servedS = (performance.now() - t0) / 1000;
  // Replacements may go anywhere (the manager puts them away from the lost node).
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  for (const share of SHARES)
    await custom.patchNamespacedCustomObject(
      { ...SM, namespace: SHARES_NAMESPACE, name: share, body: [{ op: 'remove', path: '/spec/scheduling' }] },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch, withDeadline(5_000)),
    );
  await eventually(
    `${BYSTANDER} runs on ${LOST} with its volume in use there`,
    async () => {
      const pod = await sys.core.readNamespacedPod({ namespace: SHARES_NAMESPACE, name: BYSTANDER });
      const inUse = await volumesInUse(sys, LOST);
      return pod.status?.phase === 'Running' && inUse.includes(uniqueName(sys, BYSTANDER)) ? true : undefined;
    },
    90_000,
    500,
  );
  t.diagnostic(`${SHARES.length} shares serving on ${LOST} ${servedS.toFixed(1)} s after the first create`);
  process.stderr.write(
    `real-node handoff: ${SHARES.length} shares serving on ${LOST} ${servedS.toFixed(1)} s after the first create\n`,
  );
});

/** Each share's crash-to-serving in the crash of step 2 (s). */
const crashServingS = new Map<string, number>();
/** Each share's crash to its replacement's creation (status.lastFailover) in step 2 (s). */
const crashCreatedS = new Map<string, number>();

test('crash real-1 (four shares) on the default 1 min ADC sync: each serves again well under it, no storm pause, the handoff in order, the unrelated pod and its volume untouched', {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  const before = new Map<string, ReadyRealPod>();
  for (const share of SHARES) before.set(share, await servingRealPod(sys, share));
  const client = await RealNfsClient.start(sys, NFS, OTHER, { file: 'crash.bin' });
  try {
    await client.waitResumed(60_000);
    const sinceSeq = vaLog().events.length;
    const faultWall = Date.now();
    client.markFault();
    await sys.node(LOST).crash();
    const afters = new Map(
      await Promise.all(
        SHARES.map(
          async (share) =>
            [share, await servingRealPod(sys, share, { notPod: before.get(share)?.pod })] as const,
        ),
      ),
    );
    await client.waitResumed(REAL_SERVING_WITHIN_MS);
    const resumedS = client.resumed()?.afterS ?? Number.NaN;

    for (const share of SHARES) {
      const b = before.get(share) as ReadyRealPod;
      const a = afters.get(share) as ReadyRealPod & { servingWall: number };
      assert.equal(a.node, OTHER, `${share}'s replacement runs on ${OTHER}`);
      const lf = await assertFailoverRecord(sys, share, { before: b, after: a, faultWall });
      assert.match(
        lf.volumeHandoff ?? '',
        new RegExp(`from node ${LOST} status\\.volumesInUse`),
        `${share}: the volumesInUse handoff`,
      );
      const markMs = Date.parse(lf.markedAt ?? '') - Date.parse(lf.detectedAt ?? '');
      assert.ok(
        markMs <= MARK_WITHIN_MS,
        `${share}: marked ${markMs} ms after its detection (a storm pause holds it), at most ${MARK_WITHIN_MS} ms`,
      );
      const servedS = sinceS(a.servingWall, faultWall);
      crashServingS.set(share, servedS);
      crashCreatedS.set(share, sinceS(lf.replacementCreatedAt, faultWall));
      const { gone, created } = assertHandedOver(share, LOST, sinceSeq);
      const movedS = sinceS(created.wall.getTime(), faultWall);
      assert.ok(
        movedS < HANDOFF_BOUND_S,
        `${share}: crash to the new VolumeAttachment ${movedS.toFixed(2)} s < ${HANDOFF_BOUND_S} s`,
      );
      process.stderr.write(
        `real-node handoff: crash: ${share} detected ${sinceS(lf.detectedAt, faultWall).toFixed(2)} s, marked +${markMs} ms, released ${sinceS(lf.detachedAt, faultWall).toFixed(2)} s, old VolumeAttachment gone ${sinceS(gone.wall.getTime(), faultWall).toFixed(2)} s, new created ${(created.monoMs - gone.monoMs).toFixed(0)} ms later, acquired ${sinceS(lf.completedAt, faultWall).toFixed(2)} s, serving ${servedS.toFixed(2)} s\n`,
      );
      process.stderr.write(
        `real-node handoff: crash: ${await describeReplacement(sys, share, a.pod, faultWall)}\n`,
      );
      assert.ok(servedS < BOUND_S, `${share}: crash to serving ${servedS.toFixed(2)} s < ${BOUND_S} s`);
      assert.deepEqual(vaLog().nodesOf(realPvName(share)), [OTHER], `${share}: attached to ${OTHER} alone`);
      const windows = assertNeverTwo(share, 'crash');
      assert.ok(
        windows.some((w) => w.id === b.pod) && windows.some((w) => w.id === a.pod),
        `${share}: the old and new ganesha seen`,
      );
    }
    assert.deepEqual(
      handoffOrderViolations(vaLog().events),
      [],
      'no attach elsewhere before the old attachment was gone',
    );
    assert.ok(
      resumedS < BOUND_S,
      `${NFS}: crash to the client writing again ${resumedS.toFixed(2)} s < ${BOUND_S} s`,
    );
    const [gapS] = client.assertClientView(`real-node handoff: crash of ${LOST}`);
    const times = [...crashServingS.values()];
    t.diagnostic(
      `crash -> serving: ${SHARES.map((s) => `${s} ${crashServingS.get(s)?.toFixed(2)} s`).join(', ')}; ${NFS}'s client resumed ${resumedS.toFixed(2)} s (clientWriteGap ${gapS?.toFixed(2)} s)`,
    );
    process.stderr.write(
      `real-node handoff: crash: serving max ${Math.max(...times).toFixed(2)} s, min ${Math.min(...times).toFixed(2)} s\n`,
    );

    // No storm pause: one node's shares fail over together.
    assert.deepEqual(
      (await eventsAll(sys, 'StormGuardActive')).map((e) => e.message),
      [],
      'no StormGuardActive event',
    );
    const expired = (await eventsAll(sys, 'LeaseExpired')).map((e) => e.involvedObject.name);
    for (const share of SHARES)
      assert.equal(expired.filter((n) => n === share).length, 1, `one LeaseExpired of ${share}`);
    const managerPod = (await managerPodsByNode(sys.core)).get(OTHER);
    assert.ok(managerPod, `a manager pod on ${OTHER}`);
    const managerLog = podLog(sys.node(OTHER), managerPod, 'manager');
    assert.ok(managerLog.includes('"msg"'), `${OTHER}'s manager log was read`);
    assert.equal(managerLog.includes('storm guard'), false, `no storm guard line in ${OTHER}'s manager log`);

    // Nothing else on the node was touched.
    const bystander = await sys.core.readNamespacedPod({ namespace: SHARES_NAMESPACE, name: BYSTANDER });
    assert.equal(bystander.metadata?.deletionTimestamp, undefined, 'the unrelated pod is not deleted');
    assert.deepEqual(vaLog().nodesOf(realPvName(BYSTANDER)), [LOST], 'its VolumeAttachment is still there');
    assert.deepEqual(
      vaLog()
        .of(realPvName(BYSTANDER))
        .map((e) => e.event),
      ['created'],
      'and was never deleted',
    );
    const inUse = await volumesInUse(sys, LOST);
    assert.ok(
      inUse.includes(uniqueName(sys, BYSTANDER)),
      `its volume still in use on ${LOST}: ${inUse.join(', ')}`,
    );
    for (const share of SHARES)
      assert.ok(!inUse.includes(uniqueName(sys, share)), `${share} released on ${LOST}`);
    const node = await sys.core.readNode({ name: LOST }, withDeadline(5_000));
    assert.equal(
      node.spec?.taints?.some((x) => x.key === TAINT_KEY) ?? false,
      false,
      'no out-of-service taint',
    );
  } finally {
    await client.stop();
    // The reboot (also after a failure: the next scenarios need the node).
    const t1 = performance.now();
    const before = managerRestarts(await managerPodsByNode(sys.core), LOST);
    await sys.node(LOST).heal();
    await waitManagerRestarted(sys, LOST, before, 120_000);
    process.stderr.write(
      `real-node handoff: crash: reboot to ${LOST}'s manager running again ${((performance.now() - t1) / 1000).toFixed(1)} s\n`,
    );
  }
  // The lone share for the next scenario: the other three deleted.
  for (const share of SHARES.slice(1)) {
    assertNeverTwo(share, 'reboot');
    await deleteShare(sys, share);
  }
});

test('partition (close) then heal on the default ADC sync: the lone share moves once, the healed node does not regain it; the four of the crash each about as fast as it', {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  const before = await servingRealPod(sys, NFS);
  assert.equal(before.node, OTHER, `${NFS} serves on ${OTHER}`);
  const client = await RealNfsClient.start(sys, NFS, LOST, { file: 'partition.bin' });
  let healed = false;
  let kernel: RealKernelClient | undefined;
  try {
    // On the node that stays: the share moves onto it (kernel-client-support.ts).
    kernel = await RealKernelClient.start(sys, NFS, LOST, { name: 'kc-partition', index: 1 });
    await client.waitResumed(60_000);
    const sinceSeq = vaLog().events.length;
    const faultWall = Date.now();
    client.markFault();
    kernel.markFault();
    await sys.node(OTHER).partition('close');
    const afterPod = await servingRealPod(sys, NFS, { notPod: before.pod });
    // Acks after the replacement served (the partitioned old server acks until its fence).
    const servedMono = monotonicMs() - (Date.now() - afterPod.servingWall);
    await client.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    await kernel.waitResumed(REAL_SERVING_WITHIN_MS, servedMono);
    const kernelS = kernel.assertClientView('real-node handoff: partition', servedMono);
    assert.equal(afterPod.node, LOST, 'the replacement runs on the other node');
    const lf = await assertFailoverRecord(sys, NFS, { before, after: afterPod, faultWall });
    assertHandedOver(NFS, OTHER, sinceSeq);
    const loneS = sinceS(afterPod.servingWall, faultWall);
    process.stderr.write(
      `real-node handoff: partition: ${await describeReplacement(sys, NFS, afterPod.pod, faultWall)}\n`,
    );
    const resumedS = client.resumed()?.afterS ?? Number.NaN;
    assert.ok(
      resumedS < BOUND_S,
      `partition to the client writing again ${resumedS.toFixed(2)} s < ${BOUND_S} s`,
    );
    process.stderr.write(
      `real-node handoff: partition: ${NFS} detected ${sinceS(lf.detectedAt, faultWall).toFixed(2)} s, serving ${loneS.toFixed(2)} s, client resumed ${resumedS.toFixed(2)} s, ${kernel.label}'s first write ${kernelS.toFixed(2)} s; ${lf.volumeHandoff}\n`,
    );
    // node-loss's claim: each share of the crashed node failed over about as fast as a
    // lone one (the manager's part, to the replacement's creation).
    const loneCreatedS = sinceS(lf.replacementCreatedAt, faultWall);
    process.stderr.write(
      `real-node handoff: to the replacement's creation: the lone share ${loneCreatedS.toFixed(2)} s, the crash's four ${SHARES.map((x) => crashCreatedS.get(x)?.toFixed(2)).join(', ')} s; to serving: lone ${loneS.toFixed(2)} s, the four ${SHARES.map((x) => crashServingS.get(x)?.toFixed(2)).join(', ')} s\n`,
    );
    for (const [share, s] of crashCreatedS)
      assert.ok(
        s <= loneCreatedS + LONE_SLACK_S,
        `${share}: crash to its replacement's creation ${s.toFixed(2)} s, the lone share's ${loneCreatedS.toFixed(2)} s (+${LONE_SLACK_S} s)`,
      );

    const t1 = performance.now();
    await sys.node(OTHER).heal();
    healed = true;
    // What could give the volume back: the healed kubelet tearing the deleted pod down
    // and posting volumesInUse again. Wait for both, then leave the ADC 2 s.
    await waitPodProcessesGone(before, 60_000);
    const forgotten = Math.floor(Date.now() / 1000) * 1000;
    await eventually(
      `${OTHER} posted its status after the heal, without ${NFS}'s volume`,
      async () => {
        const node = await sys.core.readNode({ name: OTHER }, withDeadline(5_000));
        const beat = node.status?.conditions?.find((c) => c.type === 'Ready')?.lastHeartbeatTime;
        const posted = beat !== undefined && new Date(beat).getTime() >= forgotten;
        return posted && !(node.status?.volumesInUse ?? []).includes(uniqueName(sys, NFS)) ? true : undefined;
      },
      60_000,
      250,
    );
    await sleep(2_000);
    process.stderr.write(
      `real-node handoff: partition: heal to the healed node's status without the volume ${((performance.now() - t1) / 1000).toFixed(1)} s\n`,
    );
    assert.equal(
      (await readyRealPod(sys, NFS))?.pod,
      afterPod.pod,
      'the replacement still serves after the heal',
    );
    assert.deepEqual(vaLog().nodesOf(realPvName(NFS)), [LOST], `attached to ${LOST} alone`);
    assert.deepEqual(
      (await sys.csi.attachments(realVolumeHandle(NFS))).map((a) => a.node),
      [LOST],
      'the driver records it on one node',
    );
    assert.deepEqual(handoffOrderViolations(vaLog().events), []);
    const windows = assertNeverTwo(NFS, 'partition heal');
    assert.equal(windows.filter((w) => w.id === before.pod).length, 1, 'the old pod never ran ganesha again');
    const [gapS] = client.assertClientView('real-node handoff: after the partition heal');
    t.diagnostic(`partition -> serving ${loneS.toFixed(2)} s, clientWriteGap ${gapS?.toFixed(2)} s`);
  } finally {
    if (!healed) await sys.node(OTHER).heal();
    await client.stop();
    await kernel?.stop();
  }
});

/** The share on storage without an attach step (scenario 4). */
const OPEN = 'rh-open';
/** real-2: after the partition rh-a serves on real-1, so nothing else of this file is frozen with it. */
const FROZEN = OTHER;
/**
 * How long the waiting share is watched for a replacement or a mark after it said
 * AwaitingNodeDown: about twice a lone share's detection-to-replacement on these nodes,
 * and the Node's status changes (NotReady) make the managers look again meanwhile.
 */
const AWAIT_HOLD_MS = 6_000;

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}

async function storageFencingCondition(sys: RealSystem, share: string): Promise<Condition | undefined> {
  const status = (await shareStatus(sys, share)) as { conditions?: Condition[] };
  return status.conditions?.find((c) => c.type === 'StorageFencing');
}

/** The pods of `share` (any phase) other than `pod`. */
async function otherPods(sys: RealSystem, share: string, pod: string): Promise<string[]> {
  const list = await sys.core.listNamespacedPod(
    { namespace: SHARES_NAMESPACE, labelSelector: `${LABEL_SHARE_MANAGER}=${share}` },
    withDeadline(5_000),
  );
  return list.items.map((p) => p.metadata?.name ?? '').filter((name) => name !== pod);
}

/**
 * As an operator who powered the node off would: `kubectl taint node N
 * node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (or its removal). A
 * read-modify-write guarded by a JSON-patch `test` of the resourceVersion, retried when
 * the Node changed in between: the API server answers a failed `test` with 422 Invalid
 * (not 409), and a rebooting node's kubelet updates its Node every few seconds (a CI run
 * lost the untaint to that race).
 */
async function setOutOfService(sys: RealSystem, node: string, on: boolean): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const n = await sys.core.readNode({ name: node }, withDeadline(5_000));
    const taints = n.spec?.taints ?? [];
    const rest = taints.filter((x) => x.key !== TAINT_KEY);
    const next = on ? [...rest, { key: TAINT_KEY, value: 'nodeshutdown', effect: 'NoExecute' }] : rest;
    try {
      await sys.core.patchNode(
        {
          name: node,
          body: [
            { op: 'test', path: '/metadata/resourceVersion', value: n.metadata?.resourceVersion },
            { op: n.spec?.taints ? 'replace' : 'add', path: '/spec/taints', value: next },
          ],
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch, withDeadline(5_000)),
      );
      return;
    } catch (err) {
      const code = (err as { code?: number }).code;
      if ((code !== 422 && code !== 409) || attempt >= 10) {
        throw new Error(
          `${on ? 'tainting' : 'untainting'} Node ${node} (${TAINT_KEY}): attempt ${attempt}: ${String(err)}`,
        );
      }
      await sleep(200);
    }
  }
}

/** A Ready manager pod (not being deleted) on `node`. */
async function waitReadyManagerOn(sys: RealSystem, node: string, timeoutMs: number): Promise<void> {
  await eventually(
    `a ready manager pod on ${node}`,
    async () => {
      const pods = await sys.core.listNamespacedPod(
        { namespace: SYSTEM_NAMESPACE, labelSelector: MANAGER_LABEL, fieldSelector: `spec.nodeName=${node}` },
        withDeadline(5_000),
      );
      return pods.items.some(
        (p) =>
          !p.metadata?.deletionTimestamp &&
          p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
      )
        ? true
        : undefined;
    },
    timeoutMs,
    500,
  );
}

test("storage without an attach step (CSIDriver attachRequired: false): freeze real-2 longer than D, the share waits for node-down evidence; the operator's out-of-service taint lets it fail over; the frozen machine powered off, rebooted, untainted", {
  timeout: 300_000,
}, async (t) => {
  const sys = system();
  // The fencing storage's verdict, from rh-a's failovers before (the crash, the partition).
  const fences = await storageFencingCondition(sys, NFS);
  assert.deepEqual(
    [fences?.status, fences?.reason],
    ['True', 'StorageFences'],
    `${NFS}: the fencing storage (CSIDriver attachRequired true) was judged to fence`,
  );
  const t0 = performance.now();
  await createRealNfsShare(sys, OPEN, { nfs: E2E_NFS, node: FROZEN, noAttach: true });
  const before = await servingRealPod(sys, OPEN);
  assert.equal(before.node, FROZEN, `${OPEN} serves on ${FROZEN}`);
  const startedS = (performance.now() - t0) / 1000;
  assert.deepEqual(
    vaLog().nodesOf(realPvName(OPEN)),
    [],
    'no VolumeAttachment: the driver has no attach step',
  );
  assert.deepEqual(await sys.csi.attachments(realVolumeHandle(OPEN)), [], 'and the driver recorded none');
  await sys.kc
    .makeApiClient(k8s.CustomObjectsApi)
    .patchNamespacedCustomObject(
      { ...SM, namespace: SHARES_NAMESPACE, name: OPEN, body: [{ op: 'remove', path: '/spec/scheduling' }] },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch, withDeadline(5_000)),
    );
  const client = await RealNfsClient.start(sys, OPEN, LOST, { file: 'noattach.bin' });
  let tainted = false;
  const cleanup = async () => {
    await client.stop();
    const t1 = performance.now();
    // The reboot after the power-off (a thaw if the test failed before it).
    await sys.node(FROZEN).heal();
    if (tainted) await setOutOfService(sys, FROZEN, false);
    await waitReadyManagerOn(sys, FROZEN, 120_000);
    process.stderr.write(
      `real-node handoff: no-attach: reboot and untaint to ${FROZEN}'s manager ready again ${((performance.now() - t1) / 1000).toFixed(1)} s\n`,
    );
  };
  try {
    await client.waitResumed(60_000);
    const faultWall = Date.now();
    client.markFault();
    sys.node(FROZEN).freeze();

    // The default LEASEHOLD_NONFENCING_STORAGE=require-node-down: its lease goes stale D
    // after the freeze and it WAITS, serving nowhere.
    const waiting = await eventually(
      `${OPEN} says StorageFencing=False/AwaitingNodeDown`,
      async () => {
        const c = await storageFencingCondition(sys, OPEN);
        return c?.reason === 'AwaitingNodeDown' ? c : undefined;
      },
      60_000,
      250,
    );
    const awaitingS = (Date.now() - faultWall) / 1000;
    assert.equal(waiting.status, 'False');
    assert.match(waiting.message ?? '', /attachRequired: false/, 'judged by the CSIDriver');
    assert.match(waiting.message ?? '', /node\.kubernetes\.io\/out-of-service.*or delete its Node object/);
    const leases = sys.kc.makeApiClient(k8s.CoordinationV1Api);
    const holdUntil = monotonicMs() + AWAIT_HOLD_MS;
    let looks = 0;
    do {
      assert.deepEqual(
        await otherPods(sys, OPEN, before.pod),
        [],
        `${OPEN}: no replacement pod while it waits`,
      );
      const lease = await leases.readNamespacedLease(
        { namespace: SHARES_NAMESPACE, name: OPEN },
        withDeadline(5_000),
      );
      assert.equal(
        lease.metadata?.annotations?.[ANNOTATION_DELINQUENT],
        undefined,
        'its lease is not marked',
      );
      assert.equal(lease.spec?.holderIdentity, before.pod, "still the frozen pod's");
      looks++;
      await sleep(300);
    } while (monotonicMs() < holdUntil);
    const stillWaiting = await storageFencingCondition(sys, OPEN);
    assert.equal(stillWaiting?.reason, 'AwaitingNodeDown', 'still waiting at the end of the window');
    const events = await sys.core.listNamespacedEvent(
      { namespace: SHARES_NAMESPACE, fieldSelector: `involvedObject.name=${OPEN},reason=AwaitingNodeDown` },
      withDeadline(5_000),
    );
    assert.ok(events.items.length > 0, `a Warning event AwaitingNodeDown on ${OPEN}`);
    assert.ok(
      (ganesha?.windows() ?? []).filter((w) => w.id.startsWith(`${OPEN}-`) && w.id !== before.pod).length ===
        0,
      `${OPEN}: no ganesha but the frozen one's ever ran`,
    );

    // The operator's word that real-2 is down. (It is frozen: it runs nothing, so the
    // word holds as long as it is not thawed; it is powered off below.)
    const taintWall = Date.now();
    await setOutOfService(sys, FROZEN, true);
    tainted = true;
    const afterPod = await servingRealPod(sys, OPEN, { notPod: before.pod });
    await client.waitResumed(REAL_SERVING_WITHIN_MS);
    assert.equal(afterPod.node, LOST, `the replacement runs on ${LOST}`);
    const afterTaint = await storageFencingCondition(sys, OPEN);
    assert.deepEqual([afterTaint?.status, afterTaint?.reason], ['False', 'NodeDown']);
    const lease = await leases.readNamespacedLease(
      { namespace: SHARES_NAMESPACE, name: OPEN },
      withDeadline(5_000),
    );
    assert.equal(lease.spec?.holderIdentity, afterPod.pod, "the Lease is the replacement's");
    assert.deepEqual(vaLog().nodesOf(realPvName(OPEN)), [], 'still no VolumeAttachment');
    const servedS = sinceS(afterPod.servingWall, taintWall);
    const resumedS = client.resumed()?.afterS ?? Number.NaN;

    // The frozen machine powered off (what the taint said): killed while frozen, none of
    // its processes runs again; then the reboot and the untaint, as an operator would.
    await sys.node(FROZEN).crash();
    const windows = assertNeverTwo(OPEN, 'no-attach');
    assert.ok(
      windows.some((w) => w.id === before.pod) && windows.some((w) => w.id === afterPod.pod),
      `${OPEN}: the old and new ganesha seen`,
    );
    const [gapS] = client.assertClientView('real-node handoff: no-attach storage');
    process.stderr.write(
      `real-node handoff: no-attach: serving on ${FROZEN} ${startedS.toFixed(1)} s after create; freeze -> AwaitingNodeDown ${awaitingS.toFixed(2)} s, held ${AWAIT_HOLD_MS} ms (${looks} looks) with no replacement and the lease unmarked; taint -> serving on ${afterPod.node} ${servedS.toFixed(2)} s; client resumed ${resumedS.toFixed(2)} s after the freeze (gap ${gapS?.toFixed(2)} s)\n`,
    );
    t.diagnostic(
      `freeze -> AwaitingNodeDown ${awaitingS.toFixed(2)} s; taint -> serving ${servedS.toFixed(2)} s`,
    );
  } catch (err) {
    // A failed cleanup must not hide why the scenario failed (a CI run lost it so).
    await cleanup().catch((cleanupErr) =>
      process.stderr.write(`real-node handoff: no-attach: the cleanup failed too: ${String(cleanupErr)}\n`),
    );
    throw err;
  }
  await cleanup();
  await deleteShare(sys, OPEN);
});

/** Polls the Node until stopped: when it was first seen not Ready, and first with our taint and mark. */
function watchNode(sys: RealSystem, node: string) {
  let notReadyWall: number | undefined;
  let taint: { wall: number; by: string; taint: k8s.V1Taint } | undefined;
  let running = true;
  const loop = (async () => {
    while (running) {
      const n = await sys.core.readNode({ name: node }, withDeadline(5_000)).catch(() => undefined);
      const now = Date.now();
      if (n && notReadyWall === undefined && !isReady(n)) notReadyWall = now;
      const t = n?.spec?.taints?.find((x) => x.key === TAINT_KEY);
      const by = n?.metadata?.annotations?.[MARK];
      if (t && by && !taint) taint = { wall: now, by, taint: t };
      await sleep(200);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return { notReadyWall, taint };
    },
  };
}

const isReady = (n: k8s.V1Node) =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

async function nodeEvents(sys: RealSystem, node: string, reason: string): Promise<string[]> {
  const list = await sys.core.listNamespacedEvent(
    { namespace: 'default', fieldSelector: `involvedObject.name=${node},reason=${reason}` },
    withDeadline(10_000),
  );
  return list.items.map((e) => e.message ?? '');
}

const OOS_VALUES = {
  'manager.outOfServiceTaint': 'true',
  'manager.nodeLeaseGrace': '8s', // the cluster's node-monitor grace: "heartbeat stale" and NotReady the same age
  'manager.volumeHandoff': 'none',
};

test('out-of-service (helm upgrade: taint on, handoff none): crash real-1, tainted once confirmed down, the ADC force-detaches, the client writes again; the taint removed after the heal', {
  timeout: 420_000,
}, async (t) => {
  const sys = system();
  const t0 = performance.now();
  const oldManagers = new Set([...(await managerPodsByNode(sys.core)).values()].map((p) => p.metadata?.name));
  const r = await helm([
    'upgrade',
    RELEASE,
    CHART_DIR,
    '--namespace',
    SYSTEM_NAMESPACE,
    '--kubeconfig',
    sys.cluster.kubeconfigPath,
    '--reuse-values',
    ...Object.entries(OOS_VALUES).flatMap(([k, v]) => ['--set', `${k}=${v}`]),
  ]);
  assert.equal(r.code, 0, `helm upgrade: ${r.stderr}`);
  // NB: the chart's rolling update (maxUnavailable 1) replaces one node's manager after
  // the other (37.9 s measured); deleted at once, the DaemonSet starts both new ones
  // together. No share is failing over meanwhile.
  await Promise.all(
    [...oldManagers].map(
      (name) =>
        sys.core
          .deleteNamespacedPod({ namespace: SYSTEM_NAMESPACE, name: name ?? '' }, withDeadline(10_000))
          .catch(() => undefined), // already replaced by the rollout
    ),
  );
  await eventually(
    'a new Ready manager pod with the out-of-service taint on, on every node',
    async () => {
      const pods = await managerPodsByNode(sys.core);
      const ok = sys.nodes.every((n) => {
        const p = pods.get(n.name);
        const env = p?.spec?.containers[0]?.env ?? [];
        return (
          p &&
          !oldManagers.has(p.metadata?.name) &&
          env.some((e) => e.name === 'LEASEHOLD_OUT_OF_SERVICE_TAINT' && e.value === 'true') &&
          p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')
        );
      });
      return ok ? true : undefined;
    },
    180_000,
    500,
  );
  const upgradeS = (performance.now() - t0) / 1000;
  process.stderr.write(
    `real-node handoff: out-of-service: helm upgrade to every manager replaced and Ready ${upgradeS.toFixed(1)} s\n`,
  );

  const before = await servingRealPod(sys, NFS);
  assert.equal(before.node, LOST, `${NFS} serves on ${LOST}`);
  const client = await RealNfsClient.start(sys, NFS, OTHER, { file: 'oos.bin' });
  let healed = false;
  try {
    await client.waitResumed(60_000);
    const sinceSeq = vaLog().events.length;
    const watcher = watchNode(sys, LOST);
    const faultWall = Date.now();
    client.markFault();
    await sys.node(LOST).crash();
    let seen: Awaited<ReturnType<typeof watcher.stop>>;
    let afterPod: Awaited<ReturnType<typeof servingRealPod>>;
    try {
      afterPod = await servingRealPod(sys, NFS, { notPod: before.pod });
      await client.waitResumed(REAL_SERVING_WITHIN_MS);
    } finally {
      seen = await watcher.stop();
    }
    const resumedS = client.resumed()?.afterS ?? Number.NaN;
    assert.equal(afterPod.node, OTHER);
    const lf = await assertFailoverRecord(sys, NFS, { before, after: afterPod, faultWall });
    const { gone } = assertHandedOver(NFS, LOST, sinceSeq);
    const { taint, notReadyWall } = seen;
    process.stderr.write(
      `real-node handoff: out-of-service: detected ${sinceS(lf.detectedAt, faultWall).toFixed(2)} s, NotReady seen ${sinceS(notReadyWall, faultWall).toFixed(2)} s, taint seen ${sinceS(taint?.wall, faultWall).toFixed(2)} s (by ${taint?.by}), old VolumeAttachment gone ${sinceS(gone.wall.getTime(), faultWall).toFixed(2)} s, serving ${sinceS(afterPod.servingWall, faultWall).toFixed(2)} s, client resumed ${resumedS.toFixed(2)} s; ${lf.volumeHandoff}\n`,
    );
    process.stderr.write(
      `real-node handoff: out-of-service: ${await describeReplacement(sys, NFS, afterPod.pod, faultWall)}\n`,
    );
    assert.ok(taint, `${LOST} got the out-of-service taint with our mark`);
    assert.deepEqual(
      { key: taint.taint.key, value: taint.taint.value, effect: taint.taint.effect },
      { key: TAINT_KEY, value: 'nodeshutdown', effect: 'NoExecute' },
    );
    assert.equal(taint.by, lf.by, 'added by the manager that ran the failover');
    assert.ok(
      notReadyWall !== undefined && notReadyWall <= taint.wall,
      'tainted only after the node was seen NotReady',
    );
    assert.match(lf.volumeHandoff ?? '', /mode none/, 'nothing of ours handed the volume off');
    // The ADC's force-detach: the old VolumeAttachment deleted once the taint was there
    // (polled every 200 ms: a second of slack).
    assert.ok(
      gone.wall.getTime() >= taint.wall - 1_000,
      `the old VolumeAttachment deleted after the taint (${sinceS(gone.wall.getTime(), taint.wall).toFixed(2)} s)`,
    );
    assert.ok(
      resumedS < OOS_BOUND_S,
      `crash to the client writing again ${resumedS.toFixed(2)} s < ${OOS_BOUND_S} s`,
    );
    assert.ok(
      (await nodeEvents(sys, LOST, 'OutOfServiceTaintAdded')).length >= 1,
      `an OutOfServiceTaintAdded event on ${LOST}`,
    );
    const tainted = (await sys.core.listNode({}, withDeadline(10_000))).items
      .filter((n) => n.spec?.taints?.some((x) => x.key === TAINT_KEY))
      .map((n) => n.metadata?.name);
    assert.deepEqual(tainted, [LOST], 'only the crashed node is out of service');

    // Heal: Ready again, the taint and the mark gone, a manager there again.
    const t1 = performance.now();
    await sys.node(LOST).heal();
    healed = true;
    await eventually(
      `${LOST} Ready without the out-of-service taint and our mark`,
      async () => {
        const n = await sys.core.readNode({ name: LOST }, withDeadline(5_000));
        const has = n.spec?.taints?.some((x) => x.key === TAINT_KEY) ?? false;
        return isReady(n) && !has && n.metadata?.annotations?.[MARK] === undefined ? true : undefined;
      },
      90_000,
      250,
    );
    const removedS = (performance.now() - t1) / 1000;
    await eventually(`an OutOfServiceTaintRemoved event on ${LOST}`, async () =>
      (await nodeEvents(sys, LOST, 'OutOfServiceTaintRemoved')).length > 0 ? true : undefined,
    );
    await waitReadyManagerOn(sys, LOST, 120_000);
    process.stderr.write(
      `real-node handoff: out-of-service: taint removed ${removedS.toFixed(1)} s after the heal, a manager ready there ${((performance.now() - t1) / 1000).toFixed(1)} s\n`,
    );
    assert.equal(
      (await readyRealPod(sys, NFS))?.pod,
      afterPod.pod,
      'the replacement still serves after the heal',
    );
    assertNeverTwo(NFS, 'out-of-service');
    const [gapS] = client.assertClientView('real-node handoff: out-of-service');
    t.diagnostic(
      `helm upgrade ${upgradeS.toFixed(1)} s; out-of-service crash -> client writing ${resumedS.toFixed(2)} s (gap ${gapS?.toFixed(2)} s)`,
    );
  } finally {
    if (!healed) await sys.node(LOST).heal();
    await client.stop();
  }
});
