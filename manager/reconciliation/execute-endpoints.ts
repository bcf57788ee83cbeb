/**
 * Writes the share's EndpointSlice as share-endpoints.ts decided (the imperative half).
 *
 * Every write is conditional, so managers on several nodes writing the same slice
 * converge instead of fighting: a replace carries the cached resourceVersion, a delete
 * the cached uid. A conflict (409: another manager wrote first) or a missing slice (404)
 * is not an error: the watch brings the newer object and the next pass decides again.
 * A slice of that name that is not the manager's (created by hand) is never touched:
 * the create's 409 then names it, and the reconcile retries with backoff.
 */
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { KubeApiError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import type { Logger } from '../../lib/logger.ts';
import {
  ENDPOINTS_MANAGER,
  type EndpointsAction,
  KUBERNETES_ENDPOINTS_LEGACY_CONTROLLER,
  LABEL_ENDPOINTS_MANAGED_BY,
  LABEL_MANAGED_BY,
} from './share-endpoints.ts';

export class EndpointsWriter {
  private readonly discovery: k8s.DiscoveryV1Api;
  private readonly core: k8s.CoreV1Api;

  constructor(
    kc: k8s.KubeConfig,
    private readonly timeoutMs: number,
    private readonly log: Logger,
  ) {
    this.discovery = kc.makeApiClient(k8s.DiscoveryV1Api);
    this.core = kc.makeApiClient(k8s.CoreV1Api);
  }

  async run(share: string, action: EndpointsAction): Promise<void> {
    if (action.kind === 'deleteLegacyEndpoints')
      return this.deleteLegacyEndpoints(share, action.namespace, action.name);
    const current = action.current;
    const namespace =
      current?.metadata?.namespace ??
      (action.kind === 'applyEndpoints' ? action.want.metadata?.namespace : '') ??
      '';
    const name =
      current?.metadata?.name ?? (action.kind === 'applyEndpoints' ? action.want.metadata?.name : '') ?? '';
    const deadline = () => withDeadline(this.timeoutMs);
    const what = `the EndpointSlice ${namespace}/${name} of share manager ${share}`;
    try {
      if (action.kind === 'deleteEndpoints') {
        await this.discovery.deleteNamespacedEndpointSlice(
          { namespace, name, body: { preconditions: { uid: current?.metadata?.uid ?? '' } } },
          deadline(),
        );
        if (current?.metadata?.labels?.[LABEL_MANAGED_BY] === ENDPOINTS_MANAGER)
          this.log.info(
            { sm: share, slice: name },
            'endpoints removed: no pod of the share may be published',
          );
        else
          this.log.info(
            { sm: share, slice: name },
            "Kubernetes' EndpointSlice of the share removed: its Service has no selector, the manager's slice routes",
          );
        return;
      }
      const { want } = action;
      if (current && current.addressType !== want.addressType) {
        // The address family is immutable: delete, then create below.
        await this.discovery.deleteNamespacedEndpointSlice(
          { namespace, name, body: { preconditions: { uid: current.metadata?.uid ?? '' } } },
          deadline(),
        );
      } else if (current) {
        const body: V1EndpointSlice = {
          ...want,
          metadata: { ...want.metadata, resourceVersion: current.metadata?.resourceVersion },
        };
        await this.discovery.replaceNamespacedEndpointSlice({ namespace, name, body }, deadline());
        this.log.info({ sm: share, slice: name, addresses: addressesOf(want) }, 'endpoints published');
        return;
      }
      await this.discovery.createNamespacedEndpointSlice({ namespace, body: want }, deadline());
      this.log.info({ sm: share, slice: name, addresses: addressesOf(want) }, 'endpoints published');
    } catch (err) {
      const code = statusOf(err);
      if (code === 404 || (code === 409 && current)) return; // re-observe: the watch brings the newer object
      if (code === 409 && (await this.isManagers(namespace, name))) return; // another manager created it first
      throw new KubeApiError(
        code === 409
          ? `creating ${what}: an EndpointSlice of that name exists and is not the manager's (delete it: the manager publishes the share's endpoints itself)`
          : `${action.kind === 'deleteEndpoints' ? 'deleting' : 'writing'} ${what}`,
        code,
        { cause: err },
      );
    }
  }

  /**
   * Deletes the v1 Endpoints `namespace/name` only if Kubernetes' Endpoints controller
   * wrote it (its managed-by label; the UID read is the precondition): a user's own
   * Endpoints of that name is left alone.
   */
  private async deleteLegacyEndpoints(share: string, namespace: string, name: string): Promise<void> {
    const what = `the v1 Endpoints ${namespace}/${name} of share manager ${share}`;
    try {
      const endpoints = await this.core.readNamespacedEndpoints(
        { namespace, name },
        withDeadline(this.timeoutMs),
      );
      if (endpoints.metadata?.labels?.[LABEL_ENDPOINTS_MANAGED_BY] !== KUBERNETES_ENDPOINTS_LEGACY_CONTROLLER)
        return;
      await this.core.deleteNamespacedEndpoints(
        { namespace, name, body: { preconditions: { uid: endpoints.metadata?.uid ?? '' } } },
        withDeadline(this.timeoutMs),
      );
      this.log.info(
        { sm: share, endpoints: name },
        "Kubernetes' v1 Endpoints of the share removed (its mirrored slice goes with it): its Service has no selector, the manager's slice routes",
      );
    } catch (err) {
      const code = statusOf(err);
      if (code === 404 || code === 409) return;
      throw new KubeApiError(`deleting ${what}`, code, { cause: err });
    }
  }

  /** Whether the slice `namespace/name` carries the manager's label (an unreadable one counts as the manager's: retried). */
  private async isManagers(namespace: string, name: string): Promise<boolean> {
    try {
      const slice = await this.discovery.readNamespacedEndpointSlice(
        { namespace, name },
        withDeadline(this.timeoutMs),
      );
      return slice.metadata?.labels?.[LABEL_MANAGED_BY] === ENDPOINTS_MANAGER;
    } catch {
      return true;
    }
  }
}

function addressesOf(slice: V1EndpointSlice): string[] {
  return (slice.endpoints ?? []).flatMap((e) => e.addresses);
}
