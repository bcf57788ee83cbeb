/**
 * The testbed's CSI wiring as pure data: the driver's name, where its sockets are on a
 * node (the kubelet's conventions), the argv of each part, and the API objects the
 * control-plane side creates (the CSIDriver, the StorageClass of dynamic provisioning,
 * and the external-attacher's and external-provisioner's identities with the RBAC of
 * their upstream deploy/kubernetes/rbac.yaml), for the driver and for the same plugin's
 * attach-less second name (NOATTACH_DRIVER_NAME: CSIDriver attachRequired false).
 *
 * Invariants: the node socket is under the kubelet root's plugins/<driver>/ and the
 * registration socket under plugins_registry/, the paths the kubelet's plugin watcher
 * and CSI plugin use; the attacher handles only VolumeAttachments whose attacher is
 * DRIVER_NAME (the name the driver reports); a socket path is checked to fit a unix
 * socket address (socketPathProblem) before a part is started on it.
 */
import { join } from 'node:path';
import type { V1ClusterRole, V1CSIDriver, V1Role, V1StorageClass } from '@kubernetes/client-node';

export const DRIVER_NAME = 'hostdir.csi.leasehold.dev';

/**
 * The same plugin under a second name whose CSIDriver says attachRequired: false: no
 * VolumeAttachment, no ControllerPublish, so nothing the storage could revoke; the node
 * part (-attach-required=false) bind-mounts the plain volume directory. Storage that
 * cannot fence a node, as NFS-backed and hostPath-like drivers are (the manager's
 * storage-fencing gate classifies it `cannot-fence`). NB: no attacher serves it.
 */
export const NOATTACH_DRIVER_NAME = 'noattach.hostdir.csi.leasehold.dev';

/** One of the testbed's two driver names. */
export type TestbedDriver = typeof DRIVER_NAME | typeof NOATTACH_DRIVER_NAME;

/** Whether the driver's volumes go through an attach (VolumeAttachment, ControllerPublish). */
export const attachRequired = (driver: TestbedDriver): boolean => driver === DRIVER_NAME;

/** The external-attacher's ServiceAccount (upstream's deploy/kubernetes/rbac.yaml names it so). */
export const ATTACHER_ACCOUNT = { namespace: 'default', name: 'csi-attacher' } as const;

export interface NodePluginPaths {
  /** The driver's node socket, which the registrar gives the kubelet as the endpoint. */
  socket: string;
  /** The kubelet's plugin watcher's directory. */
  registrationDir: string;
}

/** sockaddr_un's sun_path is 108 bytes with the terminating NUL. */
export const MAX_SOCKET_PATH_BYTES = 107;

/** Why `path` cannot be a unix socket's address, or undefined when it can. */
export function socketPathProblem(path: string): string | undefined {
  const bytes = Buffer.byteLength(path);
  return bytes > MAX_SOCKET_PATH_BYTES
    ? `socket path ${path} is ${bytes} bytes, more than a unix socket's ${MAX_SOCKET_PATH_BYTES} (set a shorter TMPDIR)`
    : undefined;
}

export const nodePluginPaths = (
  kubeletRoot: string,
  driver: TestbedDriver = DRIVER_NAME,
): NodePluginPaths => ({
  socket: join(kubeletRoot, 'plugins', driver, 'csi.sock'),
  registrationDir: join(kubeletRoot, 'plugins_registry'),
});

/** The registrar's socket for `driver` (it names it after the name the driver reports). */
export const registrationSocket = (paths: NodePluginPaths, driver: TestbedDriver = DRIVER_NAME): string =>
  join(paths.registrationDir, `${driver}-reg.sock`);

export const driverNodeArgs = (
  paths: NodePluginPaths,
  nodeName: string,
  backingDir: string,
  driver: TestbedDriver = DRIVER_NAME,
): string[] => [
  '-mode=node',
  `-endpoint=${paths.socket}`,
  `-drivername=${driver}`,
  `-backing-dir=${backingDir}`,
  `-node-id=${nodeName}`,
  ...(attachRequired(driver) ? [] : ['-attach-required=false']),
];

export const registrarArgs = (paths: NodePluginPaths): string[] => [
  `-csi-address=${paths.socket}`,
  `-registration-dir=${paths.registrationDir}`,
];

/**
 * `fencing.fencefs`: the leasehold-fencefs binary, which turns the fencing mode on
 * (plugin/driver/fencing.go); `fencing.viewsSocket`: where the controller then answers
 * GET /views (every view's fencefs stats: controller.ts viewStats).
 */
