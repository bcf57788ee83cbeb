/**
 * The manager's failover against the real API server, with manager processes running
 * the compiled code. No kubelet or scheduler: the test binds pods, reports them Running
 * and plays each pod's agent on the Lease (see manager-harness.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import {
  createNamespace,
  eventsFor,
  FAST_LEASE,
  FAST_LEASE_D_MS,
  getShareManager,
  HolderLoop,
  heartbeatNode,
  podsOf,
  readLease,
  reportPodEnded,
  runningShare as runningShareOn,
  runPodOn,
  startManager,
  useManagerFixture,
  waitForReplacement,
} from './manager-harness.ts';

const cluster = useCluster({ scheduler: false });
const core = (kc: k8s.KubeConfig) => kc.makeApiClient(k8s.CoreV1Api);

/** The addresses in the manager's EndpointSlice of the share (none: no slice). */
async function sliceAddresses(kc: k8s.KubeConfig, namespace: string, share: string): Promise<string[]> {
  const slices = await kc.makeApiClient(k8s.DiscoveryV1Api).listNamespacedEndpointSlice({
    namespace,
    labelSelector: `kubernetes.io/service-name=${share},endpointslice.kubernetes.io/managed-by=manager.leasehold.dev`,
  });
  return slices.items.flatMap((sl) => (sl.endpoints ?? []).flatMap((e) => e.addresses));
}
const LEASE = FAST_LEASE;
const D_MS = FAST_LEASE_D_MS;
const holders: HolderLoop[] = [];

function runningShare(namespace: string, name: string, node: string, ready?: boolean) {
  return runningShareOn(cluster().kubeConfig, { namespace, name, node, lease: LEASE, ready }, holders);
}

/** Counts what happens to one lease and its pods from now on (via watches). */
async function recordHistory(namespace: string, name: string) {
  const kc = cluster().kubeConfig;
  const history = {
    delinquentWrites: 0,
    failoverBy: new Set<string>(),
    podsAdded: [] as string[],
    podsDeleted: [] as string[],
  };
  let wasDelinquent = false;
  const watch = new k8s.Watch(kc);
  const leaseReq = await watch.watch(
    `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`,
    { fieldSelector: `metadata.name=${name}` },
    (_type, lease: k8s.V1Lease) => {
      const delinquent = Boolean(lease.metadata?.annotations?.['leasehold.dev/delinquent']);
      if (delinquent && !wasDelinquent) history.delinquentWrites += 1;
      const by = lease.metadata?.annotations?.['leasehold.dev/failover-by'];
      if (by) history.failoverBy.add(by);
      wasDelinquent = delinquent;
    },
    () => {},
  );
  const podReq = await watch.watch(
    `/api/v1/namespaces/${namespace}/pods`,
    { labelSelector: `leasehold.dev/share-manager=${name}` },
    (type, pod: k8s.V1Pod) => {
      if (type === 'ADDED') history.podsAdded.push(pod.metadata?.name ?? '');
      if (type === 'DELETED') history.podsDeleted.push(pod.metadata?.name ?? '');
    },
    () => {},
  );
  await sleep(300); // the watches start from "now": let them open before anything happens
  history.podsAdded.length = 0; // initial ADDED events of existing pods
  return {
    history,
    stop: () => {
      leaseReq.abort();
      podReq.abort();
    },
  };
}

