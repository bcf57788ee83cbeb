/**
 * The objects of `spec.consumer` (pure): the names, labels and ownership mark of the
 * claim and PersistentVolume that publish a share, their builders, and what drifted on
 * an existing one. decide-consumer.ts decides what to do with them.
 *
 * Invariants:
 *  - Ours means ANNOTATION_OWNER_UID equals the ShareManager's UID; nothing here reads an
 *    object as ours by its name or labels (a label can be copied, a name is anyone's).
 *  - The PV's name `leasehold.<namespace>.<name>` is unambiguous: neither a namespace nor
 *    a ShareManager name (the CRD's pattern) holds a dot; at most 10 + 63 + 1 + 58 characters.
 *  - A repair keeps every field we do not own and the resourceVersion read (the update is
 *    a CAS); what the API does not let change (a PV's source, a claim's spec) is reported
 *    by sourceDrift / claimSpecDrift, never written.
 *
 * Not guaranteed: that the capacity means anything to NFS (it is nominal; the backing
 * claim's size is used so that the claim reads sensibly).
 */
import type { V1ObjectMeta, V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { ExportStatus } from '../share-model/nfs-server-preset.ts';
import type { ShareManager } from '../share-model/share-manager-spec.ts';
import { ownerRef } from './service-spec.ts';

export const FINALIZER_CONSUMER = 'leasehold.dev/consumer-volume';
/** On the PV and the claim: the ShareManager's name and namespace (the informers select on them). */
export const LABEL_CONSUMER_OF = 'leasehold.dev/consumer-of';
export const LABEL_CONSUMER_NAMESPACE = 'leasehold.dev/consumer-of-namespace';
/** The ownership mark: the ShareManager's UID. Only an object carrying it is ever changed. */
export const ANNOTATION_OWNER_UID = 'leasehold.dev/share-manager-uid';
/** Informational: `namespace/name` of the ShareManager (named in a taken condition). */
const ANNOTATION_SHARE_MANAGER = 'leasehold.dev/share-manager';
/** On the claim, once its PV exists: the PV's UID (writing it wakes the PV controller: execute-consumer.ts). */
export const ANNOTATION_VOLUME_UID = 'leasehold.dev/volume-uid';

export type ConsumerKind = 'PersistentVolume' | 'PersistentVolumeClaim';

/** The PV's name: `leasehold.<namespace>.<name>` (header). */
export function consumerVolumeName(sm: ShareManager): string {
  return `leasehold.${sm.metadata.namespace ?? ''}.${sm.metadata.name ?? ''}`;
}

export function isOurs(sm: ShareManager, object: { metadata?: V1ObjectMeta } | undefined): boolean {
  const uid = sm.metadata.uid ?? '';
  return uid !== '' && object?.metadata?.annotations?.[ANNOTATION_OWNER_UID] === uid;
}

/** Why `object` (which exists) is not ours, for the condition. */
export function notOursBecause(object: { metadata?: V1ObjectMeta }): string {
  const uid = object.metadata?.annotations?.[ANNOTATION_OWNER_UID];
  if (uid === undefined) return `it carries no ${ANNOTATION_OWNER_UID} annotation`;
  const of = object.metadata?.annotations?.[ANNOTATION_SHARE_MANAGER];
  return `its ${ANNOTATION_OWNER_UID} is ${uid}${of ? ` (ShareManager ${of})` : ''}, another ShareManager's`;
}

function ourMetadata(sm: ShareManager): Pick<V1ObjectMeta, 'labels' | 'annotations'> {
  const namespace = sm.metadata.namespace ?? '';
  const name = sm.metadata.name ?? '';
  return {
    labels: { [LABEL_CONSUMER_OF]: name, [LABEL_CONSUMER_NAMESPACE]: namespace },
    annotations: {
      [ANNOTATION_OWNER_UID]: sm.metadata.uid ?? '',
      [ANNOTATION_SHARE_MANAGER]: `${namespace}/${name}`,
    },
  };
}

/**
 * The claim's ownerReference. NB: no blockOwnerDeletion: nothing waits for the claim
 * (the finalizer does the ordering), and setting it needs update on the owner's
 * finalizers under the OwnerReferencesPermissionEnforcement admission plugin.
 */
function claimOwner(sm: ShareManager) {
  return ownerRef(sm, { blockOwnerDeletion: false });
}

/** The claim workloads mount: pre-bound to the PV, no class, owned by the ShareManager. */
export function consumerClaim(sm: ShareManager, claimName: string, storage: string): V1PersistentVolumeClaim {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolumeClaim',
    metadata: {
      name: claimName,
      namespace: sm.metadata.namespace ?? '',
      ...ourMetadata(sm),
      ownerReferences: [claimOwner(sm)],
    },
    spec: {
      accessModes: ['ReadWriteMany'],
      storageClassName: '',
      volumeMode: 'Filesystem',
      volumeName: consumerVolumeName(sm),
      resources: { requests: { storage } },
    },
  };
}

/** The PV: the share's NFS export, Retain, pre-bound to exactly our claim (its UID). */
export function consumerVolume(
  sm: ShareManager,
  exported: ExportStatus,
  storage: string,
  claim: { name: string; uid: string },
): V1PersistentVolume {
  return {
    apiVersion: 'v1',
    kind: 'PersistentVolume',
    metadata: { name: consumerVolumeName(sm), ...ourMetadata(sm) },
    spec: {
      capacity: { storage },
      accessModes: ['ReadWriteMany'],
      persistentVolumeReclaimPolicy: 'Retain',
      storageClassName: '',
      volumeMode: 'Filesystem',
      mountOptions: exported.mountOptions.split(','),
      nfs: { server: exported.clusterIP, path: exported.path },
      claimRef: {
        apiVersion: 'v1',
        kind: 'PersistentVolumeClaim',
        namespace: sm.metadata.namespace ?? '',
        name: claim.name,
        uid: claim.uid,
      },
    },
  };
}

