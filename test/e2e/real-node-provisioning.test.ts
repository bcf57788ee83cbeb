/**
 * A claim of the chart's StorageClass on real nodes, end to end (issue 26 item 5): the
 * chart installed by helm with provisioning on and the testbed driver's class as the
 * backing class; the backing claim provisioned by the real external-provisioner
 * (dev/csi); the manager's share serving it on a real node; a Linux kernel NFS client
 * (dev/kernel-client, 6.12) on the other node mounting exactly the PV's own `nfs` source
 * and `mountOptions` (what a kubelet would mount) and writing acknowledged records; the
 * serving node crashed; the share failed over like a hand-made one; every acknowledged
 * record read back from the volume; then the claim deleted and every object gone.
 * NB: no kubelet here can mount an `nfs` volume into a pod (the host kernel has no NFS
 * client), so the kernel client mounts the PV's source as a kubelet would.
 * Cost: one two-node system start (25-40 s), provisioning (~10 s), a client boot, one
 * failover and the resumption (~30 s), the deletion (~10 s).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { STORAGE_CLASS } from '../../dev/csi/config.ts';
import { type KernelClient, startKernelClient } from '../../dev/kernel-client/machine.ts';
import {
  allResumed,
  eventsOf,
  filesOf,
  mountShare,
  RECORD_SIZE,
  stallLines,
  startUserWorkloads,
  tagOf,
} from '../../dev/kernel-client/user-workloads.ts';
import { checkReadBack } from '../../dev/kernel-client/workload-analysis.ts';
import { readRealVolumeFile } from '../../dev/system/real-share.ts';
import { SHARES_NAMESPACE, SYSTEM_NAMESPACE } from '../../dev/system/system.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { PROVISIONER_NAME } from '../../manager/provisioning/class-parameters.ts';
import { eventually } from '../support/cluster.ts';
import { servingRealPod, useRealSystem } from './e2e-support.ts';

const system = useRealSystem({
  nodes: 2,
  csiProvisioning: true,
  values: { 'provisioning.storageClass.parameters.backingStorageClass': STORAGE_CLASS },
  cluster: { attachDetachReconcileSyncPeriod: '2s' },
});
const CLAIM = 'team-data';

test('a claim of leasehold-rwx: provisioned on the real external-provisioner, mounted by the kernel client, failed over, deleted', {
  timeout: 600_000,
}, async (t) => {
  const sys = system();
  const core = sys.core;
  const created = await core.createNamespacedPersistentVolumeClaim({
    namespace: SHARES_NAMESPACE,
    body: {
      metadata: { name: CLAIM },
      spec: {
        accessModes: ['ReadWriteMany'],
        storageClassName: 'leasehold-rwx',
        resources: { requests: { storage: '256Mi' } },
      },
    },
  });
  const uid = created.metadata?.uid ?? '';
  const name = `pvc-${uid}`;
  const t0 = performance.now();
  const bound = await eventually(
    `${CLAIM} Bound`,
    async () => {
      const c = await core.readNamespacedPersistentVolumeClaim({ namespace: SHARES_NAMESPACE, name: CLAIM });
      return c.status?.phase === 'Bound' ? c : undefined;
    },
    120_000,
    250,
  );
  t.diagnostic(`claim to Bound: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  assert.equal(bound.spec?.volumeName, name);
  const pv = await core.readPersistentVolume({ name });
  assert.equal(pv.metadata?.annotations?.['pv.kubernetes.io/provisioned-by'], PROVISIONER_NAME);
  const backing = await core.readNamespacedPersistentVolumeClaim({ namespace: SYSTEM_NAMESPACE, name });
  assert.equal(backing.spec?.storageClassName, STORAGE_CLASS);
  assert.equal(backing.status?.phase, 'Bound', 'the backing claim was provisioned by the CSI driver');
  const backingPv = await core.readPersistentVolume({ name: backing.spec?.volumeName ?? '' });
  const handle = backingPv.spec?.csi?.volumeHandle ?? '';
  assert.ok(handle, 'the backing PV is a CSI volume');

  const before = await servingRealPod(sys, name, { namespace: SYSTEM_NAMESPACE });
  const clientNode = sys.nodes.find((n) => n.name !== before.node)?.name;
  assert.ok(clientNode);
  const source = `${pv.spec?.nfs?.server}:${pv.spec?.nfs?.path}`;
  const options = (pv.spec?.mountOptions ?? []).join(',');
  t.diagnostic(`mounting the PV's own source ${source} with ${options}`);
  let kc: KernelClient | undefined;
  t.after(async () => {
    await kc?.stop();
  });
  kc = await startKernelClient(sys.node(clientNode), { name: 'kc1', index: 1, kernel: '6.12' });
  await mountShare(kc, source, options);
  await startUserWorkloads(kc);
  await kc.waitForLine((l) => l.startsWith(`${tagOf(kc?.name ?? '', 'write')} ack 10`), 30_000);

  const crashMs = monotonicMs();
  const crashWall = Date.now();
  await sys.node(before.node).crash();
  const after = await servingRealPod(sys, name, { notPod: before.pod, namespace: SYSTEM_NAMESPACE });
  const servedMs = crashMs + (after.servingWall - crashWall);
  assert.equal(after.node, clientNode);
  const client = kc;
  await eventually(
    'every workload resumed',
    async () => (allResumed(client, servedMs) ? true : undefined),
    120_000,
    250,
  );
  const acks = eventsOf(client, tagOf(client.name, 'write')).filter((e) => e.kind === 'ack');
  const readBack = checkReadBack(
    acks,
    readRealVolumeFile(sys, handle, filesOf(client.name).write),
    RECORD_SIZE,
  );
  assert.equal(readBack.outcome, 'intact', `acknowledged records lost: ${JSON.stringify(readBack.lost)}`);
  t.diagnostic(
    [
      `crash of ${before.node}: served again from ${after.node} at +${((after.servingWall - crashWall) / 1000).toFixed(2)} s`,
      ...stallLines(client, crashMs, servedMs),
      `${readBack.acked} acknowledged records, 0 lost`,
    ].join('\n'),
  );
  await client.stop();
  kc = undefined;

  // Deletion: the claim, then (reclaim Delete) the ShareManager, the backing claim and the PV.
  await core.deleteNamespacedPersistentVolumeClaim({ namespace: SHARES_NAMESPACE, name: CLAIM });
  const objects = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  const gone = async (read: () => Promise<unknown>) =>
    read().then(
      () => false,
      (err: { code?: number }) => err.code === 404,
    );
  await eventually(
    'the ShareManager, the backing claim, its CSI volume and the PV gone',
    async () =>
      (await gone(() =>
        objects.getNamespacedCustomObject({
          group: 'leasehold.dev',
          version: 'v1alpha1',
          namespace: SYSTEM_NAMESPACE,
          plural: 'sharemanagers',
          name,
        }),
      )) &&
      (await gone(() => core.readNamespacedPersistentVolumeClaim({ namespace: SYSTEM_NAMESPACE, name }))) &&
      (await gone(() => core.readPersistentVolume({ name: backingPv.metadata?.name ?? '' }))) &&
      (await gone(() => core.readPersistentVolume({ name })))
        ? true
        : undefined,
    120_000,
    500,
  );
});
