/**
 * The objects the provisioner makes for a claim of a leasehold StorageClass (pure
 * builders), and how it recognises them.
 *
 * One name for all of them: `pvc-<claim UID>`, the name Kubernetes' external-provisioner
 * gives a PV. The backing claim and the ShareManager live in the class's backing
 * namespace; the PV is cluster-scoped. Each carries LABEL_PROVISIONED_FOR = the claim's
 * UID, which is how the provisioner finds them again (after a restart, or when the
 * claim is gone) and the only thing that makes them ours: an object of that name
 * without the label is never written nor deleted.
 *
 * The PV: `nfs` from the share's status.export, the class's mountOptions (else the ones
 * the manager publishes, nfs-server-preset.ts), its reclaim policy (default Delete),
 * capacity = the claim's request, the claim's access modes, pre-bound to exactly that
 * claim (claimRef with UID). With reclaim policy Delete it carries FINALIZER_PROVISIONED,
 * so that deleting the PV by hand still waits for the server to stop and the backing
 * claim to go (decide-provisioning.ts).
 */
import type {
  V1Affinity,
  V1NodeSelectorTerm,
  V1ObjectMeta,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1StorageClass,
  V1TopologySelectorTerm,
} from '@kubernetes/client-node';
import { GROUP } from '../../lib/lease-record.ts';
import type { ExportStatus } from '../share-model/nfs-server-preset.ts';
import { type ShareManager, SM_GROUP, SM_KIND, SM_VERSION } from '../share-model/share-manager-spec.ts';
import { PROVISIONED_MOUNT_PATH, PROVISIONER_NAME, type ProvisionSettings } from './class-parameters.ts';

/** The UID of the claim an object was provisioned for. */
export const LABEL_PROVISIONED_FOR = `${GROUP}/provisioned-for`;
/** `namespace/name` of that claim (for people; the label is what counts). */
export const ANNOTATION_PROVISIONED_CLAIM = `${GROUP}/provisioned-claim`;
export const FINALIZER_PROVISIONED = `${GROUP}/provisioned-share`;
/** Kubernetes' external-provisioner protocol. */
export const ANNOTATION_STORAGE_PROVISIONER = 'volume.kubernetes.io/storage-provisioner';
export const ANNOTATION_BETA_STORAGE_PROVISIONER = 'volume.beta.kubernetes.io/storage-provisioner';
export const ANNOTATION_SELECTED_NODE = 'volume.kubernetes.io/selected-node';
export const ANNOTATION_PROVISIONED_BY = 'pv.kubernetes.io/provisioned-by';

export function provisionedName(claimUid: string): string {
  return `pvc-${claimUid}`;
}

export function claimKey(claim: V1PersistentVolumeClaim): string {
  return `${claim.metadata?.namespace ?? ''}/${claim.metadata?.name ?? ''}`;
}

/** The claim's requested size (the API requires it on every claim). */
export function requestedStorage(claim: V1PersistentVolumeClaim): string {
  return String(claim.spec?.resources?.requests?.storage ?? '');
}

/** True when `object` carries our label for `claimUid`. */
export function provisionedFor(object: { metadata?: V1ObjectMeta } | undefined, claimUid: string): boolean {
  return object?.metadata?.labels?.[LABEL_PROVISIONED_FOR] === claimUid;
}

function ourMetadata(claim: V1PersistentVolumeClaim, namespace?: string): V1ObjectMeta {
  const uid = claim.metadata?.uid ?? '';
  return {
    name: provisionedName(uid),
    ...(namespace ? { namespace } : {}),
    labels: { [LABEL_PROVISIONED_FOR]: uid },
    annotations: { [ANNOTATION_PROVISIONED_CLAIM]: claimKey(claim) },
  };
}

/** The RWO claim the server mounts: the class's backing class (or the default), the claim's size. */
export function backingClaim(
  claim: V1PersistentVolumeClaim,
  settings: ProvisionSettings,
): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: ourMetadata(claim, settings.backingNamespace),
    spec: {
      accessModes: ['ReadWriteOnce'],
      volumeMode: 'Filesystem',
      resources: { requests: { storage: requestedStorage(claim) } },
      ...(settings.backingStorageClass ? { storageClassName: settings.backingStorageClass } : {}),
    },
  };
}

