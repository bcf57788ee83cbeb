/**
 * A PV of the test CSI driver pre-bound to a PVC, as the e2e tests and the demo need
 * one per share: RWO, Retain, no storage class, volumeHandle = the PV name. Resolves
 * once the PV controller (kube-controller-manager) has bound the claim.
 */
import { sleep } from '../../lib/clock.ts';
import { k8s, kubeCall, withDeadline } from '../../lib/kube-client.ts';
import { TEST_CSI_DRIVER } from './pod-volumes.ts';

export interface TestVolume {
  pvName: string;
  namespace: string;
  claimName: string;
}

export async function createTestVolume(
  kc: k8s.KubeConfig,
  volume: TestVolume,
  timeoutMs = 30_000,
): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const { pvName, namespace, claimName } = volume;
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
            csi: { driver: TEST_CSI_DRIVER, volumeHandle: pvName },
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
