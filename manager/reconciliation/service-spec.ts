/**
 * The share's own Service as the manager makes it (pure): its spec, its ports, what of
 * it drifted, and whether a Service is the share's own. The executor writes it
 * (execute-reconcile.ts); decide-reconcile.ts and share-endpoints.ts read it.
 */
import type { k8s } from '../../lib/kube-client.ts';
import { LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { nfsPorts } from '../share-model/nfs-server-preset.ts';
import { type ShareManager, SM_GROUP, SM_KIND, SM_VERSION } from '../share-model/share-manager-spec.ts';

/** Whether `service` is the one this manager made for `sm`: its controller reference names `sm`'s uid. */
export function isOwnService(service: k8s.V1Service, sm: ShareManager): boolean {
  return (service.metadata?.ownerReferences ?? []).some(
    (o) => o.controller === true && o.kind === SM_KIND && o.uid !== undefined && o.uid === sm.metadata.uid,
  );
}

/**
 * The ShareManager's Service spec: servicePorts(sm), and no selector: the manager
 * publishes the share's endpoints itself (share-endpoints.ts), so the clients' route to
 * a replacement does not wait on kube-controller-manager's EndpointSlice controller. No
 * ports declared gives a headless Service (DNS to the pod needs none).
 * A Service changed by hand is put back (serviceDrift, repairService).
 */
export function serviceSpec(sm: ShareManager): k8s.V1ServiceSpec {
  const ports = servicePorts(sm);
  return ports.length > 0 ? { ports } : { clusterIP: 'None' };
}

/**
 * The selector the previous releases gave a share's Service (their EndpointSlice
 * controller then published its pods); removing it hands the endpoints to the manager.
 */
export function legacySelector(sm: ShareManager): Record<string, string> {
  return { [LABEL_SHARE_MANAGER]: sm.metadata.name ?? '' };
}

/**
 * What of the share's own Service differs from serviceSpec (pure): a selector (any:
 * Kubernetes' controller would then publish endpoints beside the manager's), the ports
 * (name, port, targetPort, protocol), by name. A headless Service that should have an
 * address (or the reverse) is not repairable in place (the ClusterIP is immutable) and
 * is not reported here. publishNotReadyAddresses, which the previous releases set, does
 * nothing without a selector and is left alone.
 */
export function serviceDrift(service: k8s.V1Service, sm: ShareManager): string[] {
  const want = serviceSpec(sm);
  const have = service.spec ?? {};
  const drift: string[] = [];
  if (sortedEntries(have.selector).length > 0) drift.push('spec.selector');
  const portKey = (p: k8s.V1ServicePort) =>
    `${p.name ?? ''}/${p.port}/${String(p.targetPort ?? p.port)}/${p.protocol ?? 'TCP'}`;
  if ((have.clusterIP === 'None') === (want.clusterIP === 'None')) {
    const a = (have.ports ?? []).map(portKey).sort();
    const b = (want.ports ?? []).map(portKey).sort();
    if (JSON.stringify(a) !== JSON.stringify(b)) drift.push('spec.ports');
  }
  return drift;
}

/** Whether `service` carries exactly the previous releases' selector (an upgrade, not a hand edit). */
export function hasLegacySelector(service: k8s.V1Service, sm: ShareManager): boolean {
  return (
    JSON.stringify(sortedEntries(service.spec?.selector)) ===
    JSON.stringify(sortedEntries(legacySelector(sm)))
  );
}

function sortedEntries(map: Record<string, string> | undefined): [string, string][] {
  return Object.entries(map ?? {}).sort(([a], [b]) => a.localeCompare(b));
}

/** The Service ports: spec.server's, or the shipped NFS server's (nfs-server-preset.ts). */
export function servicePorts(sm: ShareManager): k8s.V1ServicePort[] {
  const declared = sm.spec.server ? (sm.spec.server.ports ?? []) : nfsPorts(sm.spec.nfs);
  return declared.map((p, i) => ({
    name: p.name ?? `port-${i}`,
    port: p.containerPort,
    targetPort: p.containerPort as unknown as k8s.IntOrString,
    protocol: p.protocol ?? 'TCP',
  }));
}

/** The ShareManager as the controller owner of an object it makes; `blockOwnerDeletion` unless told otherwise. */
export function ownerRef(
  sm: ShareManager,
  opts: { blockOwnerDeletion?: boolean } = {},
): k8s.V1OwnerReference {
  return {
    apiVersion: `${SM_GROUP}/${SM_VERSION}`,
    kind: SM_KIND,
    name: sm.metadata.name ?? '',
    uid: sm.metadata.uid ?? '',
    controller: true,
    ...(opts.blockOwnerDeletion === false ? {} : { blockOwnerDeletion: true }),
  };
}