export const driverControllerArgs = (
  socket: string,
  backingDir: string,
  stateDir: string,
  fencing?: { fencefs: string; viewsSocket: string },
): string[] => [
  '-mode=controller',
  `-endpoint=${socket}`,
  `-drivername=${DRIVER_NAME}`,
  `-backing-dir=${backingDir}`,
  `-state-dir=${stateDir}`,
  ...(fencing ? [`-fencefs=${fencing.fencefs}`, `-views-endpoint=${fencing.viewsSocket}`] : []),
];

/**
 * The attacher with one replica, so no leader election; -v=2 logs which handler it
 * chose (controller.ts waits for "real CSI handler"). NB: its retry back-off is capped
 * at 5 s (default 5 min): a testbed whose attach failed once, e.g. before the node's
 * CSINode was written, must not wait minutes for the next try.
 */
export const attacherArgs = (socket: string, kubeconfig: string): string[] => [
  `--csi-address=${socket}`,
  `--kubeconfig=${kubeconfig}`,
  '--leader-election=false',
  '--timeout=15s',
  '--retry-interval-max=5s',
  '--worker-threads=4',
  '-v=2',
];

/** The external-provisioner's ServiceAccount (its upstream rbac.yaml names it so). */
export const PROVISIONER_ACCOUNT = { namespace: 'default', name: 'csi-provisioner' } as const;

/** The external-resizer's ServiceAccount (its upstream rbac.yaml names it so). */
export const RESIZER_ACCOUNT = { namespace: 'default', name: 'csi-resizer' } as const;

/** The resizer with one replica (no leader election), the same short back-off. */
export const resizerArgs = (socket: string, kubeconfig: string): string[] => [
  `--csi-address=${socket}`,
  `--kubeconfig=${kubeconfig}`,
  '--leader-election=false',
  '--timeout=30s',
  '--retry-interval-start=500ms',
  '--retry-interval-max=5s',
  '-v=2',
];

