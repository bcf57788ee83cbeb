/**
 * Writes ShareManager status through the status subresource, by JSON merge patch, so
 * that the reconciler (state, node, pod, holder) and the failover (lastFailover) never
 * overwrite each other's fields.
 *
 * `claim` is the one compare-and-swap: the patch carries metadata.resourceVersion, which
 * the API server checks, so among managers racing to create a pod exactly one wins; the
 * others get `conflict`.
 */
import { KubeApiError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import { type ShareManagerStatus, SM_GROUP, SM_PLURAL, SM_VERSION } from './share-manager-spec.ts';

/** A merge patch of the status: a null field is removed. */
export type StatusPatch = { [K in keyof ShareManagerStatus]?: ShareManagerStatus[K] | null };

export class StatusWriter {
  private readonly api: k8s.CustomObjectsApi;
  constructor(
    kc: k8s.KubeConfig,
    private readonly deadlineMs: number,
  ) {
    this.api = kc.makeApiClient(k8s.CustomObjectsApi);
  }

  /** Merges `status` into the ShareManager's status. Returns false when it no longer exists. */
  async patch(namespace: string, name: string, status: StatusPatch): Promise<boolean> {
    return (await this.send(namespace, name, { status })) === 'written';
  }

  /** The same, only if the object is still at `resourceVersion`. */
  async claim(
    namespace: string,
    name: string,
    resourceVersion: string,
    status: Partial<ShareManagerStatus>,
  ): Promise<'written' | 'conflict' | 'gone'> {
    return this.send(namespace, name, { metadata: { resourceVersion }, status });
  }

  private async send(
    namespace: string,
    name: string,
    body: object,
  ): Promise<'written' | 'conflict' | 'gone'> {
    try {
      await this.api.patchNamespacedCustomObjectStatus(
        { group: SM_GROUP, version: SM_VERSION, namespace, plural: SM_PLURAL, name, body },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(this.deadlineMs)),
      );
      return 'written';
    } catch (err) {
      const status = statusOf(err);
      if (status === 409) return 'conflict';
      if (status === 404) return 'gone';
      throw new KubeApiError(`writing the status of share manager ${namespace}/${name}`, status, {
        cause: err,
      });
    }
  }
}
