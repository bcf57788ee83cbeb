/**
 * The share's endpoints, as the manager publishes them (pure): one EndpointSlice per
 * share, written by the manager, for a Service without a selector.
 *
 * Why not the Service's selector and Kubernetes' EndpointSlice controller: that
 * controller runs in kube-controller-manager, and its lag is the clients' stall. After
 * an API server outage its informers back off (a restarted API server answers 403 until
 * its authorizer has synced): measured on 2026-12-07, a replacement that served 26 s
 * after the outage began got its address into the slice at 68 s, and a Linux 6.12 NFS
 * client came back after its grace period and lost its lock. The manager that
 * started the replacement publishes it on its own watch of the pod.
 *
 * Guarantees: the slice lists the share's live pods (not ended, not being deleted) that
 * have an address, in name order; with the shipped NFS server every such pod, as
 * publishNotReadyAddresses did (its lease gate refuses connections until it may serve);
 * with the user's server (spec.server) only Ready pods. Its owners are the listed pods,
 * so the garbage collector removes it with the last of them (a manager of the previous
 * release, after a rollback, never updates it: it goes with the pods it names). No
 * publishable pod: no slice (kube-proxy then refuses connections, as with an empty one).
 * Not guaranteed: dual-stack (only status.podIP, its family the slice's addressType).
 */
import type { V1EndpointSlice, V1Pod } from '@kubernetes/client-node';
import { LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { isLive } from '../share-model/pod-spec.ts';
import type { ShareManager } from '../share-model/share-manager-spec.ts';
import { servicePorts } from './service-spec.ts';

/** Kubernetes' label naming who writes a slice; its own controller skips the others. */
export const LABEL_MANAGED_BY = 'endpointslice.kubernetes.io/managed-by';
export const ENDPOINTS_MANAGER = 'manager.leasehold.dev';
const LABEL_SERVICE_NAME = 'kubernetes.io/service-name';

/** The label value of the slices Kubernetes' EndpointSlice controller writes for a Service with a selector. */
export const KUBERNETES_ENDPOINTS_CONTROLLER = 'endpointslice-controller.k8s.io';

/**
 * Whether `slice` is one Kubernetes' controller wrote for the share's Service while it
 * had a selector (a previous release's). The controller never updates nor deletes such
 * a slice once the selector is gone, so it would keep a lost pod's address beside the
 * manager's slice: the manager deletes it (decideShareManager).
 */
export function isKubernetesSliceOf(slice: V1EndpointSlice, sm: ShareManager): boolean {
  const labels = slice.metadata?.labels ?? {};
  return (
    slice.metadata?.namespace === sm.metadata.namespace &&
    labels[LABEL_SERVICE_NAME] === sm.metadata.name &&
    labels[LABEL_MANAGED_BY] === KUBERNETES_ENDPOINTS_CONTROLLER
  );
}

/** What Kubernetes' EndpointSlice mirroring controller labels the slices it copies from a v1 Endpoints object with. */
export const KUBERNETES_MIRRORING_CONTROLLER = 'endpointslicemirroring-controller.k8s.io';
/** The label Kubernetes' (legacy) Endpoints controller puts on the v1 Endpoints it writes for a selector. */
export const LABEL_ENDPOINTS_MANAGED_BY = 'endpoints.kubernetes.io/managed-by';
export const KUBERNETES_ENDPOINTS_LEGACY_CONTROLLER = 'endpoint-controller';

/**
 * Whether `slice` mirrors a v1 Endpoints object that Kubernetes' Endpoints controller
 * wrote for the share's Service while it had a selector. That controller too leaves its
 * Endpoints alone once the selector is gone, and the mirroring controller then copies
 * it into a slice, as stale as it: the manager deletes that Endpoints object, and the
 * mirrored slice goes with it.
 */
export function isMirroredLegacySliceOf(slice: V1EndpointSlice, sm: ShareManager): boolean {
  const labels = slice.metadata?.labels ?? {};
  return (
    slice.metadata?.namespace === sm.metadata.namespace &&
    labels[LABEL_SERVICE_NAME] === sm.metadata.name &&
    labels[LABEL_MANAGED_BY] === KUBERNETES_MIRRORING_CONTROLLER &&
    labels[LABEL_ENDPOINTS_MANAGED_BY] === KUBERNETES_ENDPOINTS_LEGACY_CONTROLLER
  );
}

/** The slice's name: the share's, with a suffix Kubernetes' controller never generates (it adds `-` and 5 characters). */
export function endpointSliceName(share: string): string {
  return `${share}-leasehold`;
}

/** Whether `slice` is the one this manager writes for `sm` (its label and its name). */
export function isOwnEndpointSlice(slice: V1EndpointSlice, sm: ShareManager): boolean {
  const labels = slice.metadata?.labels ?? {};
  return (
    slice.metadata?.name === endpointSliceName(sm.metadata.name ?? '') &&
    labels[LABEL_MANAGED_BY] === ENDPOINTS_MANAGER &&
    labels[LABEL_SHARE_MANAGER] === sm.metadata.name
  );
}

/** The pods the share's clients may be sent to, in name order (see the header). */
export function publishablePods(sm: ShareManager, pods: readonly V1Pod[]): V1Pod[] {
  return pods
    .filter((p) => isLive(p) && Boolean(p.status?.podIP))
    .filter(
      (p) => !sm.spec.server || p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
    )
    .sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
}

/** The slice the share needs, or undefined when no pod may be published. */
export function desiredEndpointSlice(sm: ShareManager, pods: readonly V1Pod[]): V1EndpointSlice | undefined {
  const share = sm.metadata.name ?? '';
  const namespace = sm.metadata.namespace ?? '';
  const published = publishablePods(sm, pods);
  if (published.length === 0) return undefined;
  const ipv6 = (published[0]?.status?.podIP ?? '').includes(':');
  const sameFamily = published.filter((p) => (p.status?.podIP ?? '').includes(':') === ipv6);
  const ports = servicePorts(sm).map((p) => ({
    name: p.name,
    port: Number(p.targetPort ?? p.port),
    protocol: p.protocol ?? 'TCP',
  }));
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: endpointSliceName(share),
      namespace,
      labels: {
        [LABEL_SERVICE_NAME]: share,
        [LABEL_MANAGED_BY]: ENDPOINTS_MANAGER,
        [LABEL_SHARE_MANAGER]: share,
      },
      ownerReferences: sameFamily.map((p) => ({
        apiVersion: 'v1',
        kind: 'Pod',
        name: p.metadata?.name ?? '',
        uid: p.metadata?.uid ?? '',
      })),
    },
    addressType: ipv6 ? 'IPv6' : 'IPv4',
    endpoints: sameFamily.map((p) => ({
      addresses: [p.status?.podIP ?? ''],
      conditions: { ready: true, serving: true, terminating: false },
      ...(p.spec?.nodeName ? { nodeName: p.spec.nodeName } : {}),
      targetRef: { kind: 'Pod', namespace, name: p.metadata?.name ?? '', uid: p.metadata?.uid ?? '' },
    })),
    // A headless Service (a user's server without ports): no ports listed means all.
    ...(ports.length > 0 ? { ports } : {}),
  };
}

