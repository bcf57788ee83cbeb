/**
 * A PV of a test CSI driver pre-bound to a PVC, as the e2e tests and the demo need
 * one per share: RWO, Retain, no storage class, volumeHandle = the PV name. Resolves
 * once the PV controller (kube-controller-manager) has bound the claim.
 * `storage` picks what backs it (default 'shared', as before):
 *   'shared'    csi.leasehold.dev (attachRequired), one host dir every node writes at any time;
 *   'fencing'   csi.leasehold.dev with the fencing storage (fencing-storage.ts): each node
 *               through its own view, revoked on detach (I/O fails with EIO);
 *   'fencing-ext4' the same storage, the block kind (block-image.ts): one ext4 image each
 *               node mounts through its own view (a loop device), as a network disk;
 *   'no-attach' noattach.csi.leasehold.dev, a CSIDriver with attachRequired: false
 *               (created here if missing): no VolumeAttachment, no detach, nothing fences.
 */
import { sleep } from '../../../lib/clock.ts';
import { k8s, kubeCall, statusOf, withDeadline } from '../../../lib/kube-client.ts';
import { BLOCK_FS, BLOCK_FS_ATTRIBUTE } from '../../csi/block-image.ts';
import { TEST_CSI_DRIVER, TEST_NOATTACH_CSI_DRIVER } from '../kubelet/pod-volumes.ts';
import { FENCING_ATTRIBUTE } from './fencing-storage.ts';

export type TestStorageKind = 'shared' | 'fencing' | 'fencing-ext4' | 'no-attach';

export interface TestVolume {
  pvName: string;
  namespace: string;
  claimName: string;
  storage?: TestStorageKind;
}

async function ensureNoAttachDriver(kc: k8s.KubeConfig): Promise<void> {
  const storage = kc.makeApiClient(k8s.StorageV1Api);
  await storage
    .createCSIDriver(
      {
        body: {
          apiVersion: 'storage.k8s.io/v1',
          kind: 'CSIDriver',
          metadata: { name: TEST_NOATTACH_CSI_DRIVER },
          spec: { attachRequired: false, podInfoOnMount: false, volumeLifecycleModes: ['Persistent'] },
        },
      },
      withDeadline(10_000),
    )
    .catch((err: unknown) => {
      if (statusOf(err) !== 409) throw err;
    });
}

function csiSource(pvName: string, kind: TestStorageKind): k8s.V1CSIPersistentVolumeSource {
  switch (kind) {
    case 'shared':
      return { driver: TEST_CSI_DRIVER, volumeHandle: pvName };
    case 'fencing':
      return {
        driver: TEST_CSI_DRIVER,
        volumeHandle: pvName,
        volumeAttributes: { [FENCING_ATTRIBUTE]: 'true' },
      };
    case 'fencing-ext4':
      return {
        driver: TEST_CSI_DRIVER,
        volumeHandle: pvName,
        volumeAttributes: { [FENCING_ATTRIBUTE]: 'true', [BLOCK_FS_ATTRIBUTE]: BLOCK_FS },
      };
    case 'no-attach':
      return { driver: TEST_NOATTACH_CSI_DRIVER, volumeHandle: pvName };
    default:
      throw new Error(
        `test volume ${pvName}: storage ${JSON.stringify(kind)} is not shared, fencing, fencing-ext4 or no-attach`,
      );
  }
}

export async function createTestVolume(
  kc: k8s.KubeConfig,
  volume: TestVolume,
  timeoutMs = 30_000,
): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const { pvName, namespace, claimName } = volume;
  const kind = volume.storage ?? 'shared';
  const csi = csiSource(pvName, kind);
  if (kind === 'no-attach') await ensureNoAttachDriver(kc);
  await kubeCall(`create PV ${pvName}`, () =>
    core.createPersistentVolume(
      {
        body: {
          metadata: { name: pvName },
          spec: {
            capacity: { storage: '1Gi' },
            accessModes: ['ReadWriteOnce'],
            persistentVolumeReclaimPolicy: 'Retain',
            storageClassName: '',
            claimRef: { namespace, name: claimName },
            csi,
          },
        },
      },
      withDeadline(10_000),
    ),
  );
  await kubeCall(`create PVC ${namespace}/${claimName}`, () =>
    core.createNamespacedPersistentVolumeClaim(
      {
        namespace,
        body: {
          metadata: { name: claimName },
          spec: {
            accessModes: ['ReadWriteOnce'],
            storageClassName: '',
            volumeName: pvName,
            resources: { requests: { storage: '1Gi' } },
          },
        },
      },
      withDeadline(10_000),
    ),
  );
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const pvc = await core
      .readNamespacedPersistentVolumeClaim({ namespace, name: claimName }, withDeadline(5_000))
      .catch(() => undefined);
    if (pvc?.status?.phase === 'Bound') return;
    await sleep(200);
  }
  throw new Error(`PVC ${namespace}/${claimName} was not bound to PV ${pvName} within ${timeoutMs} ms`);
}
