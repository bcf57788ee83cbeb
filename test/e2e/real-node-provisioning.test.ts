/**
 * A claim of the chart's StorageClass on real nodes, end to end (issue 26 item 5): the
 * chart installed by helm with provisioning on and the testbed driver's class as the
 * backing class; the backing claim provisioned by the real external-provisioner
 * (dev/csi); the manager's share serving it on a real node; a Linux kernel NFS client
 * (dev/kernel-client, 6.12) on the other node mounting exactly the PV's own `nfs` source
 * and `mountOptions` (what a kubelet would mount) and writing acknowledged records; the
 * serving node crashed; the share failed over like a hand-made one; every acknowledged
 * record read back from the volume; the claim expanded while the client writes on
 * (the real external-resizer grows the backing volume, the replacement's kubelet its
 * ext4 online under ganesha; the client's statfs shows the new size); then the claim
 * deleted and every object gone.
 * NB: no kubelet here can mount an `nfs` volume into a pod (the host kernel has no NFS
 * client), so the kernel client mounts the PV's source as a kubelet would.
 * Cost: one two-node system start (25-40 s), provisioning (~10 s), a client boot, one
 * failover and the resumption (~30 s), the deletion (~10 s).
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { STORAGE_CLASS_XFS } from '../../dev/csi/config.ts';
import { type KernelClient, startKernelClient } from '../../dev/kernel-client/machine.ts';
import {
  allResumed,
  consoleSince,
  eventsOf,
  filesOf,
  GUEST_MOUNT,
  mountShare,
  RECORD_SIZE,
  stallLines,
  startUserWorkloads,
  tagOf,
} from '../../dev/kernel-client/user-workloads.ts';
import { checkReadBack } from '../../dev/kernel-client/workload-analysis.ts';
import { readRealVolumeFile } from '../../dev/system/real-share.ts';
import { SHARES_NAMESPACE, SYSTEM_NAMESPACE } from '../../dev/system/real-system.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { PROVISIONER_NAME } from '../../manager/provisioning/class-parameters.ts';
import { eventually } from '../support/cluster.ts';
import { servingRealPod, useRealSystem } from './e2e-support.ts';

const system = useRealSystem({
  nodes: 2,
  csiProvisioning: true,
  csiExpansion: true,
  // XFS backing volumes: they grow online here (ext4's online resize needs CAP_SYS_RESOURCE).
  values: { 'provisioning.storageClass.parameters.backingStorageClass': STORAGE_CLASS_XFS },
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
        resources: { requests: { storage: '320Mi' } },
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
  assert.equal(backing.spec?.storageClassName, STORAGE_CLASS_XFS);
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
  ).catch((err: Error) => {
    throw new Error(
      `${err.message}\n${stallLines(client, crashMs, servedMs).join('\n')}\nits console since the crash:\n${consoleSince(client, crashMs)}`,
    );
  });
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

  // Expansion while serving: 320Mi -> 640Mi. The client sees the file system grow.
  const sizeSeen = async () => {
    const lines = await client.run(`stat -f -c '%b %S' ${GUEST_MOUNT}`);
    const [blocks, size] = (lines.join(' ').trim().split(/\s+/) as [string, string]).map(Number);
    return (blocks ?? 0) * (size ?? 0);
  };
  const smaller = await sizeSeen();
  await core.patchNamespacedPersistentVolumeClaim(
    {
      namespace: SHARES_NAMESPACE,
      name: CLAIM,
      body: { spec: { resources: { requests: { storage: '640Mi' } } } },
    },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  );
  const expandT0 = performance.now();
  const expanded = await eventually(
    `${CLAIM} status.capacity 640Mi`,
    async () => {
      const c = await core.readNamespacedPersistentVolumeClaim({ namespace: SHARES_NAMESPACE, name: CLAIM });
      return String(c.status?.capacity?.storage) === '640Mi' ? c : undefined;
    },
    180_000,
    500,
  ).catch(async (err) => {
    // What each part saw: the backing claim's status and events, the resizer, the node parts.
    const b = await core.readNamespacedPersistentVolumeClaim({ namespace: SYSTEM_NAMESPACE, name });
    const events = await core.listNamespacedEvent({
      namespace: SYSTEM_NAMESPACE,
      fieldSelector: `involvedObject.name=${name}`,
    });
    t.diagnostic(`backing claim status: ${JSON.stringify(b.status)}`);
    t.diagnostic(`backing claim events: ${events.items.map((e) => `${e.reason}: ${e.message}`).join(' | ')}`);
    const tail = (path: string) => {
      try {
        return readFileSync(path, 'utf8').split('\n').slice(-40).join('\n');
      } catch (e) {
        return String(e);
      }
    };
    t.diagnostic(`csi-resizer log:\n${tail(join(sys.csi.logDir, 'csi-resizer.log'))}`);
    for (const n of sys.nodes)
      for (const f of readdirSync(n.layout.logDir).filter((f) => f.includes('csi')))
        t.diagnostic(`${n.name} ${f}:\n${tail(join(n.layout.logDir, f))}`);
    throw err;
  });
  t.diagnostic(
    `expansion 320Mi -> 640Mi: claim status after ${((performance.now() - expandT0) / 1000).toFixed(1)} s`,
  );
  assert.equal(expanded.status?.allocatedResourceStatuses?.storage, undefined, 'no resize left in progress');
  assert.ok(
    !expanded.status?.conditions?.some((c) => c.type === 'Resizing'),
    'the Resizing condition cleared',
  );
  assert.equal(String((await core.readPersistentVolume({ name })).spec?.capacity?.storage), '640Mi');
  const grownBacking = await core.readNamespacedPersistentVolumeClaim({ namespace: SYSTEM_NAMESPACE, name });
  assert.equal(
    String(grownBacking.status?.capacity?.storage),
    '640Mi',
    "the backing claim's file system grew (the kubelet says so)",
  );
  const reasons = (
    await core.listNamespacedEvent({
      namespace: SHARES_NAMESPACE,
      fieldSelector: `involvedObject.name=${CLAIM}`,
    })
  ).items.map((e) => e.reason);
  assert.ok(reasons.includes('Resizing') && reasons.includes('VolumeResizeSuccessful'), String(reasons));
  const grown = await eventually(
    'the client sees the larger file system',
    async () => {
      const now = await sizeSeen();
      return now > smaller + 200 * 2 ** 20 ? now : undefined;
    },
    30_000,
    500,
  );
  t.diagnostic(
    `the client's statfs: ${(smaller / 2 ** 20).toFixed(0)} MiB before, ${(grown / 2 ** 20).toFixed(0)} MiB after`,
  );
  const acked = () => eventsOf(client, tagOf(client.name, 'write')).filter((e) => e.kind === 'ack').length;
  const ackedAfterGrowth = acked();
  await eventually(
    'the writer goes on after the growth',
    async () => (acked() > ackedAfterGrowth + 5 ? true : undefined),
    30_000,
    250,
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
