/**
 * The manager's modes and guards against the real API server: a bad spec is refused
 * (by the schema or with status Error) without disturbing anything else; the Fencing
 * condition and the FenceDisabled warning of an explicit `fence.action: none`;
 * observe-only records what it would do and touches nothing; a ShareManager with only
 * `spec.volume` gets the shipped NFS server, a Service with a ClusterIP on 2049 and
 * status.export (and its printer column); `spec.consumer` publishes it as an RWX
 * PersistentVolume + claim that the real PV controller binds, repaired after edits,
 * never taken from someone else, and removed with the field or the ShareManager, by a
 * manager holding exactly the chart's RBAC. The
 * test plays pods and agents. NB: no test mounts the PV in a pod (no kernel NFS client
 * on these machines).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { applyChartManagerIdentity } from '../../dev/system/chart-manager-identity.ts';
import { sleep } from '../../lib/clock.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import {
  createNamespace,
  createShareManager,
  eventsFor,
  FAST_LEASE,
  FAST_LEASE_D_MS,
  getShareManager,
  type HolderLoop,
  kubectl,
  podsOf,
  readLease,
  runningShare as runningShareOn,
  shareManagerBody,
  startManager,
  useManagerFixture,
  waitForPods,
} from './manager-harness.ts';

const cluster = useCluster({ scheduler: false });
const LEASE = FAST_LEASE;
const D_MS = FAST_LEASE_D_MS;
const holders: HolderLoop[] = [];

function runningShare(namespace: string, name: string, node: string) {
  return runningShareOn(cluster().kubeConfig, { namespace, name, node, lease: LEASE }, holders);
}

describe('manager modes', () => {
  useManagerFixture(cluster, ['node-1', 'node-3'], holders);

  it('a bad spec is rejected by the API or gets status Error; nothing else is disturbed', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'bad');
    const manager = startManager(cluster(), 'b1', { LEASEHOLD_WATCH_NAMESPACE: 'bad' });
    try {
      const good = await runningShare('bad', 'vol-good', 'node-3');
      const noImage = shareManagerBody({ namespace: 'bad', name: 'no-image' }) as {
        spec: { server: Record<string, unknown> };
      };
      delete noImage.spec.server.image;
      const rejected = await kubectl(cluster(), ['apply', '-f', '-'], JSON.stringify(noImage));
      assert.notEqual(rejected.code, 0);
      assert.match(rejected.stderr, /spec\.server\.image: Required value/);
      const badDuration = shareManagerBody({
        namespace: 'bad',
        name: 'bad-duration',
        lease: { duration: '6 seconds' },
      });
      const rejected2 = await kubectl(cluster(), ['apply', '-f', '-'], JSON.stringify(badDuration));
      assert.notEqual(rejected2.code, 0);
      assert.match(rejected2.stderr, /spec\.lease\.duration/);

      // Accepted by the schema, refused by the cross-field rule (D=3s is not > default T=4s).
      await createShareManager(kc, { namespace: 'bad', name: 'bad-timing', lease: { duration: '3s' } });
      const sm = await eventually('status Error', async () => {
        const s = await getShareManager(kc, 'bad', 'bad-timing');
        return s.status?.state === 'Error' ? s : undefined;
      });
      assert.match(
        sm.status?.message ?? '',
        /lease duration 3s > renew deadline 4s > renew interval 2s must hold/,
      );
      await sleep(1000);
      assert.deepEqual(await podsOf(kc, 'bad', 'bad-timing'), [], 'no pod for a bad spec');
      await assert.rejects(readLease(kc, 'bad', 'bad-timing'), 'no lease for a bad spec');

      // Accepted by the schema, refused by the agent's own rules (issue 27 item 8): the
      // manager runs the agent's reader over the env it derives.
      await createShareManager(kc, {
        namespace: 'bad',
        name: 'bad-signal',
        extra: { fence: { action: 'pod', signal: 'SIGFOO' } },
      });
      const badSignal = await eventually('status Error for SIGFOO', async () => {
        const s = await getShareManager(kc, 'bad', 'bad-signal');
        return s.status?.state === 'Error' ? s : undefined;
      });
      assert.match(
        badSignal.status?.message ?? '',
        /spec\.fence\.signal="SIGFOO": the agent would refuse it at start/,
      );
      // Accepted by the schema and by every rule of ours, refused by the API server's
      // validation of the derived pod (an env name with "=" and a duplicate port name):
      // found by a dry run before any Lease or Service exists.
      await createShareManager(kc, {
        namespace: 'bad',
        name: 'bad-pod',
        extra: {
          server: {
            image: 'leasehold.dev/demo-share-server:dev',
            ports: [
              { name: 'http', containerPort: 8080 },
              { name: 'http', containerPort: 8081 },
            ],
            env: [{ name: 'A=B', value: 'x' }],
          },
        },
      });
      const badPod = await eventually('status Error from the dry run', async () => {
        const s = await getShareManager(kc, 'bad', 'bad-pod');
        return s.status?.state === 'Error' ? s : undefined;
      });
      assert.match(badPod.status?.message ?? '', /the API server refuses the share's pod: .*A=B/);
      await sleep(1000);
      assert.deepEqual(await podsOf(kc, 'bad', 'bad-pod'), [], 'no pod');
      await assert.rejects(readLease(kc, 'bad', 'bad-pod'), 'no lease');
      await assert.rejects(
        kc.makeApiClient(k8s.CoreV1Api).readNamespacedService({ namespace: 'bad', name: 'bad-pod' }),
        'no Service',
      );
      const pods = await podsOf(kc, 'bad', 'vol-good');
      assert.deepEqual(
        pods.map((p) => p.metadata?.uid),
        [good.pod.metadata?.uid],
        'the good share manager is untouched',
      );
      assert.equal((await getShareManager(kc, 'bad', 'vol-good')).status?.state, 'Running');
    } finally {
      await manager.kill();
    }
  });

  it('fencing: the default is Fencing=True; an explicit none is Fencing=False with one Warning event', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'fencing');
    const manager = startManager(cluster(), 'f1', { LEASEHOLD_WATCH_NAMESPACE: 'fencing' });
    try {
      await createShareManager(kc, { namespace: 'fencing', name: 'vol-default' });
      await createShareManager(kc, {
        namespace: 'fencing',
        name: 'vol-none',
        extra: { fence: { action: 'none' } },
      });
      const fencing = (name: string) =>
        eventually(`the Fencing condition of ${name}`, async () =>
          (await getShareManager(kc, 'fencing', name)).status?.conditions?.find((c) => c.type === 'Fencing'),
        );
      const byDefault = await fencing('vol-default');
      assert.equal(byDefault.status, 'True');
      assert.equal(byDefault.reason, 'FencePod');
      const none = await fencing('vol-none');
      assert.equal(none.status, 'False');
      assert.equal(none.reason, 'FenceDisabled');
      assert.match(none.message ?? '', /keeps running/);
      assert.ok(none.lastTransitionTime, 'stamped when set');
      const warned = await eventually('a FenceDisabled event', async () => {
        const list = (await eventsFor(kc, 'fencing', 'vol-none')).filter((e) => e.reason === 'FenceDisabled');
        return list.length > 0 ? list : undefined;
      });
      assert.equal(warned[0]?.type, 'Warning');
      const pod = (await podsOf(kc, 'fencing', 'vol-none'))[0];
      const env = pod?.spec?.initContainers?.[0]?.env ?? [];
      assert.equal(
        env.find((e) => e.name === 'LEASEHOLD_FENCE_ACTION')?.value,
        'none',
        'honoured as written',
      );
      const defaultPod = (await podsOf(kc, 'fencing', 'vol-default'))[0];
      assert.equal(
        defaultPod?.spec?.initContainers?.[0]?.env?.find((e) => e.name === 'LEASEHOLD_FENCE_ACTION')?.value,
        'pod',
      );
      await sleep(2_000); // further passes (status writes, pod events) must not repeat the event
      assert.equal(
        (await eventsFor(kc, 'fencing', 'vol-none')).filter((e) => e.reason === 'FenceDisabled').length,
        1,
        'one event per change, not per pass',
      );
    } finally {
      await manager.kill();
    }
  });

  it('observe-only: records what it would do and touches nothing', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'observe');
    const manager = startManager(cluster(), 'obs1', {
      LEASEHOLD_WATCH_NAMESPACE: 'observe',
      LEASEHOLD_OBSERVE_ONLY: 'true',
    });
    try {
      const { pod, holder } = await runningShare('observe', 'vol-o', 'node-1');
      await holder.stop();
      const events = await eventually(
        'a WouldFailOver event',
        async () => {
          const list = await eventsFor(kc, 'observe', 'vol-o');
          return list.some((e) => e.reason === 'WouldFailOver') ? list : undefined;
        },
        15_000,
      );
      assert.match(
        events.find((e) => e.reason === 'WouldFailOver')?.message ?? '',
        /observe-only: .*would mark it delinquent/,
      );
      await sleep(2 * D_MS);
      const lease = await readLease(kc, 'observe', 'vol-o');
      assert.equal(lease.delinquentSince, undefined, 'no mark');
      assert.equal(lease.holder, pod.metadata?.name);
      const pods = await podsOf(kc, 'observe', 'vol-o');
      assert.deepEqual(
        pods.map((p) => p.metadata?.uid),
        [pod.metadata?.uid],
        'the pod is untouched, no replacement',
      );
      assert.equal(
        (await eventsFor(kc, 'observe', 'vol-o')).filter((e) => e.reason === 'WouldFailOver').length,
        1,
        'recorded once',
      );
    } finally {
      await manager.kill();
    }
  });

  it('no spec.server: the shipped NFS server, a Service with a ClusterIP on 2049, status.export', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'nfs');
    const image = 'registry.example/nfs-ganesha:it';
    const manager = startManager(cluster(), 'n1', {
      LEASEHOLD_WATCH_NAMESPACE: 'nfs',
      LEASEHOLD_NFS_SERVER_IMAGE: image,
    });
    try {
      const objects = kc.makeApiClient(k8s.CustomObjectsApi);
      const create = (name: string, volume: Record<string, string>) =>
        objects.createNamespacedCustomObject({
          group: 'leasehold.dev',
          version: 'v1alpha1',
          namespace: 'nfs',
          plural: 'sharemanagers',
          body: {
            apiVersion: 'leasehold.dev/v1alpha1',
            kind: 'ShareManager',
            metadata: { name, namespace: 'nfs' },
            spec: { volume, lease: LEASE },
          },
        });
      // Accepted by the API server without spec.server (the CRD no longer requires it).
      await create('vol-nfs', { pvc: 'data-nfs', mountPath: '/srv/share' });
      const [pod] = await waitForPods(kc, 'nfs', 'vol-nfs', 1);
      const server = pod?.spec?.containers.find((c) => c.name === 'server');
      assert.equal(server?.image, image);
      assert.deepEqual(
        server?.ports?.map((p) => ({ ...p })),
        [
          { name: 'nfs', containerPort: 2049, protocol: 'TCP' },
          { name: 'nfs-metrics', containerPort: 9587, protocol: 'TCP' },
        ],
      );
      const serverEnv = Object.fromEntries((server?.env ?? []).map((e) => [e.name, e.value]));
      assert.equal(serverEnv.LEASEHOLD_NFS_EXPORT_PATH, '/srv/share');
      assert.equal(
        serverEnv.LEASEHOLD_NFS_METRICS_PORT,
        '9587',
        'metrics on, at the port the PodMonitor scrapes',
      );
      assert.deepEqual(server?.securityContext?.capabilities?.add, [
        'CHOWN',
        'DAC_OVERRIDE',
        'DAC_READ_SEARCH',
        'FOWNER',
        'FSETID',
        'SETGID',
        'SETUID',
      ]);
      assert.equal(server?.securityContext?.readOnlyRootFilesystem, true);
      const agentEnv = Object.fromEntries(
        (pod?.spec?.initContainers?.[0]?.env ?? []).map((e) => [e.name, e.value]),
      );
      assert.equal(agentEnv.LEASEHOLD_SERVER_CHECK, 'tcp://127.0.0.1:2049');
      assert.equal(agentEnv.LEASEHOLD_SERVER_CHECK_TIMEOUT, '500ms', 'below T - R = 1s of FAST_LEASE');
      assert.equal(agentEnv.LEASEHOLD_FENCE_ACTION, 'pod');

      const service = await kc
        .makeApiClient(k8s.CoreV1Api)
        .readNamespacedService({ namespace: 'nfs', name: 'vol-nfs' });
      const clusterIP = service.spec?.clusterIP ?? '';
      assert.match(clusterIP, /^\d+\.\d+\.\d+\.\d+$/, `a ClusterIP, not headless: ${clusterIP}`);
      assert.deepEqual(
        service.spec?.ports?.map((p) => [p.name, p.port, p.targetPort, p.protocol]),
        [['nfs', 2049, 2049, 'TCP']],
      );
      const published = await eventually('status.export', async () => {
        const s = await getShareManager(kc, 'nfs', 'vol-nfs');
        return s.status?.export as Record<string, unknown> | undefined;
      });
      assert.deepEqual(published, {
        clusterIP,
        port: 2049,
        path: '/srv/share',
        source: `${clusterIP}:/srv/share`,
        mountOptions: 'nfsvers=4.1,proto=tcp,hard,timeo=20,retrans=2,noresvport',
      });
      const table = await kubectl(cluster(), ['get', 'sm', '-n', 'nfs', 'vol-nfs', '-o', 'wide']);
      assert.equal(table.code, 0, table.stderr);
      assert.match(table.stdout, /EXPORT\s+OPTIONS/);
      assert.match(
        table.stdout,
        new RegExp(`${clusterIP.replaceAll('.', '\\.')}:/srv/share\\s+nfsvers=4\\.1,`),
      );

      // A user's own server: exactly as written, and no status.export (we do not know its protocol).
      await createShareManager(kc, { namespace: 'nfs', name: 'vol-own', lease: LEASE });
      const [own] = await waitForPods(kc, 'nfs', 'vol-own', 1);
      assert.equal(own?.spec?.containers[0]?.image, 'leasehold.dev/demo-share-server:dev');
      assert.equal(
        own?.spec?.initContainers?.[0]?.env?.find((e) => e.name === 'LEASEHOLD_SERVER_CHECK'),
        undefined,
        'no check preset for a user server',
      );
      await eventually('vol-own reconciled', async () =>
        (await getShareManager(kc, 'nfs', 'vol-own')).status?.state === 'Pending' ? true : undefined,
      );
      await sleep(500);
      assert.equal((await getShareManager(kc, 'nfs', 'vol-own')).status?.export, undefined);

      // Switching vol-nfs to a server of its own removes status.export (null in the merge patch).
      await objects.patchNamespacedCustomObject(
        {
          group: 'leasehold.dev',
          version: 'v1alpha1',
          namespace: 'nfs',
          plural: 'sharemanagers',
          name: 'vol-nfs',
          body: { spec: { server: { image: 'registry.example/own-nfs:1' } } },
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      await eventually('status.export removed', async () =>
        (await getShareManager(kc, 'nfs', 'vol-nfs')).status?.export === undefined ? true : undefined,
      );

      // A Service of the share's name made by someone else: never used (no status.export
      // pointing at it), not adopted, a condition and a Warning event saying so; once it
      // is deleted the manager makes its own and publishes that.
      const core = kc.makeApiClient(k8s.CoreV1Api);
      await core.createNamespacedService({
        namespace: 'nfs',
        body: {
          metadata: { name: 'vol-squat' },
          spec: { selector: { app: 'someone-else' }, ports: [{ name: 'web', port: 80 }] },
        },
      });
      await create('vol-squat', { pvc: 'data-squat' });
      const takenBy = await eventually('Service=False ServiceTaken', async () => {
        const c = (await getShareManager(kc, 'nfs', 'vol-squat')).status?.conditions?.find(
          (x) => x.type === 'Service',
        );
        return c?.reason === 'ServiceTaken' ? c : undefined;
      });
      assert.equal(takenBy.status, 'False');
      assert.match(
        takenBy.message ?? '',
        /Service nfs\/vol-squat exists and was not created by this ShareManager/,
      );
      await eventually('a ServiceTaken Warning event', async () =>
        (await eventsFor(kc, 'nfs', 'vol-squat')).find(
          (e) => e.reason === 'ServiceTaken' && e.type === 'Warning',
        ),
      );
      await sleep(1_000);
      assert.equal(
        (await getShareManager(kc, 'nfs', 'vol-squat')).status?.export,
        undefined,
        'no status.export at a Service that is not its own',
      );
      const squat = await core.readNamespacedService({ namespace: 'nfs', name: 'vol-squat' });
      assert.equal(squat.metadata?.ownerReferences, undefined, 'not adopted');
      assert.deepEqual(squat.spec?.selector, { app: 'someone-else' }, 'left as its owner made it');
      await core.deleteNamespacedService({ namespace: 'nfs', name: 'vol-squat' });
      const mine = await eventually(
        "vol-squat's own Service, published",
        async () => {
          const s = await getShareManager(kc, 'nfs', 'vol-squat');
          const svc = await core
            .readNamespacedService({ namespace: 'nfs', name: 'vol-squat' })
            .catch(() => undefined);
          return s.status?.export && svc?.metadata?.ownerReferences?.[0]?.uid === s.metadata.uid
            ? { s, svc }
            : undefined;
        },
        30_000,
      );
      assert.equal(
        (mine.s.status?.export as { clusterIP?: string } | undefined)?.clusterIP,
        mine.svc?.spec?.clusterIP,
      );
      assert.equal(
        mine.s.status?.conditions?.find((c) => c.type === 'Service'),
        undefined,
        'the condition removed',
      );

      // A mount path the shipped server refuses is a spec error naming the field; no pod.
      await create('vol-root', { pvc: 'data-root', mountPath: '/' });
      const refused = await eventually('status Error for mountPath /', async () => {
        const s = await getShareManager(kc, 'nfs', 'vol-root');
        return s.status?.state === 'Error' ? s : undefined;
      });
      assert.match(refused.status?.message ?? '', /spec\.volume\.mountPath="\/": the shipped NFS server/);
      assert.deepEqual(await podsOf(kc, 'nfs', 'vol-root'), []);
    } finally {
      await manager.kill();
    }
  });

  it("the share's own Service: deleted -> re-created at the address clients mounted; changed -> put back; that address taken -> a new one that status.export follows", async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'svc');
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const env = { LEASEHOLD_WATCH_NAMESPACE: 'svc' };
    let manager = startManager(cluster(), 'v1', env);
    try {
      await kc.makeApiClient(k8s.CustomObjectsApi).createNamespacedCustomObject({
        group: 'leasehold.dev',
        version: 'v1alpha1',
        namespace: 'svc',
        plural: 'sharemanagers',
        body: {
          apiVersion: 'leasehold.dev/v1alpha1',
          kind: 'ShareManager',
          metadata: { name: 'vol-svc', namespace: 'svc' },
          spec: { volume: { pvc: 'data-svc' }, lease: LEASE },
        },
      });
      const exportOf = async () =>
        (await getShareManager(kc, 'svc', 'vol-svc')).status?.export as { clusterIP?: string } | undefined;
      const published = (await eventually('status.export', exportOf))?.clusterIP ?? '';
      const first = await core.readNamespacedService({ namespace: 'svc', name: 'vol-svc' });
      assert.equal(first.spec?.clusterIP, published);

      // Deleted: re-created (a new object) at the address clients mounted; status.export unchanged.
      await core.deleteNamespacedService({ namespace: 'svc', name: 'vol-svc' });
      const again = await eventually(
        'the Service re-created',
        async () => {
          const svc = await core
            .readNamespacedService({ namespace: 'svc', name: 'vol-svc' })
            .catch(() => undefined);
          return svc && svc.metadata?.uid !== first.metadata?.uid ? svc : undefined;
        },
        15_000,
      );
      const addressEvents = (await eventsFor(kc, 'svc', 'vol-svc')).filter(
        (e) => e.reason === 'ServiceAddressChanged',
      );
      assert.equal(
        again.spec?.clusterIP,
        published,
        `the address clients mounted; ${JSON.stringify(addressEvents.map((e) => e.message))}`,
      );
      assert.equal((await exportOf())?.clusterIP, published);

      // Changed by hand: the selector removed and the ports put back, the address kept.
      await core.patchNamespacedService(
        {
          namespace: 'svc',
          name: 'vol-svc',
          body: {
            spec: {
              selector: { app: 'elsewhere' },
              publishNotReadyAddresses: false,
              ports: [{ name: 'nfs', port: 2050, targetPort: 2050, protocol: 'TCP' }],
            },
          },
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      const repaired = await eventually(
        'the Service put back',
        async () => {
          const svc = await core.readNamespacedService({ namespace: 'svc', name: 'vol-svc' });
          return svc.spec?.selector === undefined && svc.spec?.ports?.[0]?.port === 2049 ? svc : undefined;
        },
        15_000,
      );
      assert.equal(repaired.spec?.selector, undefined);
      assert.equal(repaired.spec?.clusterIP, published);
      const said = await eventually('a ServiceRepaired event', async () =>
        (await eventsFor(kc, 'svc', 'vol-svc')).find((e) => e.reason === 'ServiceRepaired'),
      );
      assert.match(said.message ?? '', /spec\.selector, spec\.ports\)/);

      // Deleted while no manager runs, its address taken meanwhile: a new address, and
      // status.export follows it; a Warning says clients at the old one must remount.
      await manager.kill();
      await core.deleteNamespacedService({ namespace: 'svc', name: 'vol-svc' });
      await eventually('the Service gone', async () =>
        (await core.readNamespacedService({ namespace: 'svc', name: 'vol-svc' }).catch(() => undefined))
          ? undefined
          : true,
      );
      await core.createNamespacedService({
        namespace: 'svc',
        body: { metadata: { name: 'squatter' }, spec: { clusterIP: published, ports: [{ port: 80 }] } },
      });
      manager = startManager(cluster(), 'v2', env);
      const moved = await eventually(
        'a new Service and status.export at its address',
        async () => {
          const svc = await core
            .readNamespacedService({ namespace: 'svc', name: 'vol-svc' })
            .catch(() => undefined);
          const ip = (await exportOf())?.clusterIP;
          return svc?.spec?.clusterIP && ip === svc.spec.clusterIP ? ip : undefined;
        },
        20_000,
      );
      assert.notEqual(moved, published);
      const changed = await eventually('a ServiceAddressChanged Warning', async () =>
        (await eventsFor(kc, 'svc', 'vol-svc')).find((e) => e.reason === 'ServiceAddressChanged'),
      );
      assert.equal(changed.type, 'Warning');
      assert.ok(
        changed.message?.includes(`${published}`) && changed.message.includes(moved),
        changed.message,
      );
    } finally {
      await manager.kill();
    }
  });

  it('a reconcile that keeps failing (pods refused by a quota: 403) backs off and says why: condition and event; once it goes through they are gone', async (t) => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'quota');
    const core = kc.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedResourceQuota({
      namespace: 'quota',
      body: { metadata: { name: 'no-pods' }, spec: { hard: { pods: '0' } } },
    });
    const manager = startManager(cluster(), 'q1', { LEASEHOLD_WATCH_NAMESPACE: 'quota' });
    try {
      await createShareManager(kc, { namespace: 'quota', name: 'vol-q', lease: LEASE });
      const failing = await eventually(
        'Reconciled=False ReconcileFailing',
        async () =>
          (await getShareManager(kc, 'quota', 'vol-q')).status?.conditions?.find(
            (c) => c.type === 'Reconciled' && c.reason === 'ReconcileFailing',
          ),
        20_000,
      );
      assert.equal(failing.status, 'False');
      assert.match(failing.message ?? '', /HTTP 403/, failing.message);
      const event = await eventually('a ReconcileFailing Warning', async () =>
        (await eventsFor(kc, 'quota', 'vol-q')).find((e) => e.reason === 'ReconcileFailing'),
      );
      assert.equal(event.type, 'Warning');
      // Backing off: few passes over 12 s (a fixed 500 ms retry would make ~24).
      const failedPasses = async () =>
        (await manager.lines()).filter(
          (l) => l.msg === 'reconcile failed; will retry with backoff' && l.sm === 'quota/vol-q',
        ).length;
      const before = await failedPasses();
      await sleep(12_000);
      const during = (await failedPasses()) - before;
      t.diagnostic(`${during} failed passes in 12 s`);
      assert.ok(during <= 6, `${during} failed passes in 12 s: no backoff`);
      const events = (await eventsFor(kc, 'quota', 'vol-q')).filter((e) => e.reason === 'ReconcileFailing');
      assert.equal(events.length, 1, 'said once while the error stays the same');
      assert.ok((events[0]?.count ?? 1) <= 1, 'not repeated');

      // The quota lifted: the pod is created and the condition goes.
      await core.deleteNamespacedResourceQuota({ namespace: 'quota', name: 'no-pods' });
      await waitForPods(kc, 'quota', 'vol-q', 1, 40_000);
      await eventually(
        'the condition removed',
        async () =>
          (await getShareManager(kc, 'quota', 'vol-q')).status?.conditions?.some(
            (c) => c.type === 'Reconciled',
          )
            ? undefined
            : true,
        15_000,
      );
    } finally {
      await manager.kill();
    }
  });

  it('spec.consumer: an RWX PV + claim, bound, repaired, never stolen, removed, with the chart RBAC', async () => {
    // Cost: 5-7 s measured (the helm render and the manager's start about 2 s of it), up
    // to 18 s while other test runs load the machine. It reuses this file's cluster.
    const kc = cluster().kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const objects = kc.makeApiClient(k8s.CustomObjectsApi);
    const ns = 'consumer';
    await createNamespace(kc, ns);
    // The manager runs as the chart's manager ServiceAccount, with exactly its RBAC.
    const managerKubeconfig = join(cluster().dir, 'consumer-manager.kubeconfig');
    await applyChartManagerIdentity(cluster(), {
      namespace: 'leasehold-system',
      kubeconfigPath: managerKubeconfig,
      expirationSeconds: 600,
    });
    const manager = startManager(cluster(), 'c1', {
      KUBECONFIG: managerKubeconfig,
      LEASEHOLD_WATCH_NAMESPACE: ns,
      LEASEHOLD_NFS_SERVER_IMAGE: 'registry.example/nfs-ganesha:it',
    });
    const target = { group: 'leasehold.dev', version: 'v1alpha1', namespace: ns, plural: 'sharemanagers' };
    const mergePatch = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
    const create = (name: string, spec: Record<string, unknown>) =>
      objects.createNamespacedCustomObject({
        ...target,
        body: {
          apiVersion: 'leasehold.dev/v1alpha1',
          kind: 'ShareManager',
          metadata: { name, namespace: ns },
          spec,
        },
      });
    const gone = async (read: () => Promise<unknown>) => {
      try {
        await read();
        return undefined;
      } catch (err) {
        return (err as { code?: number }).code === 404 ? true : undefined;
      }
    };
    const condition = async (name: string) =>
      (await getShareManager(kc, ns, name)).status?.conditions?.find((c) => c.type === 'ConsumerClaim');
    try {
      // The backing claim (never bound here: no provisioner); its size is the PV's capacity.
      await core.createNamespacedPersistentVolumeClaim({
        namespace: ns,
        body: {
          metadata: { name: 'data-c' },
          spec: {
            accessModes: ['ReadWriteOnce'],
            storageClassName: 'block',
            resources: { requests: { storage: '3Gi' } },
          },
        },
      });
      await create('vol-c', { volume: { pvc: 'data-c' }, lease: LEASE, consumer: { claimName: 'shared' } });
      const pvName = 'leasehold.consumer.vol-c';
      const bound = await eventually('claim shared Bound to the PV', async () => {
        const claim = await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: 'shared' });
        return claim.status?.phase === 'Bound' ? claim : undefined;
      });
      const clusterIP = (await core.readNamespacedService({ namespace: ns, name: 'vol-c' })).spec?.clusterIP;
      const pv = await core.readPersistentVolume({ name: pvName });
      assert.deepEqual({ ...pv.spec?.nfs }, { server: clusterIP, path: '/export' });
      assert.deepEqual(pv.spec?.accessModes, ['ReadWriteMany']);
      assert.equal(pv.spec?.persistentVolumeReclaimPolicy, 'Retain');
      assert.deepEqual(pv.spec?.mountOptions, [
        'nfsvers=4.1',
        'proto=tcp',
        'hard',
        'timeo=20',
        'retrans=2',
        'noresvport',
      ]);
      assert.equal(String(pv.spec?.capacity?.storage), '3Gi');
      assert.equal(pv.spec?.claimRef?.uid, bound.metadata?.uid, 'pre-bound to exactly our claim');
      assert.equal(pv.status?.phase, 'Bound');
      assert.equal(bound.spec?.volumeName, pvName);
      assert.equal(bound.spec?.storageClassName, '');
      assert.deepEqual(bound.spec?.accessModes, ['ReadWriteMany']);
      const sm = await getShareManager(kc, ns, 'vol-c');
      assert.equal(bound.metadata?.ownerReferences?.[0]?.uid, sm.metadata.uid);
      assert.ok(sm.metadata.finalizers?.includes('leasehold.dev/consumer-volume'));
      const published = await eventually('ConsumerClaim=True', async () => {
        const c = await condition('vol-c');
        return c?.status === 'True' ? c : undefined;
      });
      assert.equal(published.reason, 'Published');

      // Drift of fields we own is repaired: the reclaim policy and mount options of the PV,
      // the labels of the claim (which takes it out of the manager's label-selected cache).
      await core.patchPersistentVolume(
        { name: pvName, body: { spec: { persistentVolumeReclaimPolicy: 'Delete', mountOptions: ['soft'] } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      await core.patchNamespacedPersistentVolumeClaim(
        { namespace: ns, name: 'shared', body: { metadata: { labels: null } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      await eventually('the PV repaired', async () => {
        const now = await core.readPersistentVolume({ name: pvName });
        return now.spec?.persistentVolumeReclaimPolicy === 'Retain' &&
          now.spec.mountOptions?.[0] === 'nfsvers=4.1'
          ? true
          : undefined;
      });
      await eventually('the claim labels repaired', async () =>
        (await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: 'shared' })).metadata
          ?.labels?.['leasehold.dev/consumer-of'] === 'vol-c'
          ? true
          : undefined,
      );
      // The event is recorded just after the update: wait for it, do not race it.
      await eventually('a ConsumerRepaired event naming the field', async () =>
        (await eventsFor(kc, ns, 'vol-c')).find(
          (e) => e.reason === 'ConsumerRepaired' && /persistentVolumeReclaimPolicy/.test(e.message ?? ''),
        ),
      );

      // Someone else's claim of the requested name: left alone, no PV, a condition naming it.
      await core.createNamespacedPersistentVolumeClaim({
        namespace: ns,
        body: {
          metadata: { name: 'mine' },
          spec: {
            accessModes: ['ReadWriteMany'],
            storageClassName: '',
            resources: { requests: { storage: '1Gi' } },
          },
        },
      });
      await create('vol-t', {
        volume: { pvc: 'data-c', mountPath: '/t' },
        lease: LEASE,
        consumer: { claimName: 'mine' },
      });
      const taken = await eventually('ConsumerClaim=False ClaimTaken', async () => {
        const c = await condition('vol-t');
        return c?.reason === 'ClaimTaken' ? c : undefined;
      });
      assert.equal(taken.status, 'False');
      assert.match(
        taken.message ?? '',
        /PersistentVolumeClaim consumer\/mine exists and was not created by this ShareManager/,
      );
      const mine = await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: 'mine' });
      assert.equal(mine.metadata?.ownerReferences, undefined, 'not adopted');
      assert.equal(mine.metadata?.annotations?.['leasehold.dev/share-manager-uid'], undefined);
      assert.ok(
        await gone(() => core.readPersistentVolume({ name: 'leasehold.consumer.vol-t' })),
        'no PV for it',
      );
      const warned = await eventually('a ClaimTaken Warning event', async () =>
        (await eventsFor(kc, ns, 'vol-t')).find((e) => e.reason === 'ClaimTaken'),
      );
      assert.equal(warned.type, 'Warning');

      // The field removed: claim and PV deleted, finalizer and condition removed.
      await objects.patchNamespacedCustomObject(
        { ...target, name: 'vol-c', body: { spec: { consumer: null } } },
        mergePatch,
      );
      await eventually('claim shared gone', () =>
        gone(() => core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: 'shared' })),
      );
      await eventually('PV gone', () => gone(() => core.readPersistentVolume({ name: pvName })));
      await eventually('finalizer and condition removed', async () => {
        const s = await getShareManager(kc, ns, 'vol-c');
        const left = s.metadata.finalizers?.includes('leasehold.dev/consumer-volume');
        return !left && !s.status?.conditions?.some((c) => c.type === 'ConsumerClaim') ? true : undefined;
      });

      // The field back, then the ShareManager deleted: claim and PV deleted before it goes.
      await objects.patchNamespacedCustomObject(
        { ...target, name: 'vol-c', body: { spec: { consumer: { claimName: 'shared' } } } },
        mergePatch,
      );
      await eventually('the PV again', async () =>
        (await core.readPersistentVolume({ name: pvName })).status?.phase === 'Bound' ? true : undefined,
      );
      await objects.deleteNamespacedCustomObject({ ...target, name: 'vol-c' });
      await eventually('vol-c gone', () =>
        gone(() => objects.getNamespacedCustomObject({ ...target, name: 'vol-c' })),
      );
      await eventually('its PV gone', () => gone(() => core.readPersistentVolume({ name: pvName })));
      await eventually('its claim gone', () =>
        gone(() => core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: 'shared' })),
      );

      // vol-t (nothing of its own to delete) goes too; the user's claim stays.
      await objects.deleteNamespacedCustomObject({ ...target, name: 'vol-t' });
      await eventually('vol-t gone', () =>
        gone(() => objects.getNamespacedCustomObject({ ...target, name: 'vol-t' })),
      );
      assert.equal(
        (await core.readNamespacedPersistentVolumeClaim({ namespace: ns, name: 'mine' })).metadata?.uid,
        mine.metadata?.uid,
      );
    } finally {
      await manager.kill();
    }
  });
});
