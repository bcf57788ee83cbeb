/**
 * The manager's modes and guards against the real API server: a bad spec is refused
 * (by the schema or with status Error) without disturbing anything else; the Fencing
 * condition and the FenceDisabled warning of an explicit `fence.action: none`;
 * observe-only records what it would do and touches nothing; a ShareManager with only
 * `spec.volume` gets the shipped NFS server, a Service with a ClusterIP on 2049 and
 * status.export (and its printer column). The test plays pods and agents.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
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
        [{ name: 'nfs', containerPort: 2049, protocol: 'TCP' }],
      );
      const serverEnv = Object.fromEntries((server?.env ?? []).map((e) => [e.name, e.value]));
      assert.equal(serverEnv.LEASEHOLD_NFS_EXPORT_PATH, '/srv/share');
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
        mountOptions: 'nfsvers=4.2,proto=tcp,hard,timeo=20,retrans=2,noresvport',
      });
      const table = await kubectl(cluster(), ['get', 'sm', '-n', 'nfs', 'vol-nfs', '-o', 'wide']);
      assert.equal(table.code, 0, table.stderr);
      assert.match(table.stdout, /EXPORT\s+OPTIONS/);
      assert.match(
        table.stdout,
        new RegExp(`${clusterIP.replaceAll('.', '\\.')}:/srv/share\\s+nfsvers=4\\.2,`),
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
});
