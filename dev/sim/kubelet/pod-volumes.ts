/**
 * A pod's volumes on a simulated node, resolved the way a kubelet's volume manager
 * does: a PVC volume needs its claim bound; a PV of the test CSI driver needs its
 * VolumeAttachment to this node attached before the pod may start (the attach-detach
 * controller creates it, the sim attacher attaches it). Host directories:
 *   PVC -> <simRoot>/volumes/<pv-name>   (the PV's data: outlives pods and nodes; root 0755)
 *   emptyDir -> <simRoot>/pods/<uid>/volumes/<name> (0777);  hostPath -> its path (as is)
 * A PV of the test driver with csi.volumeAttributes `storage.leasehold.dev/fencing: "true"`
 * (the fencing storage, ../storage/fencing-storage.ts) is reached instead through
 * this node's revocable view of it, resolved once attached (the attacher grants the view
 * before it reports the attachment): <simRoot>/storage/<pv>/<node>.<n>. A PV of
 * TEST_NOATTACH_CSI_DRIVER (CSIDriver attachRequired: false: no VolumeAttachment, no
 * volumesInUse entry, nothing to wait for) is the shared directory, which cannot fence.
 * Other volume kinds (projected service-account token, configMap, secret) are not
 * mapped: containers get KUBECONFIG instead of a mounted token.
 */
import { existsSync, mkdirSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { sleep } from '../../../lib/clock.ts';
import { k8s, kubeCall, withDeadline } from '../../../lib/kube-client.ts';
import { applyFileMode, emptyDirMode } from '../runtime/container-files.ts';
import { FENCING_ATTRIBUTE, viewLink } from '../storage/fencing-storage.ts';

export const TEST_CSI_DRIVER = 'csi.leasehold.dev';
/** A second test driver whose CSIDriver has attachRequired: false: storage that cannot fence. */
export const TEST_NOATTACH_CSI_DRIVER = 'noattach.csi.leasehold.dev';

export interface CsiVolume {
  pvName: string;
  /** As in node.status.volumesInUse: kubernetes.io/csi/<driver>^<volumeHandle>. */
  uniqueName: string;
  /** On the fencing storage: the pod volume that must go through this node's view. */
  fencedVolume?: string;
}

export type VolumeResolution =
  | { kind: 'ready'; hostDirs: Map<string, string>; csi: CsiVolume[] }
  | { kind: 'waiting'; message: string };

export async function resolveVolumes(
  pod: V1Pod,
  kc: k8s.KubeConfig,
  simRoot: string,
): Promise<VolumeResolution> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const namespace = pod.metadata?.namespace ?? 'default';
  const hostDirs = new Map<string, string>();
  const csi: CsiVolume[] = [];
  for (const volume of pod.spec?.volumes ?? []) {
    if (volume.persistentVolumeClaim) {
      const claimName = volume.persistentVolumeClaim.claimName;
      const pvc = await kubeCall(`read PVC ${namespace}/${claimName}`, () =>
        core.readNamespacedPersistentVolumeClaim({ namespace, name: claimName }, withDeadline(5_000)),
      );
      const pvName = pvc.spec?.volumeName;
      if (!pvName || pvc.status?.phase !== 'Bound') {
        return { kind: 'waiting', message: `PVC ${namespace}/${claimName} is not bound yet` };
      }
      const pv = await kubeCall(`read PV ${pvName}`, () =>
        core.readPersistentVolume({ name: pvName }, withDeadline(5_000)),
      );
      const dir = join(simRoot, 'volumes', pvName);
      mkdirSync(dir, { recursive: true });
      hostDirs.set(volume.name, dir);
      if (pv.spec?.csi?.driver === TEST_CSI_DRIVER) {
        const fencing = pv.spec.csi.volumeAttributes?.[FENCING_ATTRIBUTE] === 'true';
        csi.push({
          pvName,
          uniqueName: `kubernetes.io/csi/${TEST_CSI_DRIVER}^${pv.spec.csi.volumeHandle}`,
          ...(fencing ? { fencedVolume: volume.name } : {}),
        });
      }
    } else if (volume.emptyDir) {
      const dir = join(simRoot, 'pods', pod.metadata?.uid ?? 'unknown', 'volumes', volume.name);
      mkdirSync(dir, { recursive: true });
      // 0777 as the kubelet makes it (group fsGroup + setgid with one): see ../runtime/container-files.ts.
      applyFileMode(dir, emptyDirMode(pod));
      hostDirs.set(volume.name, dir);
    } else if (volume.hostPath) {
      hostDirs.set(volume.name, volume.hostPath.path);
    }
  }
  return { kind: 'ready', hostDirs, csi };
}

