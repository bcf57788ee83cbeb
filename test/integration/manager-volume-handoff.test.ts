/**
 * The failover's volume handoff step (FailoverExecutor.handOffVolume) against the real
 * kube-apiserver (no scheduler, no controller manager: the attach-detach controller's
 * reaction is the e2e's, test/e2e/real-node-handoff.test.ts, on real nodes):
 *  - volumes-in-use removes exactly the share's entry from the lost Node's
 *    status.volumesInUse and leaves the node's other volumes, spec and VolumeAttachments;
 *  - the JSON patch's `test` really guards it: an entry that moved since the read is
 *    found again on a fresh read (the step never removes another volume);
 *  - a heartbeat seen after the holder's renew deadline leaves the entry to the kubelet;
 *  - volume-attachment deletes the PV's VolumeAttachment on that node only;
 *  - the storage-fencing gate's reads (readStorageGate): a CSIDriver missing, then
 *    attachRequired false; a hostPath PV; a missing claim; the lost Node tainted
 *    out-of-service by someone else, then deleted.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { KubeLeaseStore } from '../../lib/lease-store.ts';
import { readManagerConfig } from '../../manager/config.ts';
import { FailoverExecutor, type HandoffContext } from '../../manager/failover/execute-failover.ts';
import { StatusWriter } from '../../manager/share-model/status-writer.ts';
import { useCluster } from '../support/cluster.ts';
import { taintOutOfService } from './manager-harness.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });
const DRIVER = 'csi.example.dev';
const NS = 'default';
const unique = (handle: string) => `kubernetes.io/csi/${DRIVER}^${handle}`;

function executor(mode: 'volumes-in-use' | 'volume-attachment'): FailoverExecutor {
  const kc = cluster().kubeConfig;
  const config = readManagerConfig({
    LEASEHOLD_POD_NAME: 'manager-test',
    LEASEHOLD_NODE_NAME: 'node-manager',
    LEASEHOLD_VOLUME_HANDOFF: mode,
  });
  return new FailoverExecutor(kc, new KubeLeaseStore(kc), new StatusWriter(kc, 5_000), config);
}

const silent: HandoffContext = {
  newerPodOnNode: undefined,
  heartbeatChangedAt: () => 1_000,
  holderSilentSince: 10_000,
  renewDeadlineMs: 4_000,
};

async function setUp(node: string, share: string, inUse: string[]): Promise<void> {
  const kc = cluster().kubeConfig;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const storage = kc.makeApiClient(k8s.StorageV1Api);
  await core.createNode({ body: { metadata: { name: node } } });
  await core.patchNodeStatus(
    { name: node, body: { status: { volumesInUse: inUse } } },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  );
  await core.createPersistentVolume({
    body: {
      metadata: { name: `pv-${share}` },
      spec: {
        capacity: { storage: '1Gi' },
        accessModes: ['ReadWriteOnce'],
        storageClassName: '',
        csi: { driver: DRIVER, volumeHandle: share },
      },
    },
  });
  await core.createNamespacedPersistentVolumeClaim({
    namespace: NS,
    body: {
      metadata: { name: `${share}-data` },
      spec: {
        accessModes: ['ReadWriteOnce'],
        storageClassName: '',
        volumeName: `pv-${share}`,
        resources: { requests: { storage: '1Gi' } },
      },
    },
  });
  for (const [pv, onNode] of [
    [`pv-${share}`, node],
    [`pv-${share}`, `${node}-other`],
  ] as const)
    await storage.createVolumeAttachment({
      body: {
        metadata: { name: `va-${pv}-${onNode}` },
        spec: { attacher: DRIVER, nodeName: onNode, source: { persistentVolumeName: pv } },
      },
    });
}

async function nodeState(node: string): Promise<{ inUse: string[]; attachments: string[] }> {
  const kc = cluster().kubeConfig;
  const n = await kc.makeApiClient(k8s.CoreV1Api).readNode({ name: node });
  const vas = await kc.makeApiClient(k8s.StorageV1Api).listVolumeAttachment();
  return {
    inUse: n.status?.volumesInUse ?? [],
    attachments: vas.items.map((va) => va.metadata?.name ?? '').sort(),
  };
}

describe('volume handoff against the API server', () => {
  it("volumes-in-use removes exactly the share's entry and nothing else", async () => {
    await setUp('node-a', 'share-a', [unique('other-1'), unique('share-a'), unique('other-2')]);
    const out = await executor('volumes-in-use').handOffVolume(NS, 'share-a-data', 'node-a', silent);
    assert.equal(out.decision.kind, 'releaseInUse');
    assert.equal(out.pv, 'pv-share-a');
    const state = await nodeState('node-a');
    assert.deepEqual(state.inUse, [unique('other-1'), unique('other-2')]);
    assert.ok(
      state.attachments.includes('va-pv-share-a-node-a'),
      "the VolumeAttachment is the controller's to delete",
    );
  });

  it('the JSON patch test refuses an entry that moved, so a stale index never removes another volume', async () => {
    await setUp('node-b', 'share-b', [unique('share-b'), unique('other-1')]);
    const core = cluster().kubeConfig.makeApiClient(k8s.CoreV1Api);
    // What a stale read would send: index 0 was share-b, but the list moved since.
    await core.patchNodeStatus(
      { name: 'node-b', body: { status: { volumesInUse: [unique('other-1'), unique('share-b')] } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    const stale = await core
      .patchNodeStatus(
        {
          name: 'node-b',
          body: [
            { op: 'test', path: '/status/volumesInUse/0', value: unique('share-b') },
            { op: 'remove', path: '/status/volumesInUse/0' },
          ],
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch),
      )
      .then(
        () => 200,
        (err: unknown) => (err as { code?: number }).code,
      );
    assert.equal(stale, 422, 'a failed test is 422 and changes nothing');
    assert.deepEqual((await nodeState('node-b')).inUse, [unique('other-1'), unique('share-b')]);
    // The step reads afresh and removes the right one.
    await executor('volumes-in-use').handOffVolume(NS, 'share-b-data', 'node-b', silent);
    assert.deepEqual((await nodeState('node-b')).inUse, [unique('other-1')]);
  });

  it("a heartbeat seen after the holder's renew deadline leaves the entry to the kubelet; the unmount check overrules a kubelet that kept it", async () => {
    await setUp('node-c', 'share-c', [unique('share-c')]);
    const alive = { ...silent, heartbeatChangedAt: () => 15_000 };
    const out = await executor('volumes-in-use').handOffVolume(NS, 'share-c-data', 'node-c', alive);
    assert.equal(out.decision.kind, 'leaveToKubelet');
    assert.deepEqual((await nodeState('node-c')).inUse, [unique('share-c')]);
    // LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT later the kubelet still lists it (its pod's processes hang).
    const overdue = await executor('volumes-in-use').handOffVolume(NS, 'share-c-data', 'node-c', {
      ...alive,
      unmountOverdue: true,
    });
    assert.equal(overdue.decision.kind, 'releaseInUse');
    assert.deepEqual((await nodeState('node-c')).inUse, []);
  });

  it("volume-attachment deletes the PV's attachment on the lost node only, and leaves volumesInUse", async () => {
    await setUp('node-d', 'share-d', [unique('share-d')]);
    const out = await executor('volume-attachment').handOffVolume(NS, 'share-d-data', 'node-d', silent);
    assert.equal(out.decision.kind, 'deleteAttachments');
    const state = await nodeState('node-d');
    assert.deepEqual(state.inUse, [unique('share-d')]);
    assert.ok(!state.attachments.includes('va-pv-share-d-node-d'));
    assert.ok(state.attachments.includes('va-pv-share-d-node-d-other'), "the other node's attachment stays");
  });

  it('the storage-fencing gate reads the storage and the lost Node as the API has them', async () => {
    await setUp('node-e', 'share-e', []);
    const ex = executor('volumes-in-use');
    const kc = cluster().kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const storage = kc.makeApiClient(k8s.StorageV1Api);
    let read = await ex.readStorageGate(NS, 'share-e-data', 'node-e');
    assert.equal(read.storage.kind, 'unknown', read.storage.reason);
    assert.match(read.storage.reason, /CSIDriver csi\.example\.dev \(of PV pv-share-e\) does not exist/);
    assert.deepEqual(read.node, { kind: 'present', outOfService: 'none' });

    await storage.createCSIDriver({ body: { metadata: { name: DRIVER }, spec: { attachRequired: false } } });
    read = await ex.readStorageGate(NS, 'share-e-data', 'node-e');
    assert.equal(read.storage.kind, 'cannot-fence', read.storage.reason);

    await core.createPersistentVolume({
      body: {
        metadata: { name: 'pv-host' },
        spec: {
          capacity: { storage: '1Gi' },
          accessModes: ['ReadWriteOnce'],
          storageClassName: '',
          hostPath: { path: '/tmp/leasehold-never-used' },
        },
      },
    });
    await core.createNamespacedPersistentVolumeClaim({
      namespace: NS,
      body: {
        metadata: { name: 'host-data' },
        spec: {
          accessModes: ['ReadWriteOnce'],
          storageClassName: '',
          volumeName: 'pv-host',
          resources: { requests: { storage: '1Gi' } },
        },
      },
    });
    read = await ex.readStorageGate(NS, 'host-data', 'node-e');
    assert.equal(read.storage.kind, 'unknown');
    assert.match(read.storage.reason, /PV pv-host is not a CSI volume/);
    read = await ex.readStorageGate(NS, 'no-such-claim', 'node-e');
    assert.equal(read.storage.kind, 'unknown');
    assert.match(read.storage.reason, /PVC default\/no-such-claim does not exist/);

    await taintOutOfService(cluster().kubeConfig, 'node-e');
    assert.deepEqual((await ex.readStorageGate(NS, 'share-e-data', 'node-e')).node, {
      kind: 'present',
      outOfService: 'other',
    });
    await core.deleteNode({ name: 'node-e' });
    assert.deepEqual((await ex.readStorageGate(NS, 'share-e-data', 'node-e')).node, { kind: 'gone' });
    assert.deepEqual((await ex.readStorageGate(NS, 'share-e-data', '')).node, { kind: 'unknown' });
  });
});
