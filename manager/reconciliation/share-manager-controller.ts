/**
 * Glue for reconciling ShareManagers: builds each snapshot from the informer caches
 * (time read once per pass), asks decide-reconcile.ts what to do and hands the
 * actions to the executor. Keys are namespace/name; any change of the ShareManager,
 * its Lease or its pods enqueues the key.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import type { Informer } from '../../lib/informer.ts';
import type { k8s } from '../../lib/kube-client.ts';
import { fromWire, LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerConfig } from '../config.ts';
import { decideShareManager } from './decide-reconcile.ts';
import { newRequestId, type ReconcileExecutor } from './execute-reconcile.ts';
import { resolveSpec, type ShareManager } from './share-manager-spec.ts';
import { WorkQueue } from './work-queue.ts';

export interface ControllerSources {
  shareManagers: Informer<ShareManager>;
  leases: Informer<k8s.V1Lease>;
  pods: Informer<V1Pod>;
  failoverRunning(key: string): boolean;
}

export class ShareManagerController {
  readonly queue: WorkQueue;
  private readonly requestSeen = new Map<string, { id: string; at: number }>();

  constructor(
    private readonly config: ManagerConfig,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly sources: ControllerSources,
    private readonly executor: ReconcileExecutor,
  ) {
    this.queue = new WorkQueue(
      (key) => this.reconcile(key),
      (key, err) => this.log.warn({ err, sm: key }, 'reconcile failed; will retry'),
    );
  }

  enqueueFor(
    object: { metadata?: { namespace?: string; name?: string; labels?: Record<string, string> } },
    byLabel: boolean,
  ): void {
    const name = byLabel ? object.metadata?.labels?.[LABEL_SHARE_MANAGER] : object.metadata?.name;
    if (name) this.queue.add(`${object.metadata?.namespace ?? ''}/${name}`);
  }

  private async reconcile(key: string): Promise<number | undefined> {
    const [namespace, name] = key.split('/') as [string, string];
    const sm = this.sources.shareManagers.get(namespace, name);
    if (!sm) {
      this.requestSeen.delete(key);
      return undefined;
    }
    // Before every cache has synced the snapshot could miss a pod: wait.
    if (!this.sources.leases.synced || !this.sources.pods.synced) return 500;
    const now = this.clock.now();
    const request = sm.status?.podRequest;
    let seen = this.requestSeen.get(key);
    if (request && seen?.id !== request.id) {
      seen = { id: request.id, at: now };
      this.requestSeen.set(key, seen);
    }
    const wireLease = this.sources.leases.get(namespace, name);
    const pods = this.sources.pods
      .list()
      .filter(
        (p) => p.metadata?.namespace === namespace && p.metadata?.labels?.[LABEL_SHARE_MANAGER] === name,
      );
    const actions = decideShareManager({
      sm,
      resolved: resolveSpec(sm.spec, this.config.defaults),
      lease: wireLease ? fromWire(wireLease) : undefined,
      serviceKnown: this.executor.servicesKnown.has(sm.metadata.uid ?? ''),
      clusterIP: this.executor.servicesKnown.get(sm.metadata.uid ?? ''),
      pods,
      now,
      podRequestSeenAt: request ? seen?.at : undefined,
      podCreateTimeoutMs: this.config.podCreateTimeoutMs,
      failoverRunning: this.sources.failoverRunning(key),
      newRequestId: newRequestId(),
    });
    if (actions.length > 0) this.log.debug({ sm: key, actions }, 'reconcile');
    return this.executor.run(sm, actions);
  }
}