/** True when a VolumeAttachment of `pvName` to `nodeName` exists, is attached and not being deleted. */
export async function isAttached(kc: k8s.KubeConfig, pvName: string, nodeName: string): Promise<boolean> {
  const storage = kc.makeApiClient(k8s.StorageV1Api);
  const list = await kubeCall('list VolumeAttachments', () =>
    storage.listVolumeAttachment({}, withDeadline(5_000)),
  );
  return list.items.some(
    (va) =>
      va.spec.source.persistentVolumeName === pvName &&
      va.spec.nodeName === nodeName &&
      va.status?.attached === true &&
      !va.metadata?.deletionTimestamp,
  );
}

/**
 * Pod volume -> this node's view (its mount point, the link resolved now, so the pod
 * keeps the view it started with) for the fencing-storage volumes; undefined while one
 * has no view yet.
 */
function viewsOf(csi: CsiVolume[], simRoot: string, nodeName: string): Map<string, string> | undefined {
  const views = new Map<string, string>();
  for (const v of csi) {
    if (v.fencedVolume === undefined) continue;
    const link = viewLink(simRoot, v.pvName, nodeName);
    if (!existsSync(link)) return undefined;
    views.set(v.fencedVolume, realpathSync(link));
  }
  return views;
}

/** mountPath -> host dir for one container's volumeMounts (subPath appended). */
export function mountsOf(
  container: { volumeMounts?: Array<{ name: string; mountPath: string; subPath?: string }> },
  hostDirs: ReadonlyMap<string, string>,
): Map<string, string> {
  const mounts = new Map<string, string>();
  for (const m of container.volumeMounts ?? []) {
    const dir = hostDirs.get(m.name);
    if (dir === undefined) continue;
    const full = m.subPath ? join(dir, m.subPath) : dir;
    if (m.subPath) mkdirSync(full, { recursive: true });
    mounts.set(m.mountPath, full);
  }
  return mounts;
}

/**
 * Polls (every 250 ms) until every volume of the pod resolves and every CSI volume is
 * attached to `nodeName`; reports CSI volumes in use as soon as they are known (the
 * kubelet reports them before it mounts) and each reason to wait. Resolves with the
 * host directories, or undefined when aborted.
 */
export async function waitForVolumes(
  pod: V1Pod,
  kc: k8s.KubeConfig,
  simRoot: string,
  nodeName: string,
  signal: AbortSignal,
  report: { inUse(csi: CsiVolume[]): void; waiting(message: string): void },
): Promise<Map<string, string> | undefined> {
  let reportedInUse = false;
  while (!signal.aborted) {
    const resolution = await resolveVolumes(pod, kc, simRoot).catch(
      (err: unknown): VolumeResolution => ({ kind: 'waiting', message: String(err) }),
    );
    if (resolution.kind === 'waiting') {
      report.waiting(resolution.message);
    } else {
      if (resolution.csi.length > 0 && !reportedInUse) {
        reportedInUse = true;
        report.inUse(resolution.csi);
      }
      const attached = await Promise.all(
        resolution.csi.map((v) => isAttached(kc, v.pvName, nodeName).catch(() => false)),
      );
      const views = attached.every(Boolean) ? viewsOf(resolution.csi, simRoot, nodeName) : undefined;
      if (views) {
        for (const [name, dir] of views) resolution.hostDirs.set(name, dir);
        return resolution.hostDirs;
      }
      report.waiting(
        `waiting for the VolumeAttachment of ${resolution.csi.map((v) => v.pvName).join(', ')} to ${nodeName}`,
      );
    }
    await sleep(250, signal).catch(() => {});
  }
  return undefined;
}