/** external-resizer's deploy/kubernetes/rbac.yaml (v2.3.0): its ClusterRole. */
export const resizerClusterRole = (): V1ClusterRole => ({
  metadata: { name: 'external-resizer-runner' },
  rules: [
    { apiGroups: [''], resources: ['persistentvolumes'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: [''], resources: ['persistentvolumeclaims'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['persistentvolumeclaims/status'], verbs: ['patch'] },
    { apiGroups: [''], resources: ['events'], verbs: ['list', 'watch', 'create', 'update', 'patch'] },
    {
      apiGroups: ['storage.k8s.io'],
      resources: ['volumeattributesclasses'],
      verbs: ['get', 'list', 'watch'],
    },
  ],
});

/** ... and its Role (leader election's Leases; unused with one replica, kept as upstream has it). */
export const resizerRole = (): V1Role => ({
  metadata: { name: 'external-resizer-cfg', namespace: RESIZER_ACCOUNT.namespace },
  rules: [
    {
      apiGroups: ['coordination.k8s.io'],
      resources: ['leases'],
      verbs: ['get', 'watch', 'list', 'delete', 'update', 'create'],
    },
  ],
});

/** The StorageClass of the driver's dynamically provisioned volumes. */
export const STORAGE_CLASS = 'leasehold-hostdir';
/**
 * With `expansion`: XFS volumes that grow online (ext4's online resize needs
 * CAP_SYS_RESOURCE, which these machines do not grant; XFS's needs CAP_SYS_ADMIN).
 */
export const STORAGE_CLASS_XFS = 'leasehold-hostdir-xfs';

/**
 * The provisioner with one replica, so no leader election. NB: its retry back-off is
 * capped at 5 s (default 5 min), as the attacher's; "Started provisioner controller" is
 * what controller.ts waits for.
 */
export const provisionerArgs = (socket: string, kubeconfig: string): string[] => [
  `--csi-address=${socket}`,
  `--kubeconfig=${kubeconfig}`,
  '--leader-election=false',
  '--timeout=15s',
  '--retry-interval-start=500ms',
  '--retry-interval-max=5s',
  '--worker-threads=4',
  '-v=2',
];

/**
 * The PV volumeAttributes key (and volume context) of the block kind: the volume is an
 * ext4 image, mounted by the node through a loop device (plugin/driver/block.go).
 */
export const BLOCK_FS_ATTRIBUTE = 'storage.leasehold.dev/block-filesystem';

/**
 * Immediate binding (the PVC is provisioned when made, before a pod picks a node: the
 * driver has no topology) and Delete: deleting the PVC deletes the volume. Its volumes
 * are of the block kind (`filesystem: ext4`): file handles that survive a move. With the
 * resizer running (`expansion`), allowVolumeExpansion: the image grows, then the node's
 * ext4 online (plugin/driver/expand.go).
 */
export const storageClassObject = (expansion = false, fs: 'ext4' | 'xfs' = 'ext4'): V1StorageClass => ({
  metadata: { name: fs === 'xfs' ? STORAGE_CLASS_XFS : STORAGE_CLASS },
  provisioner: DRIVER_NAME,
  parameters: { filesystem: fs },
  reclaimPolicy: 'Delete',
  volumeBindingMode: 'Immediate',
  ...(expansion ? { allowVolumeExpansion: true } : {}),
});

/** external-provisioner's deploy/kubernetes/rbac.yaml (v6.4.0): its ClusterRole. */
export const provisionerClusterRole = (): V1ClusterRole => ({
  metadata: { name: 'external-provisioner-runner' },
  rules: [
    {
      apiGroups: [''],
      resources: ['persistentvolumes'],
      verbs: ['get', 'list', 'watch', 'create', 'patch', 'delete'],
    },
    { apiGroups: [''], resources: ['persistentvolumeclaims'], verbs: ['get', 'list', 'watch', 'update'] },
    { apiGroups: ['storage.k8s.io'], resources: ['storageclasses'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['events'], verbs: ['list', 'watch', 'create', 'update', 'patch'] },
    {
      apiGroups: ['snapshot.storage.k8s.io'],
      resources: ['volumesnapshots'],
      verbs: ['get', 'list', 'watch', 'update'],
    },
    { apiGroups: ['snapshot.storage.k8s.io'], resources: ['volumesnapshotcontents'], verbs: ['get', 'list'] },
    { apiGroups: ['storage.k8s.io'], resources: ['csinodes'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch'] },
    { apiGroups: ['storage.k8s.io'], resources: ['volumeattachments'], verbs: ['get', 'list', 'watch'] },
  ],
});

/** The same file's Role (leader election's Leases, storage capacity, its owner lookup). */
export const provisionerRole = (): V1Role => ({
  metadata: { name: 'external-provisioner-cfg', namespace: PROVISIONER_ACCOUNT.namespace },
  rules: [
    {
      apiGroups: ['coordination.k8s.io'],
      resources: ['leases'],
      verbs: ['get', 'watch', 'list', 'delete', 'update', 'create'],
    },
    {
      apiGroups: ['storage.k8s.io'],
      resources: ['csistoragecapacities'],
      verbs: ['get', 'list', 'watch', 'create', 'update', 'patch', 'delete'],
    },
    { apiGroups: [''], resources: ['pods'], verbs: ['get'] },
    { apiGroups: ['apps'], resources: ['replicasets'], verbs: ['get'] },
  ],
});

/**
 * attachRequired (DRIVER_NAME): the attach-detach controller makes a VolumeAttachment
 * before the kubelet mounts; false (NOATTACH_DRIVER_NAME): the kubelet stages at once.
 */
export const csiDriverObject = (driver: TestbedDriver = DRIVER_NAME): V1CSIDriver => ({
  metadata: { name: driver },
  spec: {
    attachRequired: attachRequired(driver),
    podInfoOnMount: false,
    volumeLifecycleModes: ['Persistent'],
  },
});

/** external-attacher's deploy/kubernetes/rbac.yaml (v4.13.0): its ClusterRole. */
export const attacherClusterRole = (): V1ClusterRole => ({
  metadata: { name: 'external-attacher-runner' },
  rules: [
    { apiGroups: [''], resources: ['persistentvolumes'], verbs: ['get', 'list', 'watch', 'patch'] },
    { apiGroups: ['storage.k8s.io'], resources: ['csinodes'], verbs: ['get', 'list', 'watch'] },
    {
      apiGroups: ['storage.k8s.io'],
      resources: ['volumeattachments'],
      verbs: ['get', 'list', 'watch', 'patch'],
    },
    { apiGroups: ['storage.k8s.io'], resources: ['volumeattachments/status'], verbs: ['patch'] },
  ],
});

/** The same file's Role for leader election's Leases (unused with one replica, granted as upstream does). */
export const attacherLeaseRole = (): V1Role => ({
  metadata: { name: 'external-attacher-cfg', namespace: ATTACHER_ACCOUNT.namespace },
  rules: [
    {
      apiGroups: ['coordination.k8s.io'],
      resources: ['leases'],
      verbs: ['get', 'watch', 'list', 'delete', 'update', 'create'],
    },
  ],
});