describe('manager failover on a stale lease', () => {
  useManagerFixture(cluster, ['node-1', 'node-2', 'node-3'], holders);

  it('three managers, one stale lease: exactly one failover, detected no earlier than D', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'three');
    const managers = ['m1', 'm2', 'm3'].map((n) => startManager(cluster(), n));
    // Ready: the harness's server is a user's (spec.server), published only when Ready.
    const { pod, holder } = await runningShare('three', 'vol-a', 'node-1', true);
    const service = await kc
      .makeApiClient(k8s.CoreV1Api)
      .readNamespacedService({ namespace: 'three', name: 'vol-a' });
    assert.equal(service.spec?.selector, undefined, 'no selector: the manager publishes the endpoints');
    const first = (await core(kc).readNamespacedPod({ namespace: 'three', name: pod.metadata?.name ?? '' }))
      .status?.podIP;
    await eventually(`the manager's EndpointSlice lists ${pod.metadata?.name} (${first})`, async () =>
      JSON.stringify(await sliceAddresses(kc, 'three', 'vol-a')) === JSON.stringify([first])
        ? true
        : undefined,
    );
    assert.equal(service.spec?.ports?.[0]?.port, 8080);
    assert.equal(service.metadata?.ownerReferences?.[0]?.kind, 'ShareManager');
    const ownedLease = await kc
      .makeApiClient(k8s.CoordinationV1Api)
      .readNamespacedLease({ namespace: 'three', name: 'vol-a' });
    assert.equal(ownedLease.metadata?.labels?.['leasehold.dev/share-manager'], 'vol-a');
    assert.equal(ownedLease.metadata?.ownerReferences?.[0]?.kind, 'ShareManager');
    const { history, stop } = await recordHistory('three', 'vol-a');
    try {
      await sleep(2000);
      await holder.stop(); // the node "dies": no more renewals
      const lastRenewal = holder.lastRenewalAt;
      const lease = await eventually(
        'the delinquent mark',
        async () => {
          const l = await readLease(kc, 'three', 'vol-a');
          return l.delinquentSince ? l : undefined;
        },
        15_000,
        20,
      );
      const verdictAt = Date.parse(lease.delinquentSince ?? '');
      assert.ok(
        verdictAt - lastRenewal >= D_MS - 100,
        `marked ${verdictAt - lastRenewal} ms after the last renewal (D = ${D_MS})`,
      );
      assert.ok(
        verdictAt - lastRenewal <= D_MS + 2000,
        `marked ${verdictAt - lastRenewal} ms after the last renewal`,
      );
      const owner = lease.failoverBy ?? '';
      assert.ok(['m1', 'm2', 'm3'].includes(owner));

      // The replacement appears with anti-affinity against node-1; the test runs it on node-2.
      const replacement = await waitForReplacement(kc, 'three', 'vol-a', pod.metadata?.name ?? '');
      assert.ok(replacement && replacement.metadata?.name !== pod.metadata?.name);
      const avoid = JSON.stringify(replacement.spec?.affinity?.nodeAffinity ?? {});
      assert.match(avoid, /"NotIn","values":\["node-1"\]/);
      await heartbeatNode(kc, 'node-2'); // its pod stays Ready (the node controller's rule)
      await runPodOn(kc, replacement, 'node-2', { ready: true });
      const next = new HolderLoop(
        kc,
        'three',
        'vol-a',
        replacement.metadata?.name ?? '',
        'node-2',
        1000,
      ).start();
      holders.push(next);
      const sm = await eventually(
        'status Running after the failover',
        async () => {
          const s = await getShareManager(kc, 'three', 'vol-a');
          return s.status?.state === 'Running' && s.status.lastFailover?.completedAt ? s : undefined;
        },
        15_000,
      );
      assert.equal(sm.status?.lastFailover?.lostPod, pod.metadata?.name);
      assert.equal(sm.status?.lastFailover?.lostNode, 'node-1');
      assert.equal(sm.status?.lastFailover?.replacementPod, replacement.metadata?.name);
      await sleep(2 * D_MS); // anything duplicated would show by now
      // Three managers wrote the slice by CAS: it names the replacement alone.
      const nextIp = (
        await core(kc).readNamespacedPod({ namespace: 'three', name: replacement.metadata?.name ?? '' })
      ).status?.podIP;
      assert.deepEqual(await sliceAddresses(kc, 'three', 'vol-a'), [nextIp]);

      assert.equal(history.delinquentWrites, 1, 'one delinquent write');
      assert.deepEqual([...history.failoverBy], [owner], 'one owner');
      assert.deepEqual(history.podsDeleted, [pod.metadata?.name], 'one pod deletion');
      assert.deepEqual(history.podsAdded, [replacement.metadata?.name], 'one replacement');
      const events = await eventsFor(kc, 'three', 'vol-a');
      assert.equal(events.filter((e) => e.reason === 'LeaseExpired').length, 1);
      const completed = events.filter((e) => e.reason === 'FailoverCompleted');
      assert.equal(completed.length, 1);
      assert.match(completed[0]?.message ?? '', /mark [\d.]+s, pod_delete [\d.]+s, .*total [\d.]+s/);
      // The storage-fencing gate under lease-only (the harness's setting; this claim does
      // not exist, so the storage is unknown): failed over on the lease alone, and says so.
      const fencing = sm.status?.conditions?.find((c) => c.type === 'StorageFencing');
      assert.deepEqual([fencing?.status, fencing?.reason], ['False', 'LeaseOnly']);
      assert.match(fencing?.message ?? '', /PVC three\/data-vol-a does not exist.*may write once more/);
      // One per manager at most: each writes it only when its cached condition differs.
      const leaseOnly = events.filter((e) => e.reason === 'LeaseOnly').length;
      assert.ok(leaseOnly >= 1 && leaseOnly <= 3, `${leaseOnly} LeaseOnly events`);
      for (const m of managers) assert.equal(m.child.exitCode, null, `${m.name} still running`);
    } finally {
      stop();
      for (const m of managers) await m.kill();
    }
  });

  it('owner killed after creating the replacement: no takeover while it lives (slow attach); it ends -> taken over, first timestamps kept', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'takeover');
    const TAKEOVER_MS = 3000;
    const env = { LEASEHOLD_FAILOVER_TAKEOVER_TIMEOUT: '3s', LEASEHOLD_WATCH_NAMESPACE: 'takeover' };
    const managers = [startManager(cluster(), 'k1', env), startManager(cluster(), 'k2', env)];
    const { pod, holder } = await runningShare('takeover', 'vol-k', 'node-1');
    const lostPod = pod.metadata?.name ?? '';
    const { history, stop } = await recordHistory('takeover', 'vol-k');
    try {
      await holder.stop();
      const marked = await eventually(
        'the delinquent mark',
        async () => {
          const l = await readLease(kc, 'takeover', 'vol-k');
          return l.delinquentSince ? l : undefined;
        },
        15_000,
        5,
      );
      const owner = managers.find((m) => m.name === marked.failoverBy);
      const survivor = managers.find((m) => m.name !== marked.failoverBy);
      assert.ok(owner && survivor);
      const first = await waitForReplacement(kc, 'takeover', 'vol-k', lostPod);
      const announced = await eventually("the owner's status FailingOver", async () => {
        const s = await getShareManager(kc, 'takeover', 'vol-k');
        return s.status?.lastFailover?.markedAt ? s.status.lastFailover : undefined;
      });
      await owner.kill('SIGKILL');

      // The replacement stays Pending (its volume attaching): waiting for it is no stall.
      await sleep(3 * TAKEOVER_MS);
      assert.equal((await readLease(kc, 'takeover', 'vol-k')).failoverBy, owner.name, 'no takeover yet');
      const early = await eventsFor(kc, 'takeover', 'vol-k');
      assert.equal(early.filter((e) => e.reason === 'FailoverTakenOver').length, 0);

      // The replacement ends without acquiring: the survivor takes over after its timeout.
      await reportPodEnded(kc, 'takeover', first.metadata?.name ?? '', 'Failed');
      const endedAt = performance.now();
      await eventually(
        'the takeover',
        async () =>
          (await readLease(kc, 'takeover', 'vol-k')).failoverBy === survivor.name ? true : undefined,
        15_000,
        50,
      );
      const waited = performance.now() - endedAt;
      assert.ok(
        waited >= TAKEOVER_MS - 200,
        `taken over ${waited.toFixed(0)} ms after the replacement ended`,
      );
      const second = await eventually(
        'a second replacement',
        async () =>
          (await podsOf(kc, 'takeover', 'vol-k')).find(
            (p) =>
              !p.metadata?.deletionTimestamp &&
              p.metadata?.name !== lostPod &&
              p.metadata?.name !== first.metadata?.name,
          ),
        15_000,
      );
      await runPodOn(kc, second, 'node-2');
      holders.push(
        new HolderLoop(kc, 'takeover', 'vol-k', second.metadata?.name ?? '', 'node-2', 1000).start(),
      );
      const sm = await eventually(
        'completion by the survivor',
        async () => {
          const s = await getShareManager(kc, 'takeover', 'vol-k');
          return s.status?.state === 'Running' && s.status.lastFailover?.completedAt ? s : undefined;
        },
        15_000,
      );
      const record = sm.status?.lastFailover;
      assert.equal(record?.by, survivor.name);
      assert.equal(record?.detectedAt, announced.detectedAt, 'first detection time kept');
      assert.equal(record?.markedAt, announced.markedAt, 'first mark time kept');
      assert.equal(record?.replacementPod, second.metadata?.name);
      await sleep(D_MS);
      const live = (await podsOf(kc, 'takeover', 'vol-k')).filter(
        (p) => !p.metadata?.deletionTimestamp && p.status?.phase !== 'Failed',
      );
      assert.deepEqual(
        live.map((p) => p.metadata?.name),
        [second.metadata?.name],
        'no duplicate pod',
      );
      assert.deepEqual(history.podsAdded, [first.metadata?.name, second.metadata?.name]);
      const events = await eventsFor(kc, 'takeover', 'vol-k');
      assert.equal(events.filter((e) => e.reason === 'FailoverTakenOver').length, 1);
      assert.equal(events.filter((e) => e.reason === 'FailoverCompleted').length, 1);
    } finally {
      stop();
      for (const m of managers) await m.kill();
    }
  });

  it('the owner goes down with the node of its replacement: the survivor takes over once that node is silent for D + P, not after the takeover timeout', async (t) => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'ownerlost');
    // Each manager on a node of its own, whose heartbeat the test renews as a kubelet would.
    const beats = new Map(
      ['node-2', 'node-3'].map((n) => [
        n,
        new HolderLoop(kc, 'kube-node-lease', n, n, n, 1000, 0, 40).start(),
      ]),
    );
    holders.push(...beats.values());
    const env = { LEASEHOLD_FAILOVER_TAKEOVER_TIMEOUT: '60s', LEASEHOLD_WATCH_NAMESPACE: 'ownerlost' };
    const managers = [
      startManager(cluster(), 'o2', { ...env, LEASEHOLD_NODE_NAME: 'node-2' }),
      startManager(cluster(), 'o3', { ...env, LEASEHOLD_NODE_NAME: 'node-3' }),
    ];
    const nodeOf = (m: { name: string }) => (m.name === 'o2' ? 'node-2' : 'node-3');
    try {
      await sleep(2_500); // two heartbeats seen by both managers: the period is known
      const { pod, holder } = await runningShare('ownerlost', 'vol-o', 'node-1');
      await holder.stop();
      const marked = await eventually(
        'the delinquent mark',
        async () => {
          const l = await readLease(kc, 'ownerlost', 'vol-o');
          return l.delinquentSince ? l : undefined;
        },
        15_000,
        5,
      );
      const owner = managers.find((m) => m.name === marked.failoverBy);
      const survivor = managers.find((m) => m.name !== marked.failoverBy);
      assert.ok(owner && survivor);
      assert.equal(marked.failoverByNode, nodeOf(owner), 'the mark names the owner and its node');
      // The replacement lands on the owner's node, and that node dies: its manager and heartbeat stop.
      const first = await waitForReplacement(kc, 'ownerlost', 'vol-o', pod.metadata?.name ?? '');
      await runPodOn(kc, first, nodeOf(owner));
      await owner.kill('SIGKILL');
      const beat = beats.get(nodeOf(owner));
      await beat?.stop();
      const downAt = performance.now();

      await eventually(
        'the takeover',
        async () =>
          (await readLease(kc, 'ownerlost', 'vol-o')).failoverBy === survivor.name ? true : undefined,
        40_000,
        50,
      );
      const waited = performance.now() - downAt;
      const sinceBeat = Date.now() - (beat?.lastRenewalSentAt ?? 0);
      // Lost after D + P (4 s) of silence by the survivor's clock, so never within D of the
      // last heartbeat sent; the 60 s timeout cannot have done it.
      assert.ok(sinceBeat >= D_MS, `taken over ${sinceBeat} ms after the last heartbeat was sent`);
      assert.ok(waited < 30_000, `taken over ${waited.toFixed(0)} ms after the node went down`);
      const said = (await survivor.lines()).find(
        (l) => l.msg === 'failover owner lost with its node: taking over',
      );
      assert.equal(said?.node, nodeOf(owner), JSON.stringify(said));
      assert.equal((await readLease(kc, 'ownerlost', 'vol-o')).failoverByNode, nodeOf(survivor));
      // The survivor runs it on: the lost replacement goes, another is made (not on the dead node).
      const second = await eventually(
        'a second replacement',
        async () =>
          (await podsOf(kc, 'ownerlost', 'vol-o')).find(
            (p) =>
              !p.metadata?.deletionTimestamp &&
              p.metadata?.name !== pod.metadata?.name &&
              p.metadata?.name !== first.metadata?.name,
          ),
        20_000,
      );
      t.diagnostic(
        `taken over ${(waited / 1000).toFixed(1)} s after the owner's node went down; replacement ${second.metadata?.name}`,
      );
      const events = await eventsFor(kc, 'ownerlost', 'vol-o');
      assert.equal(events.filter((e) => e.reason === 'FailoverTakenOver').length, 1);
    } finally {
      for (const m of managers) await m.kill();
    }
  });

  it('managers stalled for 20 s (SIGSTOP) while a healthy replacement waits to acquire: no replacement deleted, no node or owner judged lost (issue 27 item 9)', async (t) => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'stalled');
    // Every node's heartbeat renews throughout, as a live kubelet's would.
    const beats = ['node-1', 'node-2', 'node-3'].map((n) =>
      new HolderLoop(kc, 'kube-node-lease', n, n, n, 1000, 0, 40).start(),
    );
    holders.push(...beats);
    const env = { LEASEHOLD_FAILOVER_TAKEOVER_TIMEOUT: '60s', LEASEHOLD_WATCH_NAMESPACE: 'stalled' };
    const managers = [
      startManager(cluster(), 's2', { ...env, LEASEHOLD_NODE_NAME: 'node-2' }),
      startManager(cluster(), 's3', { ...env, LEASEHOLD_NODE_NAME: 'node-3' }),
    ];
    const signal = (sig: NodeJS.Signals) => {
      for (const m of managers) process.kill(-(m.child.pid as number), sig);
    };
    try {
      await sleep(2_500); // two heartbeats seen by both managers: the period is known
      const { pod, holder } = await runningShare('stalled', 'vol-s', 'node-1');
      await holder.stop();
      const replacement = await waitForReplacement(kc, 'stalled', 'vol-s', pod.metadata?.name ?? '');
      // Scheduled and running on a healthy node, its agent still waiting (a slow attach).
      await runPodOn(kc, replacement, 'node-2');
      const marked = await readLease(kc, 'stalled', 'vol-s');
      assert.ok(marked.delinquentSince && marked.failoverBy, 'marked before the replacement');
      await sleep(1_000);

      // Stalled longer than D + P: every timer they set is due when they resume, and runs
      // before the heartbeat events queued meanwhile are read (libuv's poll returns EINTR).
      signal('SIGSTOP');
      await sleep(20_000);
      signal('SIGCONT');
      await sleep(3 * D_MS);

      const alive = (await podsOf(kc, 'stalled', 'vol-s')).find(
        (p) => p.metadata?.name === replacement.metadata?.name,
      );
      assert.ok(alive && !alive.metadata?.deletionTimestamp, 'the healthy replacement was not deleted');
      const lease = await readLease(kc, 'stalled', 'vol-s');
      assert.equal(lease.failoverBy, marked.failoverBy, 'no takeover of a healthy owner');
      for (const m of managers) {
        const lines = await m.lines();
        const lost = lines.filter(
          (l) =>
            l.msg === 'replacement lost with its node before its agent acquired' ||
            l.msg === 'failover owner lost with its node: taking over',
        );
        assert.deepEqual(lost, [], `${m.name} judged a healthy node lost`);
      }
      // Not stranded either: the replacement's agent acquires, the failover completes.
      holders.push(
        new HolderLoop(kc, 'stalled', 'vol-s', replacement.metadata?.name ?? '', 'node-2', 1000).start(),
      );
      await eventually(
        'completion',
        async () => {
          const s = await getShareManager(kc, 'stalled', 'vol-s');
          return s.status?.state === 'Running' && s.status.lastFailover?.completedAt ? true : undefined;
        },
        15_000,
      );
      t.diagnostic(`replacement ${replacement.metadata?.name} kept through a 20 s stall`);
    } finally {
      try {
        signal('SIGCONT');
      } catch {}
      for (const m of managers) await m.kill();
    }
  });

  it('a failover step that keeps failing (the replacement refused by a quota: 403) backs off and says so once; it completes when the quota goes', async (t) => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'stepquota');
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const manager = startManager(cluster(), 'sq', { LEASEHOLD_WATCH_NAMESPACE: 'stepquota' });
    try {
      const { pod, holder } = await runningShare('stepquota', 'vol-q', 'node-1');
      // No new pod may be created from now on (the running one stays: quotas are not retroactive).
      await core.createNamespacedResourceQuota({
        namespace: 'stepquota',
        body: { metadata: { name: 'no-pods' }, spec: { hard: { pods: '0' } } },
      });
      await holder.stop();
      await eventually(
        'the lost pod force-deleted',
        async () =>
          (await podsOf(kc, 'stepquota', 'vol-q')).some((p) => p.metadata?.name === pod.metadata?.name)
            ? undefined
            : true,
        20_000,
      );
      const event = await eventually(
        'a FailoverStepFailing Warning',
        async () =>
          (await eventsFor(kc, 'stepquota', 'vol-q')).find((e) => e.reason === 'FailoverStepFailing'),
        20_000,
      );
      assert.equal(event.type, 'Warning');
      assert.match(event.message ?? '', /HTTP 403/, event.message);
      const failures = async () =>
        (await manager.lines()).filter(
          (l) => l.msg === 'failover step failed; will retry' && l.lease === 'stepquota/vol-q',
        ).length;
      const before = await failures();
      await sleep(10_000);
      const during = (await failures()) - before;
      t.diagnostic(`${during} failed attempts in 10 s`);
      assert.ok(during <= 6, `${during} failed attempts in 10 s: a fixed 500 ms retry makes 20`);
      assert.equal(
        (await eventsFor(kc, 'stepquota', 'vol-q')).filter((e) => e.reason === 'FailoverStepFailing').length,
        1,
        'said once while the error stays the same',
      );

      await core.deleteNamespacedResourceQuota({ namespace: 'stepquota', name: 'no-pods' });
      const replacement = await waitForReplacement(
        kc,
        'stepquota',
        'vol-q',
        pod.metadata?.name ?? '',
        20_000,
      );
      await runPodOn(kc, replacement, 'node-2');
      holders.push(
        new HolderLoop(kc, 'stepquota', 'vol-q', replacement.metadata?.name ?? '', 'node-2', 1000).start(),
      );
      await eventually(
        'completion',
        async () => {
          const s = await getShareManager(kc, 'stepquota', 'vol-q');
          return s.status?.state === 'Running' && s.status.lastFailover?.completedAt ? true : undefined;
        },
        15_000,
      );
    } finally {
      await manager.kill();
    }
  });

  it('20 share managers on one node, one lease stale: only it moves; a manager restart touches nothing', async (t) => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'twenty');
    const env = { LEASEHOLD_WATCH_NAMESPACE: 'twenty' };
    let manager = startManager(cluster(), 't1', env);
    try {
      const names = Array.from({ length: 20 }, (_, i) => `vol-${String(i).padStart(2, '0')}`);
      const shares = new Map<string, { pod: k8s.V1Pod; holder: HolderLoop }>();
      await Promise.all(
        names.map(async (name) => shares.set(name, await runningShare('twenty', name, 'node-1'))),
      );
      const victim = 'vol-07';
      const lost = shares.get(victim);
      assert.ok(lost);
      await lost.holder.stop();
      const replacement = await waitForReplacement(kc, 'twenty', victim, lost.pod.metadata?.name ?? '');
      await runPodOn(kc, replacement, 'node-2');
      holders.push(
        new HolderLoop(kc, 'twenty', victim, replacement.metadata?.name ?? '', 'node-2', 1000).start(),
      );
      await eventually(
        'the victim Running again',
        async () => {
          const s = await getShareManager(kc, 'twenty', victim);
          return s.status?.state === 'Running' && s.status.lastFailover?.completedAt ? true : undefined;
        },
        15_000,
      );

      const snapshot = async () => {
        const all = await kc.makeApiClient(k8s.CoreV1Api).listNamespacedPod({ namespace: 'twenty' });
        return all.items
          .map((p) => `${p.metadata?.name}/${p.metadata?.uid}/${p.metadata?.deletionTimestamp ?? ''}`)
          .sort();
      };
      const before = await snapshot();
      assert.equal(before.length, 20);
      for (const name of names) {
        if (name === victim) continue;
        const lease = await readLease(kc, 'twenty', name);
        assert.equal(lease.delinquentSince, undefined, `${name} never marked`);
        assert.equal(lease.holder, shares.get(name)?.pod.metadata?.name, `${name} kept its pod`);
      }

      // A manager restart (a rolling upgrade): no pod touched, no lease marked.
      await manager.kill('SIGTERM');
      manager = startManager(cluster(), 't2', env);
      await sleep(3 * D_MS);
      // A holder the loaded machine kept from renewing for D (the test plays it) may rightly
      // have failed over meanwhile (CI, 2026-12-01, under load): excused, if few, only such a one.
      const excused = names.filter((n) => n !== victim && shares.get(n)?.holder.hasLapsed());
      assert.ok(excused.length <= 2, `${excused.length} holders could not renew for D: too loaded`);
      if (excused.length > 0) t.diagnostic(`lapsed holders excused: ${excused.join(', ')}`);
      const ofKept = (pods: string[]) => pods.filter((p) => !excused.some((n) => p.startsWith(`${n}-`)));
      assert.deepEqual(ofKept(await snapshot()), ofKept(before), 'no pod touched by the restart');
      for (const name of names) {
        if (excused.includes(name)) continue;
        const lease = await readLease(kc, 'twenty', name);
        assert.equal(lease.delinquentSince, undefined, `${name} not marked after the restart`);
        assert.equal((await getShareManager(kc, 'twenty', name)).status?.state, 'Running');
      }
      const stale = (await manager.lines()).filter(
        (l) => l.msg === 'lease stale by our observation' && !excused.some((n) => l.lease === `twenty/${n}`),
      );
      assert.deepEqual(stale, [], 'the restarted manager declared nothing stale');
    } finally {
      await manager.kill();
    }
  });
});
