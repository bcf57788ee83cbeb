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
 * The ShareManager's Service spec: its pods by label, servicePorts(sm); no ports declared
 * gives a headless Service (DNS to the pod needs none).
 *
 * The shipped NFS server's Service publishes its pods before they are Ready
 * (`publishNotReadyAddresses`): the EndpointSlice controller then lists a pod with
 * ready=true as soon as it has an IP (and keeps a terminating one listed, ready, until
 * it is gone), so a client reaches the replacement as soon as ganesha listens instead
 * of a readiness probe tick plus status and EndpointSlice propagation later (about
 * 1.5 s of every failover as clients saw it). Before ganesha listens a connection is
 * refused and the client retries, as NFS clients do. It costs no safety: readiness
 * never decided who serves. Only a pod whose ganesha runs accepts NFS connections, and
 * ganesha starts only after the lease gate (docs/design.md, Startup order); a failover
 * force-deletes the lost pod before it creates the replacement. A user's server
 * (`spec.server`) keeps the default: we do not know that it refuses connections
 * until it may serve.
 * A Service changed by hand is put back (serviceDrift, repairService).
 */
export function serviceSpec(sm: ShareManager): k8s.V1ServiceSpec {
  const ports = servicePorts(sm);
  return {
    selector: { [LABEL_SHARE_MANAGER]: sm.metadata.name ?? '' },
    ...(ports.length > 0 ? { ports } : { clusterIP: 'None' }),
    ...(sm.spec.server ? {} : { publishNotReadyAddresses: true }),
  };
}

/**
 * What of the share's own Service differs from serviceSpec (pure): the selector, the
 * ports (name, port, targetPort, protocol) and publishNotReadyAddresses, by name. A
 * headless Service that should have an address (or the reverse) is not repairable in
 * place (the ClusterIP is immutable) and is not reported here.
 */
export function serviceDrift(service: k8s.V1Service, sm: ShareManager): string[] {
  const want = serviceSpec(sm);
  const have = service.spec ?? {};
  const drift: string[] = [];
  if (JSON.stringify(sortedEntries(have.selector)) !== JSON.stringify(sortedEntries(want.selector)))
    drift.push('spec.selector');
  const portKey = (p: k8s.V1ServicePort) =>
    `${p.name ?? ''}/${p.port}/${String(p.targetPort ?? p.port)}/${p.protocol ?? 'TCP'}`;
  if ((have.clusterIP === 'None') === (want.clusterIP === 'None')) {
    const a = (have.ports ?? []).map(portKey).sort();
    const b = (want.ports ?? []).map(portKey).sort();
    if (JSON.stringify(a) !== JSON.stringify(b)) drift.push('spec.ports');
  }
  if (Boolean(have.publishNotReadyAddresses) !== Boolean(want.publishNotReadyAddresses))
    drift.push('spec.publishNotReadyAddresses');
  return drift;
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

export function ownerRef(sm: ShareManager): k8s.V1OwnerReference {
  return {
    apiVersion: `${SM_GROUP}/${SM_VERSION}`,
    kind: SM_KIND,
    name: sm.metadata.name ?? '',
    uid: sm.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}
