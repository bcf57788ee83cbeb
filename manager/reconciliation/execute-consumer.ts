/**
 * The I/O of the consumer actions (decide-consumer.ts decides them): the PV, the claim,
 * the ShareManager's finalizer and the backing claim's size. Thin: "already exists" is
 * looked at (ours: repaired; not ours: remembered as taken, never written), "already
 * gone" is done.
 *
 * Invariants:
 *  - Every update and delete is of an object read as ours (ANNOTATION_OWNER_UID): updates
 *    carry its resourceVersion (409: re-observe on the next pass), deletes its UID as a
 *    precondition.
 *  - The finalizer is written by a merge patch carrying the resourceVersion of a fresh
 *    read (a CAS; on 409 read again, at most three times), so no other finalizer is lost.
 *  - The cleanup reads fresh (the PV by name, the claims by label), deletes what is ours,
 *    and removes the finalizer only after every delete was accepted: a PV that still
 *    waits for its claim (pv-protection) is deleted by the API server later, by itself.
 *
 * Not guaranteed: the backing claim's size is read once per ShareManager and manager
 * process (NFS ignores a PV's capacity; a claim of class "" cannot be expanded anyway).
 */
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import type { Clock } from '../../lib/clock.ts';
import { KubeApiError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import type { Logger } from '../../lib/logger.ts';
import type { EventRecorder } from '../events.ts';
import { type ShareManager, SM_GROUP, SM_PLURAL, SM_VERSION } from '../share-model/share-manager-spec.ts';
import {
  ANNOTATION_VOLUME_UID,
  claimRepair,
  consumerVolumeName,
  FINALIZER_CONSUMER,
  isOurs,
  LABEL_CONSUMER_OF,
  notOursBecause,
  volumeRepair,
} from './consumer-objects.ts';
import {
  type ConsumerAction,
  type ConsumerCondition,
  isConsumerWarning,
  TAKEN_RETRY_MS,
  type TakenObject,
  type VolumeSize,
} from './decide-consumer.ts';

/** How long a missing backing claim is left before it is read again. */
const SIZE_RETRY_MS = 10_000;

type Conditions = NonNullable<NonNullable<ShareManager['status']>['conditions']>;

export class ConsumerExecutor {
  private readonly core: k8s.CoreV1Api;
  private readonly objects: k8s.CustomObjectsApi;
  /** ShareManager UID -> a name found taken by someone else. */
  readonly taken = new Map<string, TakenObject>();
  /** ShareManager UID -> its backing claim's size. */
  readonly sizes = new Map<string, VolumeSize>();

  constructor(
    kc: k8s.KubeConfig,
    private readonly clock: Clock,
    private readonly events: EventRecorder,
    private readonly log: Logger,
    private readonly deadlineMs: number,
    /** Writes the whole conditions list (a merge patch replaces it) and returns nothing. */
    private readonly writeConditions: (sm: ShareManager, conditions: Conditions) => Promise<void>,
  ) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
    this.objects = kc.makeApiClient(k8s.CustomObjectsApi);
  }

  /** Forgets what it remembered about a ShareManager that is gone. */
  forget(uid: string): void {
    this.taken.delete(uid);
    this.sizes.delete(uid);
  }

  /**
   * Runs one action; returns a requeue delay when the next pass should come soon.
   * `conditions` is the list as this pass last wrote it (updated in place).
   */
  async run(
    sm: ShareManager,
    action: ConsumerAction,
    conditions: { list: Conditions },
  ): Promise<number | undefined> {
    const uid = sm.metadata.uid ?? '';
    const key = `${sm.metadata.namespace ?? ''}/${sm.metadata.name ?? ''}`;
    switch (action.kind) {
      case 'addConsumerFinalizer':
        return this.setFinalizer(sm, true);
      case 'cleanUpConsumer':
        return this.cleanUp(sm, action.reason);
      case 'readVolumeSize':
        this.sizes.set(uid, await this.readSize(sm, action.pvc));
        return 1;
      case 'createConsumerClaim':
        return this.createClaim(sm, action.claim);
      case 'createConsumerVolume':
        return this.createVolume(sm, action.volume);
      case 'updateConsumerClaim':
        return this.updateClaim(sm, action.claim, action.fields);
      case 'updateConsumerVolume':
        return this.updateVolume(sm, action.volume, action.fields);
      case 'deleteConsumerClaim':
        await this.deleteClaim(sm, action.name, action.uid, action.reason);
        return undefined;
      case 'deleteConsumerVolume':
        await this.deleteVolume(sm, action.name, action.uid, action.reason);
        return 1;
      case 'setConsumerCondition':
        await this.setCondition(sm, action.condition, action.warn, conditions);
        return undefined;
      case 'requeueAfter':
        this.log.debug({ sm: key, reason: action.reason }, 'consumer: waiting');
        return action.ms;
    }
  }

  private async setCondition(
    sm: ShareManager,
    condition: ConsumerCondition | null,
    warn: boolean,
    conditions: { list: Conditions },
  ): Promise<void> {
    const others = conditions.list.filter((c) => c.type !== 'ConsumerClaim');
    const next = condition
      ? [...others, { ...condition, lastTransitionTime: new Date().toISOString() }]
      : others;
    await this.writeConditions(sm, next);
    conditions.list = next;
    if (condition && warn && isConsumerWarning(condition.reason))
      await this.events.record(sm, 'Warning', condition.reason, condition.message);
  }

  /** Adds or removes FINALIZER_CONSUMER by CAS on a fresh read (header). */
  private async setFinalizer(sm: ShareManager, present: boolean): Promise<number | undefined> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const what = `${present ? 'adding' : 'removing'} finalizer ${FINALIZER_CONSUMER} of share manager ${namespace}/${name}`;
    const target = { group: SM_GROUP, version: SM_VERSION, namespace, plural: SM_PLURAL, name };
    for (let attempt = 0; attempt < 3; attempt++) {
      let fresh: ShareManager;
      try {
        fresh = (await this.objects.getNamespacedCustomObject(
          target,
          withDeadline(this.deadlineMs),
        )) as ShareManager;
      } catch (err) {
        if (statusOf(err) === 404) return undefined;
        throw new KubeApiError(what, statusOf(err), { cause: err });
      }
      if (fresh.metadata.uid !== sm.metadata.uid) return undefined;
      const finalizers = fresh.metadata.finalizers ?? [];
      if (finalizers.includes(FINALIZER_CONSUMER) === present) return undefined;
      const next = present
        ? [...finalizers, FINALIZER_CONSUMER]
        : finalizers.filter((f) => f !== FINALIZER_CONSUMER);
      try {
        await this.objects.patchNamespacedCustomObject(
          {
            ...target,
            body: { metadata: { resourceVersion: fresh.metadata.resourceVersion, finalizers: next } },
          },
          k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch, withDeadline(this.deadlineMs)),
        );
        this.log.info(
          { sm: `${namespace}/${name}`, finalizer: FINALIZER_CONSUMER },
          present ? 'finalizer added' : 'finalizer removed',
        );
        return undefined;
      } catch (err) {
        const status = statusOf(err);
        if (status === 404) return undefined;
        if (status !== 409) throw new KubeApiError(what, status, { cause: err });
      }
    }
    return 200;
  }

  /** Deletes this ShareManager's PV and labelled claims (ours only), then the finalizer. */
  private async cleanUp(sm: ShareManager, reason: string): Promise<number | undefined> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const deadline = () => withDeadline(this.deadlineMs);
    let claims: V1PersistentVolumeClaim[];
    try {
      claims = (
        await this.core.listNamespacedPersistentVolumeClaim(
          { namespace, labelSelector: `${LABEL_CONSUMER_OF}=${name}` },
          deadline(),
        )
      ).items;
    } catch (err) {
      throw new KubeApiError(
        `listing the consumer claims of share manager ${namespace}/${name}`,
        statusOf(err),
        {
          cause: err,
        },
      );
    }
    for (const claim of claims) {
      if (isOurs(sm, claim) && !claim.metadata?.deletionTimestamp)
        await this.deleteClaim(sm, claim.metadata?.name ?? '', claim.metadata?.uid ?? '', reason);
    }
    const volumeName = consumerVolumeName(sm);
    const volume = await this.readVolume(sm, volumeName);
    if (volume && isOurs(sm, volume) && !volume.metadata?.deletionTimestamp)
      await this.deleteVolume(sm, volumeName, volume.metadata?.uid ?? '', reason);
    this.taken.delete(sm.metadata.uid ?? '');
    return this.setFinalizer(sm, false);
  }

  private async readSize(sm: ShareManager, pvc: string): Promise<VolumeSize> {
    const namespace = sm.metadata.namespace ?? '';
    const retryAt = this.clock.now() + SIZE_RETRY_MS;
    let claim: V1PersistentVolumeClaim;
    try {
      claim = await this.core.readNamespacedPersistentVolumeClaim(
        { namespace, name: pvc },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      if (statusOf(err) !== 404)
        throw new KubeApiError(`reading backing claim ${namespace}/${pvc}`, statusOf(err), { cause: err });
      return {
        pvc,
        missing: `backing claim ${namespace}/${pvc} (spec.volume.pvc) not found: its size is the PersistentVolume's capacity`,
        retryAt,
      };
    }
    const storage = claim.status?.capacity?.storage ?? claim.spec?.resources?.requests?.storage;
    if (storage === undefined)
      return {
        pvc,
        missing: `backing claim ${namespace}/${pvc} has neither status.capacity.storage nor spec.resources.requests.storage`,
        retryAt,
      };
    return { pvc, storage: String(storage) };
  }

  private async createClaim(sm: ShareManager, claim: V1PersistentVolumeClaim): Promise<number | undefined> {
    const namespace = claim.metadata?.namespace ?? '';
    const name = claim.metadata?.name ?? '';
    const key = `${namespace}/${name}`;
    try {
      await this.core.createNamespacedPersistentVolumeClaim(
        { namespace, body: claim },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      if (statusOf(err) !== 409)
        throw new KubeApiError(
          `creating consumer claim ${key} of share manager ${smKey(sm)}`,
          statusOf(err),
          {
            cause: err,
          },
        );
      const existing = await this.readClaim(sm, namespace, name);
      if (!existing) return 200;
      if (!isOurs(sm, existing))
        return this.markTaken(sm, 'PersistentVolumeClaim', key, notOursBecause(existing));
      // Ours, out of the label-selected cache (its labels were removed): repair it.
      const fix = claimRepair(sm, existing);
      return fix ? this.updateClaim(sm, fix.claim, fix.fields) : 1;
    }
    this.taken.delete(sm.metadata.uid ?? '');
    this.log.info({ sm: smKey(sm), claim: key }, 'consumer claim created');
    await this.events.record(sm, 'Normal', 'ConsumerCreated', `created claim ${key}`);
    return undefined;
  }

  private async createVolume(sm: ShareManager, volume: V1PersistentVolume): Promise<number | undefined> {
    const name = volume.metadata?.name ?? '';
    let created: V1PersistentVolume;
    try {
      created = await this.core.createPersistentVolume({ body: volume }, withDeadline(this.deadlineMs));
    } catch (err) {
      if (statusOf(err) !== 409)
        throw new KubeApiError(
          `creating consumer volume ${name} of share manager ${smKey(sm)}`,
          statusOf(err),
          {
            cause: err,
          },
        );
      const existing = await this.readVolume(sm, name);
      if (!existing) return 200;
      if (!isOurs(sm, existing))
        return this.markTaken(sm, 'PersistentVolume', name, notOursBecause(existing));
      const fix = volumeRepair(sm, existing, volume);
      return fix ? this.updateVolume(sm, fix.volume, fix.fields) : 1;
    }
    this.taken.delete(sm.metadata.uid ?? '');
    const source = `${volume.spec?.nfs?.server}:${volume.spec?.nfs?.path}`;
    this.log.info({ sm: smKey(sm), volume: name, source }, 'consumer volume created');
    await this.events.record(
      sm,
      'Normal',
      'ConsumerCreated',
      `created PersistentVolume ${name} (nfs ${source}) for claim ${volume.spec?.claimRef?.namespace}/${volume.spec?.claimRef?.name}`,
    );
    await this.wakeBinder(
      sm,
      volume.spec?.claimRef?.namespace ?? '',
      volume.spec?.claimRef?.name ?? '',
      created,
    );
    return undefined;
  }

  /**
   * Writes ANNOTATION_VOLUME_UID (the PV's UID) on our claim right after the PV exists.
   * Why: the PV controller binds a claim when it syncs the claim, and a PV's creation
   * syncs only the PV; the claim, created first, would wait for the controller's periodic
   * resync (--pvclaimbinder-sync-period, 15 s by default). Any update of the claim syncs it
   * at once. A 409 is as good (the claim changed: that synced it too); a failure only
   * costs the wait, so it is logged, not thrown.
   */
  private async wakeBinder(
    sm: ShareManager,
    namespace: string,
    name: string,
    volume: V1PersistentVolume,
  ): Promise<void> {
    try {
      const claim = await this.core.readNamespacedPersistentVolumeClaim(
        { namespace, name },
        withDeadline(this.deadlineMs),
      );
      if (!isOurs(sm, claim)) return;
      const annotations = {
        ...claim.metadata?.annotations,
        [ANNOTATION_VOLUME_UID]: volume.metadata?.uid ?? '',
      };
      await this.core.replaceNamespacedPersistentVolumeClaim(
        { namespace, name, body: { ...claim, metadata: { ...claim.metadata, annotations } } },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      if (statusOf(err) === 409) return;
      this.log.warn(
        { sm: smKey(sm), claim: `${namespace}/${name}`, err },
        "annotating the consumer claim after its PV was created failed: it binds at the PV controller's next resync",
      );
    }
  }

  private markTaken(sm: ShareManager, kind: TakenObject['kind'], object: string, why: string): number {
    this.taken.set(sm.metadata.uid ?? '', { kind, object, why, retryAt: this.clock.now() + TAKEN_RETRY_MS });
    this.log.warn({ sm: smKey(sm), kind, object, why }, 'consumer object exists and is not ours: left alone');
    return 1;
  }

  private async updateClaim(
    sm: ShareManager,
    claim: V1PersistentVolumeClaim,
    fields: string[],
  ): Promise<number | undefined> {
    const namespace = claim.metadata?.namespace ?? '';
    const name = claim.metadata?.name ?? '';
    try {
      await this.core.replaceNamespacedPersistentVolumeClaim(
        { namespace, name, body: claim },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      const status = statusOf(err);
      if (status === 409) return 200;
      if (status === 404) return 1;
      throw new KubeApiError(`repairing consumer claim ${namespace}/${name} (${fields.join(', ')})`, status, {
        cause: err,
      });
    }
    await this.repaired(sm, `claim ${namespace}/${name}`, fields);
    return undefined;
  }

  private async updateVolume(
    sm: ShareManager,
    volume: V1PersistentVolume,
    fields: string[],
  ): Promise<number | undefined> {
    const name = volume.metadata?.name ?? '';
    try {
      await this.core.replacePersistentVolume({ name, body: volume }, withDeadline(this.deadlineMs));
    } catch (err) {
      const status = statusOf(err);
      if (status === 409) return 200;
      if (status === 404) return 1;
      throw new KubeApiError(`repairing consumer volume ${name} (${fields.join(', ')})`, status, {
        cause: err,
      });
    }
    await this.repaired(sm, `PersistentVolume ${name}`, fields);
    return undefined;
  }

  private async repaired(sm: ShareManager, what: string, fields: string[]): Promise<void> {
    const message = `repaired ${what}: ${fields.join(', ')}`;
    this.log.warn({ sm: smKey(sm), fields }, message);
    await this.events.record(sm, 'Normal', 'ConsumerRepaired', message);
  }

  private async deleteClaim(sm: ShareManager, name: string, uid: string, reason: string): Promise<void> {
    const namespace = sm.metadata.namespace ?? '';
    try {
      await this.core.deleteNamespacedPersistentVolumeClaim(
        { namespace, name, body: { preconditions: { uid } } },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      const status = statusOf(err);
      if (status === 404 || status === 409) return;
      throw new KubeApiError(`deleting consumer claim ${namespace}/${name}`, status, { cause: err });
    }
    const message = `deleted claim ${namespace}/${name}: ${reason}`;
    this.log.info({ sm: smKey(sm), claim: `${namespace}/${name}` }, message);
    await this.events.record(sm, 'Normal', 'ConsumerDeleted', message);
  }

  private async deleteVolume(sm: ShareManager, name: string, uid: string, reason: string): Promise<void> {
    try {
      await this.core.deletePersistentVolume(
        { name, body: { preconditions: { uid } } },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      const status = statusOf(err);
      if (status === 404 || status === 409) return;
      throw new KubeApiError(`deleting consumer volume ${name}`, status, { cause: err });
    }
    const message = `deleted PersistentVolume ${name} (Retain: the data stays on the backing volume): ${reason}`;
    this.log.info({ sm: smKey(sm), volume: name }, message);
    await this.events.record(sm, 'Normal', 'ConsumerDeleted', message);
  }

  private async readClaim(sm: ShareManager, namespace: string, name: string) {
    try {
      return await this.core.readNamespacedPersistentVolumeClaim(
        { namespace, name },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw new KubeApiError(
        `reading claim ${namespace}/${name} for share manager ${smKey(sm)}`,
        statusOf(err),
        {
          cause: err,
        },
      );
    }
  }

  private async readVolume(sm: ShareManager, name: string) {
    try {
      return await this.core.readPersistentVolume({ name }, withDeadline(this.deadlineMs));
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw new KubeApiError(
        `reading PersistentVolume ${name} for share manager ${smKey(sm)}`,
        statusOf(err),
        {
          cause: err,
        },
      );
    }
  }
}

function smKey(sm: ShareManager): string {
  return `${sm.metadata.namespace ?? ''}/${sm.metadata.name ?? ''}`;
}