/**
 * The ShareManager serving the backing claim with the shipped NFS server. Placement: the
 * class's allowedTopologies become required node terms (ANDed with the `affinity`
 * parameter's), so the server, and every failover of it, stays inside them; with
 * WaitForFirstConsumer the node the scheduler selected for the claim's first pod is
 * preferred (not required: a failover must be free to leave it).
 */
export function provisionedShare(
  claim: V1PersistentVolumeClaim,
  settings: ProvisionSettings,
  storageClass?: V1StorageClass,
): ShareManager {
  const metadata = ourMetadata(claim, settings.backingNamespace);
  const scheduling = settings.share.scheduling ?? {};
  const affinity = withTopology(
    scheduling.affinity,
    storageClass?.allowedTopologies ?? [],
    claim.metadata?.annotations?.[ANNOTATION_SELECTED_NODE],
  );
  return {
    apiVersion: `${SM_GROUP}/${SM_VERSION}`,
    kind: SM_KIND,
    metadata,
    spec: {
      ...settings.share,
      ...(affinity ? { scheduling: { ...scheduling, affinity } } : {}),
      volume: { pvc: metadata.name ?? '', mountPath: PROVISIONED_MOUNT_PATH },
    },
  };
}

function withTopology(
  affinity: V1Affinity | undefined,
  topologies: V1TopologySelectorTerm[],
  selectedNode: string | undefined,
): V1Affinity | undefined {
  const topologyTerms: V1NodeSelectorTerm[] = topologies.map((t) => ({
    matchExpressions: (t.matchLabelExpressions ?? []).map((e) => ({
      key: e.key,
      operator: 'In',
      values: e.values,
    })),
  }));
  if (topologyTerms.length === 0 && !selectedNode) return affinity;
  const node = affinity?.nodeAffinity ?? {};
  const userTerms = node.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms ?? [];
  // (u1 or u2) and (t1 or t2) = every pair ANDed.
  const required =
    topologyTerms.length === 0
      ? userTerms
      : userTerms.length === 0
        ? topologyTerms
        : userTerms.flatMap((u) =>
            topologyTerms.map((t) => ({
              ...u,
              matchExpressions: [...(u.matchExpressions ?? []), ...(t.matchExpressions ?? [])],
            })),
          );
  const preferred = [
    ...(node.preferredDuringSchedulingIgnoredDuringExecution ?? []),
    ...(selectedNode
      ? [
          {
            weight: 50,
            preference: { matchFields: [{ key: 'metadata.name', operator: 'In', values: [selectedNode] }] },
          },
        ]
      : []),
  ];
  return {
    ...affinity,
    nodeAffinity: {
      ...node,
      ...(required.length > 0
        ? { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: required } }
        : {}),
      ...(preferred.length > 0 ? { preferredDuringSchedulingIgnoredDuringExecution: preferred } : {}),
    },
  };
}

/** The `nfs` PV of the share, pre-bound to the claim. */
export function provisionedVolume(
  claim: V1PersistentVolumeClaim,
  storageClass: V1StorageClass,
  exported: ExportStatus,
): V1PersistentVolume {
  const metadata = ourMetadata(claim);
  const reclaimPolicy = storageClass.reclaimPolicy ?? 'Delete';
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: {
      ...metadata,
      annotations: { ...metadata.annotations, [ANNOTATION_PROVISIONED_BY]: PROVISIONER_NAME },
      ...(reclaimPolicy === 'Delete' ? { finalizers: [FINALIZER_PROVISIONED] } : {}),
    },
    spec: {
      capacity: { storage: requestedStorage(claim) },
      accessModes: claim.spec?.accessModes ?? ['ReadWriteMany'],
      persistentVolumeReclaimPolicy: reclaimPolicy,
      storageClassName: storageClass.metadata?.name ?? '',
      volumeMode: 'Filesystem',
      mountOptions: storageClass.mountOptions?.length
        ? storageClass.mountOptions
        : exported.mountOptions.split(','),
      nfs: { server: exported.clusterIP, path: exported.path },
      claimRef: {
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        namespace: claim.metadata?.namespace ?? '',
        name: claim.metadata?.name ?? '',
        uid: claim.metadata?.uid ?? '',
      },
    },
  };
}
