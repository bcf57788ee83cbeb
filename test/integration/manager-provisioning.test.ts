/**
 * Provisioning against the real API server, PV controller and garbage collector, by
 * managers holding exactly the chart's RBAC, with the chart's StorageClass: a claim of
 * the class gets a backing claim, a ShareManager and an nfs PV that the real PV
 * controller binds, with the external-provisioner's events; deleting the claim takes
 * the ShareManager (foreground), the backing claim and the PV away in that order; a bad
 * parameter is a ProvisioningFailed naming it, with nothing created; WaitForFirstConsumer
 * waits for the selected node and prefers it; Retain keeps it all; what a manager
 * killed after any step leaves is finished or cleaned by the next; one leader acts, and
 * another takes over when it dies.
 * NB: no scheduler or kubelet: share pods stay Pending (status.export needs only the
 * Service's ClusterIP), and backing claims stay unbound (no backing provisioner here;
 * the real-node e2e has one). No test mounts the PV (no kernel NFS client on the host).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { applyChartManagerIdentity } from '../../dev/system/chart-manager-identity.ts';
import { sleep } from '../../lib/clock.ts';
import { PROVISIONER_NAME } from '../../manager/provisioning/class-parameters.ts';
import {
  backingClaim,
  LABEL_PROVISIONED_FOR,
  provisionedShare,
} from '../../manager/provisioning/provisioned-objects.ts';
import { PROVISIONER_LEASE } from '../../manager/provisioning/provisioner-leadership.ts';
import type { ShareManager } from '../../manager/share-model/share-manager-spec.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import {
  applyCrd,
  createNamespace,
  type ManagerProcess,
  startManager,
  stopAllManagers,
} from './manager-harness.ts';

const cluster = useCluster({ scheduler: false });
const SYSTEM = 'leasehold-system';
const APPS = 'apps';
const CLASS = 'leasehold-rwx';
const SM = { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers' };

describe('provisioning from a StorageClass', () => {
  let kubeconfig = '';
  let core: k8s.CoreV1Api;
  let objects: k8s.CustomObjectsApi;

  before(async () => {
    const kc = cluster().kubeConfig;
    core = kc.makeApiClient(k8s.CoreV1Api);
    objects = kc.makeApiClient(k8s.CustomObjectsApi);
    await applyCrd(cluster());
    await createNamespace(kc, SYSTEM);
    await createNamespace(kc, APPS);
    // The chart's manager RBAC and StorageClass, rendered by helm, and its ServiceAccount's token.
    kubeconfig = join(cluster().dir, 'provisioner.kubeconfig');
    await applyChartManagerIdentity(cluster(), {
      namespace: SYSTEM,
      kubeconfigPath: kubeconfig,
      templates: ['templates/storage-class.yaml'],
    });
  });
  after(stopAllManagers);

  const manager = (name: string) =>
    startManager(cluster(), name, {
      KUBECONFIG: kubeconfig,
      LEASEHOLD_PROVISIONING: 'true',
      LEASEHOLD_PROVISIONER_NAMESPACE: SYSTEM,
      LEASEHOLD_PROVISIONER_LEASE_DURATION: '3s',
      LEASEHOLD_NFS_SERVER_IMAGE: 'registry.example/nfs-ganesha:it',
    });

  const createClaim = async (name: string, storageClassName = CLASS, storage = '1Gi') =>
    core.createNamespacedPersistentVolumeClaim({
      namespace: APPS,
      body: {
        metadata: { name },
        spec: { accessModes: ['ReadWriteMany'], storageClassName, resources: { requests: { storage } } },
      },
    });
  const readClaim = (name: string) => core.readNamespacedPersistentVolumeClaim({ namespace: APPS, name });
  const exists = async (read: () => Promise<unknown>) => {
    try {
      await read();
      return true;
    } catch (err) {
      if ((err as { code?: number }).code === 404) return false;
      throw err;
    }
  };
  const share = (name: string) => () =>
    objects.getNamespacedCustomObject({ ...SM, namespace: SYSTEM, name }) as Promise<ShareManager>;
  const backing = (name: string) => () =>
    core.readNamespacedPersistentVolumeClaim({ namespace: SYSTEM, name });
  const volume = (name: string) => () => core.readPersistentVolume({ name });
  const reasonsOn = async (name: string) =>
    (await core.listNamespacedEvent({ namespace: APPS, fieldSelector: `involvedObject.name=${name}` })).items
      .filter((e) => e.source?.component !== 'persistentvolume-controller')
      .map((e) => e.reason ?? '');
  const allGone = (name: string) =>
    eventually(
      `no ShareManager, backing claim or PV ${name} left`,
      async () =>
        !(await exists(share(name))) && !(await exists(backing(name))) && !(await exists(volume(name)))
          ? true
          : undefined,
      60_000,
    );

  it('a claim of the class is bound to an nfs PV of its own share; deleting it removes everything in order', async () => {
    const m = manager('p1');
    try {
      const uid = (await createClaim('shared')).metadata?.uid ?? '';
      const name = `pvc-${uid}`;
      const bound = await eventually(
        'claim shared Bound',
        async () => {
          const c = await readClaim('shared');
          return c.status?.phase === 'Bound' ? c : undefined;
        },
        60_000,
      );
      assert.equal(bound.spec?.volumeName, name);
      const pv = await volume(name)();
      const service = await core.readNamespacedService({ namespace: SYSTEM, name });
      assert.deepEqual({ ...pv.spec?.nfs }, { server: service.spec?.clusterIP, path: '/export' });
      assert.equal(pv.metadata?.annotations?.['pv.kubernetes.io/provisioned-by'], PROVISIONER_NAME);
      assert.equal(pv.spec?.claimRef?.uid, uid);
      assert.equal(pv.spec?.persistentVolumeReclaimPolicy, 'Delete');
      assert.equal(pv.spec?.storageClassName, CLASS);
      assert.deepEqual(pv.spec?.accessModes, ['ReadWriteMany']);
      assert.equal(String(pv.spec?.capacity?.storage), '1Gi');
      assert.ok(pv.spec?.mountOptions?.includes('nfsvers=4.1'), String(pv.spec?.mountOptions));
      assert.deepEqual(
        pv.metadata?.finalizers?.filter((f) => f.startsWith('leasehold')),
        ['leasehold.dev/provisioned-share'],
      );
      const data = await backing(name)();
      assert.equal(data.metadata?.labels?.[LABEL_PROVISIONED_FOR], uid);
      assert.deepEqual(data.spec?.accessModes, ['ReadWriteOnce']);
      assert.equal(String(data.spec?.resources?.requests?.storage), '1Gi');
      const sm = await share(name)();
      assert.equal(sm.spec.volume.pvc, name);
      assert.equal(sm.status?.export?.clusterIP, service.spec?.clusterIP);
      // NB: a list is in name order, not time order.
      assert.deepEqual((await reasonsOn('shared')).sort(), ['Provisioning', 'ProvisioningSucceeded']);

      // Expansion a backing volume cannot follow (unbound here: the API refuses to resize
      // it): VolumeResizeFailed in the API's words, nothing changed but the claim's status.
      await core.patchNamespacedPersistentVolumeClaim(
        { namespace: APPS, name: 'shared', body: { spec: { resources: { requests: { storage: '3Gi' } } } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      const failed = await eventually('VolumeResizeFailed', async () => {
        const list = await core.listNamespacedEvent({
          namespace: APPS,
          fieldSelector: 'involvedObject.name=shared',
        });
        return list.items.find((e) => e.reason === 'VolumeResizeFailed');
      });
      assert.match(
        failed.message ?? '',
        new RegExp(`backing claim ${SYSTEM}/${name} cannot be expanded to 3Gi, nothing changed: .+`),
      );
      const refused = await eventually('the claim says ControllerResizeInfeasible', async () => {
        const c = await readClaim('shared');
        return c.status?.allocatedResourceStatuses?.storage === 'ControllerResizeInfeasible' ? c : undefined;
      });
      assert.equal(String(refused.status?.allocatedResources?.storage), '3Gi');
      assert.equal(String(refused.status?.capacity?.storage), '1Gi');
      assert.equal(String((await backing(name)()).spec?.resources?.requests?.storage), '1Gi');
      assert.equal(String((await volume(name)()).spec?.capacity?.storage), '1Gi');

      // Deletion: the PV controller releases the PV; then the ShareManager goes (its pod,
      // Service and Lease with it: foreground), then the backing claim, then the PV.
      const order: string[] = [];
      await core.deleteNamespacedPersistentVolumeClaim({ namespace: APPS, name: 'shared' });
      await eventually(
        'the ShareManager, the backing claim, the PV gone, in that order',
        async () => {
          for (const [what, read] of [
            ['share', share(name)],
            ['backing', backing(name)],
            ['volume', volume(name)],
          ] as const)
            if (!order.includes(what) && !(await exists(read))) order.push(what);
          return order.length === 3 ? true : undefined;
        },
        60_000,
        50,
      );
      assert.deepEqual(order, ['share', 'backing', 'volume']);
      assert.equal(
        (
          await core.listNamespacedPod({
            namespace: SYSTEM,
            labelSelector: `leasehold.dev/share-manager=${name}`,
          })
        ).items.length,
        0,
      );
    } finally {
      await m.kill();
    }
  });

  it('a bad parameter: ProvisioningFailed naming it and the rule, nothing created', async () => {
    const storage = cluster().kubeConfig.makeApiClient(k8s.StorageV1Api);
    await storage.createStorageClass({
      body: {
        metadata: { name: 'bad-rwx' },
        provisioner: PROVISIONER_NAME,
        parameters: { nfsVersion: '4.1', leaseDuration: '3s' },
      },
    });
    const m = manager('p2');
    try {
      const uid = (await createClaim('typo', 'bad-rwx')).metadata?.uid ?? '';
      const event = await eventually('ProvisioningFailed', async () => {
        const list = await core.listNamespacedEvent({
          namespace: APPS,
          fieldSelector: 'involvedObject.name=typo',
        });
        return list.items.find((e) => e.reason === 'ProvisioningFailed');
      });
      assert.equal(event.type, 'Warning');
      assert.match(event.message ?? '', /StorageClass bad-rwx: nfsVersion: unknown parameter \(known: /);
      assert.match(event.message ?? '', /lease duration 3s > renew deadline 4s/);
      const name = `pvc-${uid}`;
      assert.equal(await exists(share(name)), false);
      assert.equal(await exists(backing(name)), false);
      assert.equal(await exists(volume(name)), false);
      assert.equal((await readClaim('typo')).status?.phase, 'Pending');
      await core.deleteNamespacedPersistentVolumeClaim({ namespace: APPS, name: 'typo' });
    } finally {
      await m.kill();
    }
  });

  it('WaitForFirstConsumer waits for the selected node, then prefers it; Retain keeps everything', async () => {
    const storage = cluster().kubeConfig.makeApiClient(k8s.StorageV1Api);
    await storage.createStorageClass({
      body: {
        metadata: { name: 'wffc-retain' },
        provisioner: PROVISIONER_NAME,
        volumeBindingMode: 'WaitForFirstConsumer',
        reclaimPolicy: 'Retain',
      },
    });
    const m = manager('p5');
    try {
      const uid = (await createClaim('late', 'wffc-retain')).metadata?.uid ?? '';
      const name = `pvc-${uid}`;
      await sleep(3000);
      assert.equal(await exists(backing(name)), false, 'nothing before a node is selected');
      // What the scheduler writes once the claim's first pod has a node.
      await core.patchNamespacedPersistentVolumeClaim(
        {
          namespace: APPS,
          name: 'late',
          body: { metadata: { annotations: { 'volume.kubernetes.io/selected-node': 'node-7' } } },
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      await eventually(
        'late Bound',
        async () => ((await readClaim('late')).status?.phase === 'Bound' ? true : undefined),
        60_000,
      );
      const sm = await share(name)();
      assert.deepEqual(
        sm.spec.scheduling?.affinity?.nodeAffinity?.preferredDuringSchedulingIgnoredDuringExecution,
        [
          {
            weight: 50,
            preference: { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['node-7'] }] },
          },
        ],
      );
      assert.equal((await volume(name)()).spec?.persistentVolumeReclaimPolicy, 'Retain');
      await core.deleteNamespacedPersistentVolumeClaim({ namespace: APPS, name: 'late' });
      await eventually(
        'the PV Released',
        async () => ((await volume(name)()).status?.phase === 'Released' ? true : undefined),
        60_000,
      );
      await sleep(3000);
      assert.equal(await exists(share(name)), true, 'Retain: the ShareManager kept');
      assert.equal(await exists(backing(name)), true, 'Retain: the backing claim kept');
      assert.equal(await exists(volume(name)), true, 'Retain: the PV kept');
    } finally {
      await m.kill();
    }
  });

  it('what a manager killed after any step leaves is finished, or cleaned up once the claim is gone', async () => {
    // The state after a kill between steps is a prefix of the objects: made here with the
    // provisioner's own builders, no manager running; then one starts.
    const settings = { backingStorageClass: undefined, backingNamespace: SYSTEM, share: {} };
    const prefix = async (claimName: string, steps: 1 | 2) => {
      const claim = await eventually(`claim ${claimName} annotated by the PV controller`, async () => {
        const c = await readClaim(claimName);
        return c.metadata?.annotations?.['volume.kubernetes.io/storage-provisioner'] ? c : undefined;
      });
      await core.createNamespacedPersistentVolumeClaim({
        namespace: SYSTEM,
        body: backingClaim(claim, settings),
      });
      if (steps === 2)
        await objects.createNamespacedCustomObject({
          ...SM,
          namespace: SYSTEM,
          body: provisionedShare(claim, settings) as unknown as object,
        });
      return `pvc-${claim.metadata?.uid}`;
    };
    await createClaim('after-backing');
    await createClaim('after-share');
    await createClaim('deleted-mid-way');
    const afterBacking = await prefix('after-backing', 1);
    const afterShare = await prefix('after-share', 2);
    const deletedMidWay = await prefix('deleted-mid-way', 2);
    await core.deleteNamespacedPersistentVolumeClaim({ namespace: APPS, name: 'deleted-mid-way' });
    let m: ManagerProcess | undefined = manager('p3');
    try {
      for (const claimName of ['after-backing', 'after-share'])
        await eventually(
          `${claimName} Bound`,
          async () => ((await readClaim(claimName)).status?.phase === 'Bound' ? true : undefined),
          60_000,
        );
      assert.equal((await readClaim('after-backing')).spec?.volumeName, afterBacking);
      assert.equal((await readClaim('after-share')).spec?.volumeName, afterShare);
      await allGone(deletedMidWay);

      // A real kill in the middle of deleting both: the next manager finishes the job.
      await core.deleteNamespacedPersistentVolumeClaim({ namespace: APPS, name: 'after-backing' });
      await core.deleteNamespacedPersistentVolumeClaim({ namespace: APPS, name: 'after-share' });
      await eventually(
        'a teardown begun',
        async () =>
          !(await exists(share(afterBacking))) || !(await exists(share(afterShare))) ? true : undefined,
        60_000,
        20,
      );
      await m.kill('SIGKILL');
      m = manager('p4');
      await allGone(afterBacking);
      await allGone(afterShare);
    } finally {
      await m?.kill();
    }
  });

  it('one leader provisions; when it dies another takes over', async () => {
    const first = manager('lead-a');
    const lease = () =>
      cluster()
        .kubeConfig.makeApiClient(k8s.CoordinationV1Api)
        .readNamespacedLease({ namespace: SYSTEM, name: PROVISIONER_LEASE });
    const leaderOf = async () => (await lease()).spec?.holderIdentity;
    await eventually('lead-a leads', async () => ((await leaderOf()) === 'lead-a' ? true : undefined));
    const second = manager('lead-b');
    try {
      await createClaim('led');
      await eventually(
        'led Bound',
        async () => ((await readClaim('led')).status?.phase === 'Bound' ? true : undefined),
        60_000,
      );
      assert.equal(await leaderOf(), 'lead-a');
      const logged = (await second.lines()).filter((l) => l.msg === 'backing claim created');
      assert.equal(logged.length, 0, 'the follower made nothing');
      await first.kill('SIGKILL');
      await eventually(
        'lead-b leads',
        async () => ((await leaderOf()) === 'lead-b' ? true : undefined),
        30_000,
      );
      await createClaim('after-handover');
      await eventually(
        'after-handover Bound',
        async () => ((await readClaim('after-handover')).status?.phase === 'Bound' ? true : undefined),
        60_000,
      );
      for (const claimName of ['led', 'after-handover']) {
        const volumeName = (await readClaim(claimName)).spec?.volumeName ?? '';
        await core.deleteNamespacedPersistentVolumeClaim({ namespace: APPS, name: claimName });
        await allGone(volumeName);
      }
    } finally {
      await first.kill();
      await second.kill();
    }
  });
});
