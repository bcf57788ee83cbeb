/**
 * The I/O of reconcile actions (decide-reconcile.ts decides them). Thin: each
 * action is one or two API calls; "already exists" and "already gone" are successes.
 * Returns a requeue delay when the action asks for one (a lost claim, a pending request,
 * a Service whose ClusterIP was just learned: the next pass publishes status.export).
 *
 * releaseLease is a CAS with exactly the version the decision saw: a 409 means the lease
 * moved (a new holder, a delinquent mark); the watch delivers the change and the next
 * pass decides again. It is never retried blindly.
 */
import { randomBytes } from 'node:crypto';
import { apiMessageOf, KubeApiError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import { LABEL_SHARE_MANAGER, newLeaseRecord } from '../../lib/lease-record.ts';
import type { LeaseStore } from '../../lib/lease-store.ts';
import type { Logger } from '../../lib/logger.ts';
import type { ManagerConfig } from '../config.ts';
import type { EventRecorder } from '../events.ts';
import { nfsPorts } from '../share-model/nfs-server-preset.ts';
import { ANNOTATION_POD_REQUEST, sharePodFor } from '../share-model/pod-spec.ts';
import { type ShareManager, SM_GROUP, SM_KIND, SM_VERSION } from '../share-model/share-manager-spec.ts';
import type { StatusWriter } from '../share-model/status-writer.ts';
import type { ReconcileAction } from './decide-reconcile.ts';
import type { ConsumerExecutor } from './execute-consumer.ts';
import { EndpointsWriter } from './execute-endpoints.ts';
import { hasLegacySelector, isOwnService, ownerRef, serviceSpec } from './service-spec.ts';
import { endpointSliceName } from './share-endpoints.ts';

type ShareCondition = NonNullable<NonNullable<ShareManager['status']>['conditions']>[number];

/** The condition a Service of the share's name that is not its own sets (ServiceTaken). */
export const SERVICE_CONDITION = 'Service';
/** The condition a reconcile that keeps failing sets (ReconcileFailing); removed by the next pass that goes through. */
export const RECONCILED_CONDITION = 'Reconciled';
/** How long a re-created Service keeps asking for the address clients mounted before it takes a new one. */
const ADDRESS_WAIT_MS = 10_000;
const ADDRESS_RETRY_MS = 500;
/** How often a share whose Service name is taken looks again. */
const SERVICE_TAKEN_RETRY_MS = 10_000;

export function newRequestId(): string {
  return randomBytes(6).toString('hex');
}

export class ReconcileExecutor {
  private readonly core: k8s.CoreV1Api;
  private readonly endpoints: EndpointsWriter;
  /**
   * ShareManager UID -> when (performance.now) its Service name was last found taken:
   * looked at again only after SERVICE_TAKEN_RETRY_MS. An entry lives only while the
   * name is taken (removed once the share's own Service exists, or by forget).
   */
  private readonly servicesTaken = new Map<string, number>();
  /** ShareManager UID -> since when (performance.now) its Service asks for its old address back; only while it does. */
  private readonly addressWanted = new Map<string, number>();
  /**
   * ShareManager UID -> the ReconcileFailing condition last reported, until a pass goes
   * through. Every condition write of a pass carries it: a merge patch replaces the whole
   * list, and a pass that started from a cache older than the report would otherwise
   * write the list without it (seen: the condition gone 30 s while pods stayed refused).
   */
  private readonly failing = new Map<string, ShareCondition>();

  constructor(
    kc: k8s.KubeConfig,
    private readonly leases: LeaseStore,
    private readonly status: StatusWriter,
    private readonly config: ManagerConfig,
    private readonly events: EventRecorder,
    private readonly log: Logger,
    private readonly consumer: ConsumerExecutor,
  ) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
    this.endpoints = new EndpointsWriter(kc, config.requestTimeoutMs, log);
  }

  /** Drops what it remembers of a deleted ShareManager (a taken Service name). */
  forget(uid: string): void {
    this.servicesTaken.delete(uid);
    this.addressWanted.delete(uid);
    this.failing.delete(uid);
  }

  /**
   * Condition Reconciled=False (ReconcileFailing) with `message` (which starts with
   * `gist`, lib/errors.ts failureGist), and one Warning event, unless the condition
   * already says the same gist (so a generated name in the error changes nothing).
   */
  async reportFailing(sm: ShareManager, gist: string, message: string): Promise<void> {
    const conditions = sm.status?.conditions ?? [];
    const current = conditions.find((c) => c.type === RECONCILED_CONDITION);
    const uid = sm.metadata.uid ?? '';
    const remembered = this.failing.get(uid);
    if (current?.status === 'False' && current.message?.startsWith(gist)) {
      if (!remembered) this.failing.set(uid, current);
      return;
    }
    if (remembered?.message?.startsWith(gist)) return;
    const condition: ShareCondition = {
      type: RECONCILED_CONDITION,
      status: 'False',
      reason: 'ReconcileFailing',
      message,
      lastTransitionTime: new Date().toISOString(),
    };
    this.failing.set(uid, condition);
    await this.status.patch(sm.metadata.namespace ?? '', sm.metadata.name ?? '', {
      conditions: [...conditions.filter((c) => c.type !== RECONCILED_CONDITION), condition],
    });
    await this.events.record(sm, 'Warning', 'ReconcileFailing', message);
  }

  /** Runs `actions` in order; returns the smallest requested requeue delay, if any. */
  async run(sm: ShareManager, actions: readonly ReconcileAction[]): Promise<number | undefined> {
    let requeue: number | undefined;
    const want = (ms: number) => {
      requeue = requeue === undefined ? ms : Math.min(requeue, ms);
    };
    // The conditions as this pass last wrote them: a merge patch replaces the whole list,
    // so a second condition written in the same pass must not bring the first one back.
    const uid = sm.metadata.uid ?? '';
    const reported = this.failing.get(uid);
    const cached = sm.status?.conditions ?? [];
    const conditions = {
      list: reported && !cached.some((c) => c.type === RECONCILED_CONDITION) ? [...cached, reported] : cached,
    };
    for (const action of actions) {
      const ms = await this.one(sm, action, conditions);
      if (ms !== undefined) want(ms);
    }
    // The pass went through and waits for nothing (a pass that only waits, e.g. on its own
    // pending pod request, proves nothing): a ReconcileFailing condition is over.
    if (requeue === undefined) this.failing.delete(uid);
    if (requeue === undefined && cached.some((c) => c.type === RECONCILED_CONDITION)) {
      conditions.list = conditions.list.filter((c) => c.type !== RECONCILED_CONDITION);
      await this.status.patch(sm.metadata.namespace ?? '', sm.metadata.name ?? '', {
        conditions: conditions.list,
      });
    }
    return requeue;
  }

  private async one(
    sm: ShareManager,
    action: ReconcileAction,
    conditions: { list: NonNullable<NonNullable<ShareManager['status']>['conditions']> },
  ): Promise<number | undefined> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const deadline = withDeadline(this.config.requestTimeoutMs);
    const fail = (operation: string, err: unknown) =>
      new KubeApiError(operation, statusOf(err), { cause: err });
    switch (action.kind) {
      case 'setStatus':
        await this.status.patch(namespace, name, action.status);
        return undefined;
      case 'createLease': {
        const record = newLeaseRecord(namespace, name, action.durationSeconds, {
          [LABEL_SHARE_MANAGER]: name,
        });
        record.wire.metadata = { ...record.wire.metadata, ownerReferences: [ownerRef(sm)] };
        const created = await this.leases.create(record, this.config.requestTimeoutMs);
        // Conflict: it exists. Usually another manager created it first; but a Lease whose
        // label was removed also looks missing (the watch selects on the label), and then
        // nothing would judge it: put the label back.
        if (created.kind === 'conflict') await this.restoreLeaseLabel(sm);
        return undefined;
      }
      case 'ensureService':
        return this.ensureService(sm, conditions);
      case 'repairService':
        await this.repairService(sm, action.service, action.fields);
        return undefined;
      case 'deletePod':
        try {
          await this.core.deleteNamespacedPod(
            { namespace, name: action.name, body: { preconditions: { uid: action.uid } } },
            deadline,
          );
          this.log.info(
            { sm: `${namespace}/${name}`, pod: action.name, reason: action.reason },
            'ended pod deleted',
          );
        } catch (err) {
          const status = statusOf(err);
          if (status !== 404 && status !== 409) throw fail(`deleting pod ${namespace}/${action.name}`, err);
        }
        return undefined;
      case 'releaseLease':
        await this.releaseLease(sm, action);
        return undefined;
      case 'claimPodCreation':
        return this.claimAndCreate(sm, action.requestId);
      case 'setCondition': {
        const others = conditions.list.filter((c) => c.type !== action.condition.type);
        const condition = { ...action.condition, lastTransitionTime: new Date().toISOString() };
        // NB: a merge patch replaces the whole list, so the other conditions go with it.
        conditions.list = [...others, condition];
        await this.status.patch(namespace, name, { conditions: conditions.list });
        if (action.event)
          await this.events.record(sm, action.event.type, action.event.reason, condition.message);
        return undefined;
      }
      case 'requeueAfter':
        return action.ms;
      case 'applyEndpoints':
      case 'deleteEndpoints':
      case 'deleteLegacyEndpoints':
        await this.endpoints.run(`${namespace}/${name}`, action);
        return undefined;
      default:
        return this.consumer.run(sm, action, conditions);
    }
  }

  /**
   * Creates the Service (or finds it: 409); the Service watch brings it into the cache,
   * and the next pass publishes status.export from there.
   * A Service re-created (deleted by hand, or by a namespace clean-up tool) asks for the
   * ClusterIP that status.export published, which clients mounted: their mounts keep
   * working. Where that address cannot be had (taken meanwhile: 422), it takes a new one;
   * status.export and the consumer PV follow it, and a Warning event
   * (ServiceAddressChanged) says that clients mounted at the old address must remount.
   * A Service of that name this ShareManager does not control (isOwnService) is never
   * used: neither status.export nor the consumer PV point at it; condition
   * Service=False (ServiceTaken) and a Warning event say so, and the manager looks again
   * every SERVICE_TAKEN_RETRY_MS (the user may delete it).
   */
  private async ensureService(
    sm: ShareManager,
    conditions: { list: NonNullable<NonNullable<ShareManager['status']>['conditions']> },
  ): Promise<number | undefined> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const uid = sm.metadata.uid ?? '';
    const takenAt = this.servicesTaken.get(uid);
    if (takenAt !== undefined && performance.now() - takenAt < SERVICE_TAKEN_RETRY_MS)
      return Math.ceil(SERVICE_TAKEN_RETRY_MS - (performance.now() - takenAt));
    const spec = serviceSpec(sm);
    const published = sm.status?.export?.clusterIP;
    const create = (clusterIP: string | undefined) =>
      this.core.createNamespacedService(
        {
          namespace,
          body: {
            metadata: {
              name,
              namespace,
              labels: { [LABEL_SHARE_MANAGER]: name },
              ownerReferences: [ownerRef(sm)],
            },
            spec: clusterIP ? { ...spec, clusterIP } : spec,
          },
        },
        withDeadline(this.config.requestTimeoutMs),
      );
    const keep = published && spec.clusterIP !== 'None' ? published : undefined;
    let service: k8s.V1Service;
    try {
      try {
        service = await create(keep);
      } catch (err) {
        if (!keep || statusOf(err) !== 422) throw err;
        // The old Service's address may not be free yet (its release lags the deletion
        // briefly): keep asking for it for ADDRESS_WAIT_MS before taking a new one.
        const since = this.addressWanted.get(uid) ?? performance.now();
        this.addressWanted.set(uid, since);
        if (performance.now() - since < ADDRESS_WAIT_MS) {
          this.log.info(
            { sm: `${namespace}/${name}`, clusterIP: keep, err: apiMessageOf(err) },
            'the address clients mounted is not free yet; asking again',
          );
          return ADDRESS_RETRY_MS;
        }
        this.addressWanted.delete(uid);
        service = await create(undefined);
        const message = `Service ${namespace}/${name} was re-created, but its address ${keep} (in status.export, mounted by clients) could not be had again (${apiMessageOf(err) || String(err)}): it is ${service.spec?.clusterIP} now; clients mounted at ${keep} must remount`;
        await this.events.record(sm, 'Warning', 'ServiceAddressChanged', message);
        this.log.warn({ sm: `${namespace}/${name}`, was: keep, now: service.spec?.clusterIP }, message);
      }
      if (keep && service.spec?.clusterIP === keep)
        this.log.info(
          { sm: `${namespace}/${name}`, clusterIP: keep },
          'Service re-created at the address clients mounted',
        );
    } catch (err) {
      if (statusOf(err) !== 409)
        throw new KubeApiError(`creating the service of share manager ${namespace}/${name}`, statusOf(err), {
          cause: err,
        });
      try {
        service = await this.core.readNamespacedService(
          { namespace, name },
          withDeadline(this.config.requestTimeoutMs),
        );
      } catch (readErr) {
        throw new KubeApiError(
          `reading the service of share manager ${namespace}/${name}`,
          statusOf(readErr),
          {
            cause: readErr,
          },
        );
      }
    }
    this.addressWanted.delete(uid);
    const current = conditions.list.find((c) => c.type === SERVICE_CONDITION);
    if (!isOwnService(service, sm)) {
      const message = `Service ${namespace}/${name} exists and was not created by this ShareManager: not used (no status.export, no consumer volume); delete or rename it and the manager creates its own`;
      if (current?.reason !== 'ServiceTaken' || current.message !== message) {
        const others = conditions.list.filter((c) => c.type !== SERVICE_CONDITION);
        conditions.list = [
          ...others,
          {
            type: SERVICE_CONDITION,
            status: 'False',
            reason: 'ServiceTaken',
            message,
            lastTransitionTime: new Date().toISOString(),
          },
        ];
        await this.status.patch(namespace, name, { conditions: conditions.list });
        await this.events.record(sm, 'Warning', 'ServiceTaken', message);
        this.log.warn({ sm: `${namespace}/${name}`, service: `${namespace}/${name}` }, message);
      }
      this.servicesTaken.set(uid, performance.now());
      return SERVICE_TAKEN_RETRY_MS;
    }
    this.servicesTaken.delete(uid);
    if (current) {
      conditions.list = conditions.list.filter((c) => c.type !== SERVICE_CONDITION);
      await this.status.patch(namespace, name, { conditions: conditions.list });
    }
    return undefined;
  }

  /**
   * Puts back what someone changed in the share's own Service (`fields`, serviceDrift):
   * a replace carrying the cached resourceVersion (CAS; 409: the watch brings the newer
   * one and the next pass decides again). The ClusterIP and everything else stay.
   */
  private async repairService(sm: ShareManager, service: k8s.V1Service, fields: string[]): Promise<void> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const want = serviceSpec(sm);
    // NB: a Service with a ClusterIP keeps its ports when the share now wants a headless
    // one (a server without ports), and the reverse: the kind cannot change in place and
    // an address without ports is refused (422).
    const sameKind = (service.spec?.clusterIP === 'None') === (want.clusterIP === 'None');
    try {
      await this.core.replaceNamespacedService(
        {
          namespace,
          name,
          body: {
            ...service,
            spec: {
              ...service.spec,
              selector: want.selector,
              ports: sameKind ? want.ports : service.spec?.ports,
            },
          },
        },
        withDeadline(this.config.requestTimeoutMs),
      );
    } catch (err) {
      if (statusOf(err) === 409 || statusOf(err) === 404) return;
      throw new KubeApiError(`repairing the service of share manager ${namespace}/${name}`, statusOf(err), {
        cause: err,
      });
    }
    if (fields.length === 1 && fields[0] === 'spec.selector' && hasLegacySelector(service, sm)) {
      // An upgrade from a release whose Service had a selector, not a hand edit.
      const message = `Service ${namespace}/${name}: selector removed; the manager publishes the share's endpoints itself (EndpointSlice ${endpointSliceName(name)})`;
      await this.events.record(sm, 'Normal', 'EndpointsManaged', message);
      this.log.info({ sm: `${namespace}/${name}` }, message);
      return;
    }
    const message = `Service ${namespace}/${name} was changed (${fields.join(', ')}): put back as the ShareManager needs it`;
    await this.events.record(sm, 'Warning', 'ServiceRepaired', message);
    this.log.warn({ sm: `${namespace}/${name}`, fields }, message);
  }

  /** Re-labels the ShareManager's Lease when its label is missing, by CAS (409: re-observe). */
  private async restoreLeaseLabel(sm: ShareManager): Promise<void> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const lease = await this.leases.get(namespace, name, this.config.requestTimeoutMs);
    const labels = lease?.wire.metadata?.labels ?? {};
    if (!lease || labels[LABEL_SHARE_MANAGER] === name) return;
    const wire = {
      ...lease.wire,
      metadata: { ...lease.wire.metadata, labels: { ...labels, [LABEL_SHARE_MANAGER]: name } },
    };
    const outcome = await this.leases.update({ ...lease, wire }, this.config.requestTimeoutMs);
    const key = `${namespace}/${name}`;
    if (outcome.kind === 'conflict') {
      this.log.info({ lease: key }, 'restoring the label of a lease met a conflict: re-observing');
      return;
    }
    this.log.warn(
      {
        lease: key,
        label: LABEL_SHARE_MANAGER,
        was: labels[LABEL_SHARE_MANAGER] ?? '(missing)',
      },
      `lease ${key}: its ${LABEL_SHARE_MANAGER} label was missing; restored, so the lease is watched and judged again`,
    );
  }

  private async releaseLease(
    sm: ShareManager,
    action: Extract<ReconcileAction, { kind: 'releaseLease' }>,
  ): Promise<void> {
    const { lease, pod, phase } = action;
    const key = `${lease.namespace}/${lease.name}`;
    const outcome = await this.leases.update(
      { ...lease, holder: '', holderNode: '' },
      this.config.requestTimeoutMs,
    );
    if (outcome.kind === 'conflict') {
      this.log.info({ lease: key, pod }, 'freeing the lease of an ended pod met a conflict: re-observing');
      return;
    }
    const message = `holder pod ${pod} ended (phase ${phase}); lease freed for the replacement`;
    this.log.info({ lease: key, pod, phase, transitions: lease.transitions }, message);
    await this.events.record(sm, 'Normal', 'LeaseReleased', message);
  }

  /**
   * What the API server would refuse in the objects derived from `sm`, by a server-side
   * dry run (nothing is stored) of its pod and its Service: the API server's own
   * validation, so the manager never restates it (a mount path colliding with the
   * server's own mounts, duplicate or numeric port names, an env name with "=", an image
   * with spaces, a negative runAsUser, an unknown toleration operator, a bad nodeSelector
   * key). Returns the refusal in the user's terms, or undefined when both would be
   * accepted. Only a 400 or 422 (the object is invalid) counts: a 403 from a quota or Pod
   * Security is about the namespace, not the spec (ReconcileFailing says it at creation);
   * a Service that exists (409) was validated when it was made. Throws when no answer
   * came (judged again on the next pass).
   */
  async dryRunShare(sm: ShareManager): Promise<string | undefined> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const built = sharePodFor(sm, this.config, undefined, { [ANNOTATION_POD_REQUEST]: 'dry-run' });
    if (!built.ok) return built.message;
    const refusals: string[] = [];
    const attempt = async (what: string, call: () => Promise<unknown>) => {
      try {
        await call();
      } catch (err) {
        const status = statusOf(err);
        if (status === 400 || status === 422)
          refusals.push(`the API server refuses the share's ${what}: ${apiMessageOf(err) || String(err)}`);
        else if (status === undefined)
          throw new KubeApiError(`dry-running the ${what} of share manager ${namespace}/${name}`, status, {
            cause: err,
          });
      }
    };
    await attempt('pod', () =>
      this.core.createNamespacedPod(
        { namespace, body: built.pod, dryRun: 'All' },
        withDeadline(this.config.requestTimeoutMs),
      ),
    );
    await attempt('Service', () =>
      this.core.createNamespacedService(
        {
          namespace,
          body: {
            metadata: {
              name,
              namespace,
              labels: { [LABEL_SHARE_MANAGER]: name },
              ownerReferences: [ownerRef(sm)],
            },
            spec: serviceSpec(sm),
          },
          dryRun: 'All',
        },
        withDeadline(this.config.requestTimeoutMs),
      ),
    );
    return refusals.length > 0 ? refusals.join('; ') : undefined;
  }

  private async claimAndCreate(sm: ShareManager, requestId: string): Promise<number | undefined> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const claimed = await this.status.claim(namespace, name, sm.metadata.resourceVersion ?? '', {
      podRequest: { id: requestId, by: this.config.identity },
    });
    if (claimed !== 'written') return claimed === 'conflict' ? 200 : undefined;
    const built = sharePodFor(sm, this.config, undefined, { [ANNOTATION_POD_REQUEST]: requestId });
    if (!built.ok) return undefined;
    const body = built.pod;
    try {
      const pod = await this.core.createNamespacedPod(
        { namespace, body },
        withDeadline(this.config.requestTimeoutMs),
      );
      this.log.info(
        { sm: `${namespace}/${name}`, pod: pod.metadata?.name, request: requestId },
        'share-manager pod created',
      );
    } catch (err) {
      throw new KubeApiError(`creating the pod of share manager ${namespace}/${name}`, statusOf(err), {
        cause: err,
      });
    }
    return undefined;
  }
}
