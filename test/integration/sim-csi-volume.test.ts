/**
 * CSI volumes on simulated nodes, with the real attach-detach controller: a pod of a
 * PVC bound to a PV of the test driver starts only once the VolumeAttachment the
 * controller created is attached by the sim attacher; the node reports the volume in
 * use; deleting the pod detaches it (finalizer removed, VolumeAttachment gone); a pod
 * on another node then continues the same data.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { readRecords } from '../../dev/share-server/record-file.ts';
import { SHARE_SERVER_IMAGE, type Sim, TEST_CSI_DRIVER } from '../../dev/sim/sim.ts';
import { createTestVolume } from '../../dev/sim/storage/test-volume.ts';
import { k8s } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { ATTACHER_FINALIZER } from '../support/handoff-order.ts';
import { startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

const ATTACH_DELAY_MS = 2_000;
let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim({ nodes: ['sim-a', 'sim-b'], attachDelayMs: ATTACH_DELAY_MS });
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const sim = () => (running as { sim: Sim }).sim;
const kc = () => (running as { cluster: Cluster }).cluster.kubeConfig;

function podOn(name: string, node: string): V1Pod {
  return {
    metadata: { name, namespace: 'default' },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': node },
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: 'server',
          image: `${SHARE_SERVER_IMAGE}:dev`,
          args: ['--dir=/export'],
          volumeMounts: [{ name: 'share', mountPath: '/export' }],
        },
      ],
      volumes: [{ name: 'share', persistentVolumeClaim: { claimName: 'pvc-a' } }],
    },
  };
}

test('a CSI-volume pod starts only after its VolumeAttachment is attached; delete detaches; data moves with the volume', async (t) => {
  const core = kc().makeApiClient(k8s.CoreV1Api);
  const storage = kc().makeApiClient(k8s.StorageV1Api);
  await createTestVolume(kc(), { pvName: 'pv-a', namespace: 'default', claimName: 'pvc-a' });

  await core.createNamespacedPod({ namespace: 'default', body: podOn('vol-1', 'sim-a') });
  const waiting = await eventually(
    'vol-1 waiting for its attachment',
    async () => {
      const p = await core.readNamespacedPod({ namespace: 'default', name: 'vol-1' });
      const w = p.status?.containerStatuses?.[0]?.state?.waiting;
      return w?.message?.includes('VolumeAttachment') ? w : undefined;
    },
    30_000,
    50,
  );
  assert.equal(waiting.reason, 'ContainerCreating');

  const va = await eventually(
    'an attached VolumeAttachment for pv-a on sim-a',
    async () => {
      const list = await storage.listVolumeAttachment();
      return list.items.find(
        (v) =>
          v.spec.source.persistentVolumeName === 'pv-a' && v.spec.nodeName === 'sim-a' && v.status?.attached,
      );
    },
    30_000,
  );
  assert.equal(va.spec.attacher, TEST_CSI_DRIVER);
  assert.ok(va.metadata?.finalizers?.includes(ATTACHER_FINALIZER));
  await eventually(
    'vol-1 Running',
    async () => {
      const p = await core.readNamespacedPod({ namespace: 'default', name: 'vol-1' });
      return p.status?.phase === 'Running' ? true : undefined;
    },
    30_000,
  );
  const attach = sim().attacher.timings.find(
    (t) => t.op === 'attach' && t.pv === 'pv-a' && t.node === 'sim-a',
  );
  assert.ok(attach, 'the attacher recorded the attach');
  assert.ok(
    attach.sinceSeenMs >= ATTACH_DELAY_MS - 50,
    `attach took the configured delay, ${attach.sinceSeenMs} ms`,
  );
  const windowsPath = join(sim().volumeDir('pv-a'), 'serving-windows.jsonl');
  const first = await eventually(
    'the server serving from the PV directory',
    async () => sim().servingWindows('pv-a')[0],
    10_000,
  );
  assert.ok(
    new Date(first.startWall).getTime() >= attach.doneWall.getTime(),
    `the server started (${first.startWall}) after the attach (${attach.doneWall.toISOString()}); log ${windowsPath}`,
  );
  const uniqueName = `kubernetes.io/csi/${TEST_CSI_DRIVER}^pv-a`;
  await eventually(
    'sim-a reports the volume in use and attached',
    async () => {
      const node = await core.readNode({ name: 'sim-a' });
      const inUse = node.status?.volumesInUse?.includes(uniqueName);
      const attached = node.status?.volumesAttached?.some((v) => v.name === uniqueName);
      return inUse && attached ? true : undefined;
    },
    20_000,
  );

  await eventually(
    'records written to the PV directory',
    async () => {
      const n = readRecords(join(sim().volumeDir('pv-a'), 'records.jsonl')).length;
      return n >= 10 ? true : undefined;
    },
    10_000,
  );
  await core.deleteNamespacedPod({ namespace: 'default', name: 'vol-1' });
  await eventually(
    'the VolumeAttachment detached and gone',
    async () => {
      const list = await storage.listVolumeAttachment();
      return list.items.some((v) => v.spec.source.persistentVolumeName === 'pv-a') ? undefined : true;
    },
    30_000,
  );
  assert.ok(sim().attacher.timings.some((t) => t.op === 'detach' && t.pv === 'pv-a' && t.node === 'sim-a'));
  const node = await core.readNode({ name: 'sim-a' });
  assert.ok(!node.status?.volumesInUse?.includes(uniqueName), 'no longer in use on sim-a');
  const lastSeq = readRecords(join(sim().volumeDir('pv-a'), 'records.jsonl')).at(-1)?.seq ?? 0;

  await core.createNamespacedPod({ namespace: 'default', body: podOn('vol-2', 'sim-b') });
  await eventually(
    'vol-2 Running on sim-b',
    async () => {
      const p = await core.readNamespacedPod({ namespace: 'default', name: 'vol-2' });
      return p.status?.phase === 'Running' ? true : undefined;
    },
    30_000,
  );
  const windows = await eventually(
    'a second serving window',
    async () => {
      const w = sim().servingWindows('pv-a');
      return w.length === 2 ? w : undefined;
    },
    10_000,
  );
  assert.equal(windows[1]?.id, 'vol-2');
  assert.equal(windows[1]?.firstSeq, lastSeq + 1, 'the sequence continues on the other node');
  assert.ok(
    (windows[0]?.stopMonoMs ?? Number.POSITIVE_INFINITY) < (windows[1]?.startMonoMs ?? 0),
    'no overlap',
  );
  assert.deepEqual(sim().attacher.multiAttach, []);
  for (const timing of sim().attacher.timings) {
    t.diagnostic(
      `${timing.op} ${timing.pv} on ${timing.node}: ${timing.sinceTimestampMs} ms after the object's timestamp, ${timing.sinceSeenMs} ms after the attacher saw it`,
    );
  }
});