const same = (a: unknown, b: unknown) => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

/** Our labels and annotations missing or changed on `actual`. */
function metadataDrift(sm: ShareManager, actual: V1ObjectMeta | undefined): string[] {
  const want = ourMetadata(sm);
  const fields: string[] = [];
  for (const [key, value] of Object.entries(want.labels ?? {}))
    if (actual?.labels?.[key] !== value) fields.push(`metadata.labels[${key}]`);
  for (const [key, value] of Object.entries(want.annotations ?? {}))
    if (actual?.annotations?.[key] !== value) fields.push(`metadata.annotations[${key}]`);
  return fields;
}

function withOurMetadata(sm: ShareManager, actual: V1ObjectMeta | undefined): V1ObjectMeta {
  const want = ourMetadata(sm);
  return {
    ...actual,
    labels: { ...actual?.labels, ...want.labels },
    annotations: { ...actual?.annotations, ...want.annotations },
  };
}

/**
 * The repair of our PV: the updated object (keeping everything we do not own, and the
 * resourceVersion read) and the fields that drifted; undefined when nothing did.
 * NB: the nfs source is not repaired here (immutable: sourceDrift).
 */
export function volumeRepair(
  sm: ShareManager,
  actual: V1PersistentVolume,
  desired: V1PersistentVolume,
): { volume: V1PersistentVolume; fields: string[] } | undefined {
  const fields = metadataDrift(sm, actual.metadata);
  const a = actual.spec ?? {};
  const d = desired.spec ?? {};
  if (a.capacity?.storage !== d.capacity?.storage) fields.push('spec.capacity.storage');
  if (!same(a.accessModes, d.accessModes)) fields.push('spec.accessModes');
  if (!same(a.mountOptions, d.mountOptions)) fields.push('spec.mountOptions');
  if (a.persistentVolumeReclaimPolicy !== d.persistentVolumeReclaimPolicy)
    fields.push('spec.persistentVolumeReclaimPolicy');
  // NB: the API server drops an empty storageClassName of a PV.
  if ((a.storageClassName ?? '') !== '') fields.push('spec.storageClassName');
  const ref = a.claimRef;
  const want = d.claimRef;
  if (ref?.namespace !== want?.namespace || ref?.name !== want?.name || ref?.uid !== want?.uid)
    fields.push('spec.claimRef');
  if (fields.length === 0) return undefined;
  return {
    fields,
    volume: {
      ...actual,
      metadata: withOurMetadata(sm, actual.metadata),
      spec: {
        ...a,
        capacity: { ...a.capacity, storage: d.capacity?.storage ?? '' },
        accessModes: d.accessModes,
        mountOptions: d.mountOptions,
        persistentVolumeReclaimPolicy: d.persistentVolumeReclaimPolicy,
        storageClassName: '',
        // A claimRef of ours, re-pointed at our current claim (its UID), keeping nothing stale.
        claimRef: { ...want },
      },
    },
  };
}

/** The PV's immutable fields that differ from what the share exports now. */
export function sourceDrift(actual: V1PersistentVolume, desired: V1PersistentVolume): string[] {
  const fields: string[] = [];
  const a = actual.spec?.nfs;
  const d = desired.spec?.nfs;
  if (a?.server !== d?.server) fields.push(`spec.nfs.server (${a?.server ?? 'unset'}, now ${d?.server})`);
  if (a?.path !== d?.path) fields.push(`spec.nfs.path (${a?.path ?? 'unset'}, now ${d?.path})`);
  return fields;
}

/** The repair of our claim (metadata and ownerReference only: its spec is immutable). */
export function claimRepair(
  sm: ShareManager,
  actual: V1PersistentVolumeClaim,
): { claim: V1PersistentVolumeClaim; fields: string[] } | undefined {
  const fields = metadataDrift(sm, actual.metadata);
  const owners = actual.metadata?.ownerReferences ?? [];
  const owner = claimOwner(sm);
  const hasOwner = owners.some((o) => o.uid === owner.uid && o.controller === true);
  if (!hasOwner) fields.push('metadata.ownerReferences');
  if (fields.length === 0) return undefined;
  const metadata = withOurMetadata(sm, actual.metadata);
  if (!hasOwner)
    metadata.ownerReferences = [...owners.filter((o) => o.uid !== owner.uid && !o.controller), owner];
  return { fields, claim: { ...actual, metadata } };
}

/** The claim's immutable fields that differ from what we create. */
export function claimSpecDrift(sm: ShareManager, actual: V1PersistentVolumeClaim): string[] {
  const fields: string[] = [];
  const spec = actual.spec ?? {};
  if (spec.volumeName !== consumerVolumeName(sm))
    fields.push(`spec.volumeName (${spec.volumeName ?? 'unset'})`);
  if ((spec.storageClassName ?? '') !== '') fields.push(`spec.storageClassName (${spec.storageClassName})`);
  if (!same(spec.accessModes, ['ReadWriteMany'])) fields.push('spec.accessModes');
  return fields;
}