/** What routing depends on, as one comparable string (order-insensitive where the API is). */
function routingKey(slice: V1EndpointSlice): string {
  const labels = slice.metadata?.labels ?? {};
  return JSON.stringify({
    addressType: slice.addressType,
    service: labels[LABEL_SERVICE_NAME],
    managedBy: labels[LABEL_MANAGED_BY],
    share: labels[LABEL_SHARE_MANAGER],
    owners: (slice.metadata?.ownerReferences ?? []).map((o) => `${o.kind}/${o.name}/${o.uid}`).sort(),
    endpoints: (slice.endpoints ?? [])
      .map((e) =>
        [
          [...e.addresses].sort().join(','),
          e.conditions?.ready,
          e.conditions?.serving,
          e.conditions?.terminating,
          e.nodeName ?? '',
          e.targetRef?.uid ?? '',
        ].join('|'),
      )
      .sort(),
    ports: (slice.ports ?? []).map((p) => `${p.name ?? ''}/${p.port}/${p.protocol ?? 'TCP'}`).sort(),
  });
}

export type EndpointsAction =
  /** Create `want`, or replace `current` (its resourceVersion: a CAS) with it; recreate when the address family changed. */
  | { kind: 'applyEndpoints'; want: V1EndpointSlice; current?: V1EndpointSlice }
  /** Delete `current` (its uid as the precondition): no pod may be published, or Kubernetes' stale one. */
  | { kind: 'deleteEndpoints'; current: V1EndpointSlice }
  /** Delete the v1 Endpoints `namespace/name` if Kubernetes' Endpoints controller wrote it (isMirroredLegacySliceOf). */
  | { kind: 'deleteLegacyEndpoints'; namespace: string; name: string };

/** The write that makes the share's slice what it needs, if any. */
export function decideEndpoints(
  sm: ShareManager,
  pods: readonly V1Pod[],
  current: V1EndpointSlice | undefined,
): EndpointsAction | undefined {
  const want = desiredEndpointSlice(sm, pods);
  if (!want) return current ? { kind: 'deleteEndpoints', current } : undefined;
  if (current && routingKey(current) === routingKey(want)) return undefined;
  return current ? { kind: 'applyEndpoints', want, current } : { kind: 'applyEndpoints', want };
}
