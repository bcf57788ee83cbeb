/**
 * The read side of a share on the running system, as the e2e tests, the benchmarks and
 * the demo see it: its ShareManager's status (which pod and node serve, the last
 * failover, how to mount it), its live pods, and the pods its Service's EndpointSlices
 * name. The shares themselves are made by real-share.ts.
 */
import { k8s, withDeadline } from '../../lib/kube-client.ts';
import { type RealSystem, SHARES_NAMESPACE } from './real-system.ts';

const SM = { group: 'leasehold.dev', version: 'v1alpha1', plural: 'sharemanagers' };

export interface ShareStatus {
  state?: string;
  node?: string;
  pod?: string;
  leaseHolder?: string;
  lastFailover?: Record<string, string | undefined>;
  /** How to mount a share of the shipped NFS server (docs/operations.md "Mounting a share"). */
  export?: { source?: string; mountOptions?: string };
  conditions?: Array<{ type: string; status: string; reason?: string; message?: string }>;
}

export async function shareStatus(sys: Pick<RealSystem, 'kc'>, name: string): Promise<ShareStatus> {
  const custom = sys.kc.makeApiClient(k8s.CustomObjectsApi);
  const sm = (await custom.getNamespacedCustomObject(
    { ...SM, namespace: SHARES_NAMESPACE, name },
    withDeadline(5_000),
  )) as { status?: ShareStatus };
  return sm.status ?? {};
}

/** The pods of a share (label leasehold.dev/share-manager=<name>), live ones only. */
export async function sharePods(
  sys: Pick<RealSystem, 'core'>,
  name: string,
  namespace = SHARES_NAMESPACE,
): Promise<k8s.V1Pod[]> {
  const list = await sys.core.listNamespacedPod(
    { namespace, labelSelector: `leasehold.dev/share-manager=${name}` },
    withDeadline(5_000),
  );
  return list.items.filter((p) => !p.metadata?.deletionTimestamp);
}

/** The pod names the share's Service endpoints (EndpointSlices) point at, ready ones only. */
export async function serviceEndpointPods(sys: Pick<RealSystem, 'kc'>, name: string): Promise<string[]> {
  const discovery = sys.kc.makeApiClient(k8s.DiscoveryV1Api);
  const slices = await discovery.listNamespacedEndpointSlice(
    { namespace: SHARES_NAMESPACE, labelSelector: `kubernetes.io/service-name=${name}` },
    withDeadline(5_000),
  );
  return slices.items.flatMap((s) =>
    (s.endpoints ?? [])
      .filter((e) => e.conditions?.ready !== false)
      .map((e) => e.targetRef?.name ?? '')
      .filter((n) => n !== ''),
  );
}
