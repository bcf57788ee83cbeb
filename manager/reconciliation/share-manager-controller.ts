/**
 * Glue for reconciling ShareManagers: builds each snapshot from the informer caches
 * (time read once per pass), asks decide-reconcile.ts what to do and hands the
 * actions to the executor. Keys are namespace/name; any change of the ShareManager,
 * its Lease, its pods, its Service or its consumer PV and claim (labelled for it)
 * enqueues the key.
 * The consumer caches are waited for only by a ShareManager that has spec.consumer or
 * the consumer finalizer: the others never need them.
 */
import type {
  V1EndpointSlice,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1Pod,
  V1Service,
} from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import { failureGist } from '../../lib/errors.ts';
import type { Informer } from '../../lib/informer.ts';
import { type k8s, statusOf } from '../../lib/kube-client.ts';
import { fromWire, LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import type { Logger } from '../../lib/logger.ts';
import { WorkQueue } from '../../lib/work-queue.ts';
import type { ManagerConfig } from '../config.ts';
import { resolveShare } from '../share-model/pod-spec.ts';
import type { ResolvedSpec, ShareManager } from '../share-model/share-manager-spec.ts';
import {
  consumerVolumeName,
  FINALIZER_CONSUMER,
  LABEL_CONSUMER_NAMESPACE,
  LABEL_CONSUMER_OF,
} from './consumer-objects.ts';
import type { ConsumerObjects } from './decide-consumer.ts';
import { decideShareManager } from './decide-reconcile.ts';
import type { ConsumerExecutor } from './execute-consumer.ts';
import { newRequestId, type ReconcileExecutor } from './execute-reconcile.ts';
import { isOwnService, serviceDrift } from './service-spec.ts';
import {
  endpointSliceName,
  isKubernetesSliceOf,
  isMirroredLegacySliceOf,
  isOwnEndpointSlice,
} from './share-endpoints.ts';

/** Failed passes in a row after which the ShareManager's status and an event say so. */
const PERSISTENT_FAILURES = 3;

export interface ControllerSources {
  shareManagers: Informer<ShareManager>;
  leases: Informer<k8s.V1Lease>;
  pods: Informer<V1Pod>;
  /** The shares' Services, selected by LABEL_SHARE_MANAGER. */
  services: Informer<V1Service>;
  /** The manager's EndpointSlices of the shares (labelled with the share). */
  endpointSlices: Informer<V1EndpointSlice>;
  /** Consumer PVs and claims, selected by LABEL_CONSUMER_NAMESPACE / LABEL_CONSUMER_OF. */
  volumes: Informer<V1PersistentVolume>;
  claims: Informer<V1PersistentVolumeClaim>;
  failoverRunning(key: string): boolean;
}

export class ShareManagerController {
  readonly queue: WorkQueue;
  private readonly requestSeen = new Map<string, { id: string; at: number }>();
  /** key -> the UID last reconciled, to forget the consumer executor's memory of it. */
  private readonly uids = new Map<string, string>();
  /** ShareManager UID -> the API server's dry-run verdict on its derived objects, per spec generation (removed with the ShareManager). */
  private readonly dryRuns = new Map<string, { generation: number; refusal: string | undefined }>();

  constructor(
    private readonly config: ManagerConfig,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly sources: ControllerSources,
    private readonly executor: ReconcileExecutor,
    private readonly consumer: ConsumerExecutor,
  ) {
    this.queue = new WorkQueue(
      (key) => this.reconcile(key),
      (key, err, failures) => this.failed(key, err, failures),
    );
  }

  enqueueFor(
    object: { metadata?: { namespace?: string; name?: string; labels?: Record<string, string> } },
    byLabel: boolean,
  ): void {
    const name = byLabel ? object.metadata?.labels?.[LABEL_SHARE_MANAGER] : object.metadata?.name;
    if (name) this.queue.add(`${object.metadata?.namespace ?? ''}/${name}`);
  }

  /** A consumer PV or claim changed: its ShareManager, named by its labels. */
  enqueueForConsumer(object: { metadata?: { labels?: Record<string, string> } }): void {
    const labels = object.metadata?.labels ?? {};
    const name = labels[LABEL_CONSUMER_OF];
    const namespace = labels[LABEL_CONSUMER_NAMESPACE];
    if (name && namespace) this.queue.add(`${namespace}/${name}`);
  }

  /**
   * A pass failed (`failures` in a row): logged each time; at once for a refusal (4xx
   * but 404, 409 and 429), else from PERSISTENT_FAILURES on,
   * condition Reconciled=False (ReconcileFailing) carries the error and a Warning event
   * says it, once per distinct error, so that `kubectl describe` shows why a share makes
   * no progress (a 403 from Pod Security or a quota, a missing service account).
   */
  private failed(key: string, err: unknown, failures: number): void {
    this.log.warn({ err, sm: key, failures }, 'reconcile failed; will retry with backoff');
    // An answer that retrying will not change (a 403 from a quota or Pod Security, a 422
    // for a derived object) is said at once; anything else once it persists.
    const status = statusOf(err);
    const refused =
      status !== undefined && status >= 400 && status < 500 && ![404, 409, 429].includes(status);
    if (!refused && failures < PERSISTENT_FAILURES) return;
    const [namespace, name] = key.split('/') as [string, string];
    const sm = this.sources.shareManagers.get(namespace, name);
    if (!sm) return;
    const gist = failureGist(err);
    const message = `${gist} (${failures} times in a row; retried with backoff): ${err instanceof Error ? err.message : String(err)}`;
    void this.executor
      .reportFailing(sm, gist, message)
      .catch((writeErr: unknown) =>
        this.log.debug({ err: writeErr, sm: key }, 'could not write the ReconcileFailing condition'),
      );
  }

  private async reconcile(key: string): Promise<number | undefined> {
    const [namespace, name] = key.split('/') as [string, string];
    const sm = this.sources.shareManagers.get(namespace, name);
    if (!sm) {
      this.requestSeen.delete(key);
      const uid = this.uids.get(key);
      if (uid) {
        this.consumer.forget(uid);
        this.executor.forget(uid);
        this.dryRuns.delete(uid);
      }
      this.uids.delete(key);
      return undefined;
    }
    this.uids.set(key, sm.metadata.uid ?? '');
    const needsConsumer =
      sm.spec.consumer !== undefined || (sm.metadata.finalizers ?? []).includes(FINALIZER_CONSUMER);
    if (needsConsumer && (!this.sources.volumes.synced || !this.sources.claims.synced)) return 500;
    // Before every cache has synced the snapshot could miss a pod: wait.
    if (
      !this.sources.leases.synced ||
      !this.sources.pods.synced ||
      !this.sources.services.synced ||
      !this.sources.endpointSlices.synced
    )
      return 500;
    const now = this.clock.now();
    const request = sm.status?.podRequest;
    let seen = this.requestSeen.get(key);
    if (request && seen?.id !== request.id) {
      seen = { id: request.id, at: now };
      this.requestSeen.set(key, seen);
    }
    const wireLease = this.sources.leases.get(namespace, name);
    const cachedService = this.sources.services.get(namespace, name);
    const ownService = cachedService && isOwnService(cachedService, sm) ? cachedService : undefined;
    const cachedSlice = this.sources.endpointSlices.get(namespace, endpointSliceName(name));
    const pods = this.sources.pods
      .list()
      .filter(
        (p) => p.metadata?.namespace === namespace && p.metadata?.labels?.[LABEL_SHARE_MANAGER] === name,
      );
    const actions = decideShareManager({
      sm,
      resolved: await this.judgeSpec(sm),
      lease: wireLease ? fromWire(wireLease) : undefined,
      service: ownService,
      serviceDrift: ownService ? serviceDrift(ownService, sm) : [],
      endpointSlice: cachedSlice && isOwnEndpointSlice(cachedSlice, sm) ? cachedSlice : undefined,
      kubernetesSlices: this.sources.endpointSlices.list().filter((sl) => isKubernetesSliceOf(sl, sm)),
      legacyEndpointsMirrored: this.sources.endpointSlices
        .list()
        .some((sl) => isMirroredLegacySliceOf(sl, sm)),
      pods,
      now,
      podRequestSeenAt: request ? seen?.at : undefined,
      podCreateTimeoutMs: this.config.podCreateTimeoutMs,
      failoverRunning: this.sources.failoverRunning(key),
      newRequestId: newRequestId(),
      consumer: needsConsumer ? this.consumerObjects(sm) : undefined,
    });
    if (actions.length > 0) this.log.debug({ sm: key, actions }, 'reconcile');
    return this.executor.run(sm, actions);
  }

  /**
   * The spec as judged: resolveShare (the manager's, the agent's and the server's rules),
   * then what the API server would refuse in the derived pod and Service (a dry run, once
   * per spec generation: ReconcileExecutor.dryRunShare). A refusal is status Error before
   * any Lease or Service exists, not a reconcile retried forever.
   */
  private async judgeSpec(sm: ShareManager): Promise<ResolvedSpec> {
    const resolved = resolveShare(sm, this.config);
    const uid = sm.metadata.uid ?? '';
    // NB: a deleted ShareManager gets no new pod (decide-reconcile.ts), and its deletion
    // bumps metadata.generation: a dry run then would be one wasted pod and Service create
    // per deletion (measured: bench/provisioning).
    if (!resolved.ok || uid === '' || sm.metadata.deletionTimestamp) return resolved;
    const generation = sm.metadata.generation ?? 0;
    let judged = this.dryRuns.get(uid);
    if (judged?.generation !== generation) {
      judged = { generation, refusal: await this.executor.dryRunShare(sm) };
      this.dryRuns.set(uid, judged);
    }
    return judged.refusal === undefined ? resolved : { ok: false, message: judged.refusal };
  }

  private consumerObjects(sm: ShareManager): ConsumerObjects {
    const namespace = sm.metadata.namespace ?? '';
    const uid = sm.metadata.uid ?? '';
    return {
      volume: this.sources.volumes.get('', consumerVolumeName(sm)),
      claims: this.sources.claims
        .list()
        .filter(
          (c) =>
            c.metadata?.namespace === namespace &&
            c.metadata?.labels?.[LABEL_CONSUMER_OF] === sm.metadata.name,
        ),
      taken: this.consumer.taken.get(uid),
      size: this.consumer.sizes.get(uid),
    };
  }
}
