/**
 * Runs the provisioner's actions (decide-provisioning.ts) against the API server.
 *
 * Guarantees:
 *  - A create that meets an object of its name (409) is done when that object is ours
 *    for the same claim (LABEL_PROVISIONED_FOR), and an error naming it when not: the
 *    provisioner never adopts what it did not make.
 *  - Deletes carry the UID read (a precondition), so an object re-created under the same
 *    name in between is never deleted; 404 counts as done.
 *  - The ShareManager is deleted in the foreground: it stays, with a deletionTimestamp,
 *    until the garbage collector has deleted its pods, Service and Lease (they block its
 *    deletion), so "ShareManager gone" means "server stopped".
 *  - The PV's finalizer is removed by an update carrying the resourceVersion read, before
 *    its delete (one delete that ends it).
 * Every error names the claim and the object.
 */
import type { V1PersistentVolume, V1PersistentVolumeClaim } from '@kubernetes/client-node';
import { KubeApiError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import type { Logger } from '../../lib/logger.ts';
import type { EventRecorder } from '../events.ts';
import { type ShareManager, SM_GROUP, SM_PLURAL, SM_VERSION } from '../share-model/share-manager-spec.ts';
import { IN_PROGRESS, INFEASIBLE } from './decide-expansion.ts';
import type { ProvisionAction } from './decide-provisioning.ts';
import { claimKey, FINALIZER_PROVISIONED, LABEL_PROVISIONED_FOR } from './provisioned-objects.ts';

export class ProvisionExecutor {
  private readonly core: k8s.CoreV1Api;
  private readonly objects: k8s.CustomObjectsApi;

  constructor(
    kc: k8s.KubeConfig,
    private readonly events: EventRecorder,
    private readonly log: Logger,
    private readonly deadlineMs: number,
  ) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
    this.objects = kc.makeApiClient(k8s.CustomObjectsApi);
  }

  /**
   * One action for the claim of UID `uid` (`claim` when it still exists). Resolves true
   * when a PV's delete was sent (deleteVolume; false: not yet, a later pass retries).
   */
  async run(
    uid: string,
    claim: V1PersistentVolumeClaim | undefined,
    action: ProvisionAction,
  ): Promise<boolean | undefined> {
    const about = claim ? `claim ${claimKey(claim)}` : `deleted claim ${uid}`;
    const log = this.log.child({ claim: claim ? claimKey(claim) : uid });
    const deadline = () => withDeadline(this.deadlineMs);
    switch (action.kind) {
      case 'event':
        if (claim)
          await this.events.recordAbout(
            {
              apiVersion: 'v1',
              kind: 'PersistentVolumeClaim',
              name: claim.metadata?.name ?? '',
              namespace: claim.metadata?.namespace,
              uid,
            },
            action.type,
            action.reason,
            action.message,
          );
        if (action.type === 'Warning') log.warn({ reason: action.reason }, action.message);
        else log.info({ reason: action.reason }, action.message);
        return;
      case 'wait':
        log.debug({ why: action.why }, 'provisioning waits');
        return;
      case 'createBackingClaim': {
        const { namespace = '', name = '' } = action.body.metadata ?? {};
        await this.create(
          uid,
          `backing claim ${namespace}/${name} of ${about}`,
          async () => {
            await this.core.createNamespacedPersistentVolumeClaim(
              { namespace, body: action.body },
              deadline(),
            );
          },
          async () => this.core.readNamespacedPersistentVolumeClaim({ namespace, name }, deadline()),
        );
        log.info({ backing: `${namespace}/${name}` }, 'backing claim created');
        return;
      }
      case 'createShare': {
        const { namespace = '', name = '' } = action.body.metadata;
        const target = { group: SM_GROUP, version: SM_VERSION, namespace, plural: SM_PLURAL };
        await this.create(
          uid,
          `share manager ${namespace}/${name} of ${about}`,
          async () => {
            await this.objects.createNamespacedCustomObject({ ...target, body: action.body }, deadline());
          },
          async () =>
            (await this.objects.getNamespacedCustomObject({ ...target, name }, deadline())) as ShareManager,
        );
        log.info({ share: `${namespace}/${name}` }, 'share manager created');
        return;
      }
      case 'createVolume': {
        const name = action.body.metadata?.name ?? '';
        await this.create(
          uid,
          `persistent volume ${name} of ${about}`,
          async () => {
            await this.core.createPersistentVolume({ body: action.body }, deadline());
          },
          async () => this.core.readPersistentVolume({ name }, deadline()),
        );
        log.info({ volume: name }, 'persistent volume created');
        return;
      }
      case 'deleteShare': {
        const { namespace, name } = action;
        const what = `deleting share manager ${namespace}/${name} of ${about}`;
        try {
          await this.objects.deleteNamespacedCustomObject(
            {
              group: SM_GROUP,
              version: SM_VERSION,
              namespace,
              plural: SM_PLURAL,
              name,
              body: { preconditions: { uid: action.uid }, propagationPolicy: 'Foreground' },
            },
            deadline(),
          );
        } catch (err) {
          if (!gone(err)) throw new KubeApiError(what, statusOf(err), { cause: err });
        }
        log.info(
          { share: `${namespace}/${name}` },
          'share manager deleted (foreground: its server stops first)',
        );
        return;
      }
      case 'deleteBackingClaim': {
        const { namespace, name } = action;
        // The order's safety step, checked against the API, not the cache: the ShareManager
        // (same namespace and name) must be gone, its server stopped, before the volume goes.
        const shareLeft = await this.shareStillThere(uid, namespace, name, about);
        if (shareLeft) {
          log.info(
            { share: `${namespace}/${name}`, why: shareLeft },
            'backing claim kept: its share is still there',
          );
          return;
        }
        try {
          await this.core.deleteNamespacedPersistentVolumeClaim(
            { namespace, name, body: { preconditions: { uid: action.uid } } },
            deadline(),
          );
        } catch (err) {
          if (!gone(err))
            throw new KubeApiError(`deleting backing claim ${namespace}/${name} of ${about}`, statusOf(err), {
              cause: err,
            });
        }
        log.info({ backing: `${namespace}/${name}` }, 'backing claim deleted');
        return;
      }
      case 'deleteVolume': {
        const sent = await this.deleteVolume(action.name, action.uid, action.removeFinalizer, about);
        if (sent) log.info({ volume: action.name }, 'persistent volume deleted');
        return sent;
      }
      case 'expandBacking':
        if (claim) await this.expandBacking(uid, claim, action, about);
        return;
      case 'expandVolume': {
        const fresh = await this.core.readPersistentVolume({ name: action.name }, deadline());
        fresh.spec = { ...fresh.spec, capacity: { ...fresh.spec?.capacity, storage: action.size } };
        try {
          await this.core.replacePersistentVolume({ name: action.name, body: fresh }, deadline());
        } catch (err) {
          if (statusOf(err) !== 409)
            throw new KubeApiError(`expanding persistent volume ${action.name} of ${about}`, statusOf(err), {
              cause: err,
            });
        }
        log.info({ volume: action.name, size: action.size }, 'persistent volume capacity updated');
        return;
      }
      case 'claimResized':
        if (claim) {
          await this.writeClaimStatus(claim, (status) => {
            status.capacity = { ...status.capacity, storage: action.size };
            status.allocatedResources = { ...status.allocatedResources, storage: action.size };
            if (status.allocatedResourceStatuses) delete status.allocatedResourceStatuses.storage;
            status.conditions = (status.conditions ?? []).filter((c) => c.type !== 'Resizing');
          });
          await this.run(uid, claim, {
            kind: 'event',
            type: 'Normal',
            reason: 'VolumeResizeSuccessful',
            message: `leasehold: the share's backing volume and its file system were expanded to ${action.size} while serving`,
          });
        }
        return;
    }
  }

  /** Step 1 of expansion; a refusal by the API (the backing class cannot expand) is reported, nothing else changed. */
  private async expandBacking(
    uid: string,
    claim: V1PersistentVolumeClaim,
    action: Extract<ProvisionAction, { kind: 'expandBacking' }>,
    about: string,
  ): Promise<void> {
    const deadline = () => withDeadline(this.deadlineMs);
    const { namespace, name, size } = action;
    const what = `expanding backing claim ${namespace}/${name} of ${about} to ${size}`;
    let refusal: string | undefined;
    try {
      const fresh = await this.core.readNamespacedPersistentVolumeClaim({ namespace, name }, deadline());
      fresh.spec = {
        ...fresh.spec,
        resources: {
          ...fresh.spec?.resources,
          requests: { ...fresh.spec?.resources?.requests, storage: size },
        },
      };
      await this.core.replaceNamespacedPersistentVolumeClaim({ namespace, name, body: fresh }, deadline());
    } catch (err) {
      const status = statusOf(err);
      if (status === 409) return; // changed since read: the next pass
      if (status !== 403 && status !== 422) throw new KubeApiError(what, status, { cause: err });
      refusal = apiMessage(err);
    }
    await this.writeClaimStatus(claim, (status) => {
      status.allocatedResources = { ...status.allocatedResources, storage: size };
      status.allocatedResourceStatuses = {
        ...status.allocatedResourceStatuses,
        storage: refusal === undefined ? IN_PROGRESS : INFEASIBLE,
      };
      const others = (status.conditions ?? []).filter((c) => c.type !== 'Resizing');
      status.conditions =
        refusal === undefined
          ? [...others, { type: 'Resizing', status: 'True', lastTransitionTime: new Date() }]
          : others;
    });
    await this.run(uid, claim, {
      kind: 'event',
      type: refusal === undefined ? 'Normal' : 'Warning',
      reason: refusal === undefined ? 'Resizing' : 'VolumeResizeFailed',
      message:
        refusal === undefined
          ? `leasehold: expanding backing claim ${namespace}/${name} to ${size}`
          : `leasehold: backing claim ${namespace}/${name} cannot be expanded to ${size}, nothing changed: ${refusal}`,
    });
  }

  /** Updates the claim's status subresource by resourceVersion (a 409: the next pass). */
  private async writeClaimStatus(
    claim: V1PersistentVolumeClaim,
    change: (status: NonNullable<V1PersistentVolumeClaim['status']>) => void,
  ): Promise<void> {
    const namespace = claim.metadata?.namespace ?? '';
    const name = claim.metadata?.name ?? '';
    const deadline = () => withDeadline(this.deadlineMs);
    const fresh = await this.core.readNamespacedPersistentVolumeClaimStatus({ namespace, name }, deadline());
    if (fresh.metadata?.uid !== claim.metadata?.uid) return;
    const status = { ...fresh.status };
    change(status);
    try {
      await this.core.replaceNamespacedPersistentVolumeClaimStatus(
        { namespace, name, body: { ...fresh, status } },
        deadline(),
      );
    } catch (err) {
      if (statusOf(err) !== 409)
        throw new KubeApiError(`writing the status of claim ${namespace}/${name}`, statusOf(err), {
          cause: err,
        });
    }
  }

  /**
   * Why the ShareManager of claim `uid` still counts as there (a fresh read: it exists
   * for that claim, deleting or not), or undefined when it is gone.
   */
  private async shareStillThere(
    uid: string,
    namespace: string,
    name: string,
    about: string,
  ): Promise<string | undefined> {
    let found: ShareManager;
    try {
      found = (await this.objects.getNamespacedCustomObject(
        { group: SM_GROUP, version: SM_VERSION, namespace, plural: SM_PLURAL, name },
        withDeadline(this.deadlineMs),
      )) as ShareManager;
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw new KubeApiError(`reading share manager ${namespace}/${name} of ${about}`, statusOf(err), {
        cause: err,
      });
    }
    if (found.metadata.labels?.[LABEL_PROVISIONED_FOR] !== uid) return undefined;
    return found.metadata.deletionTimestamp ? 'being deleted (its pod stopping)' : 'not deleted';
  }

  /** Create, and on 409 accept the object found only when it is ours for this claim. */
  private async create(
    uid: string,
    what: string,
    create: () => Promise<void>,
    read: () => Promise<{ metadata?: { labels?: Record<string, string> } }>,
  ): Promise<void> {
    try {
      await create();
      return;
    } catch (err) {
      if (statusOf(err) !== 409) throw new KubeApiError(`creating ${what}`, statusOf(err), { cause: err });
    }
    let found: { metadata?: { labels?: Record<string, string> } };
    try {
      found = await read();
    } catch (err) {
      throw new KubeApiError(`reading ${what} after a conflict`, statusOf(err), { cause: err });
    }
    if (found.metadata?.labels?.[LABEL_PROVISIONED_FOR] !== uid)
      throw new KubeApiError(
        `creating ${what}: the name is taken by an object without ${LABEL_PROVISIONED_FOR}=${uid}; leasehold never adopts it (rename or delete it)`,
        409,
      );
  }

  /**
   * Our finalizer first (an update by resourceVersion), then the delete (UID
   * precondition): one delete that ends the PV at once. A kill between the two leaves a
   * Released PV without the finalizer, which the next pass deletes.
   */
  private async deleteVolume(
    name: string,
    uid: string,
    removeFinalizer: boolean,
    about: string,
  ): Promise<boolean> {
    const deadline = () => withDeadline(this.deadlineMs);
    if (removeFinalizer) {
      let fresh: V1PersistentVolume;
      try {
        fresh = await this.core.readPersistentVolume({ name }, deadline());
      } catch (err) {
        if (statusOf(err) === 404) return true;
        throw new KubeApiError(`reading persistent volume ${name} of ${about}`, statusOf(err), {
          cause: err,
        });
      }
      if (fresh.metadata?.uid !== uid) return true;
      const finalizers = fresh.metadata?.finalizers ?? [];
      if (finalizers.includes(FINALIZER_PROVISIONED)) {
        try {
          await this.core.replacePersistentVolume(
            {
              name,
              body: {
                ...fresh,
                metadata: {
                  ...fresh.metadata,
                  finalizers: finalizers.filter((f) => f !== FINALIZER_PROVISIONED),
                },
              },
            },
            deadline(),
          );
        } catch (err) {
          // 409: changed since read; the next pass reads it again.
          if (statusOf(err) === 409) return false;
          if (statusOf(err) === 404) return true;
          throw new KubeApiError(
            `removing finalizer ${FINALIZER_PROVISIONED} of persistent volume ${name}`,
            statusOf(err),
            { cause: err },
          );
        }
        // Already deleted by hand: the finalizer was all that kept it.
        if (fresh.metadata?.deletionTimestamp) return true;
      }
    }
    try {
      await this.core.deletePersistentVolume({ name, body: { preconditions: { uid } } }, deadline());
    } catch (err) {
      if (!gone(err))
        throw new KubeApiError(`deleting persistent volume ${name} of ${about}`, statusOf(err), {
          cause: err,
        });
    }
    return true;
  }
}

/** The API server's own message of a refusal (its Status body), else the error's. */
function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  try {
    const parsed = typeof body === 'string' ? (JSON.parse(body) as { message?: string }) : undefined;
    if (parsed?.message) return parsed.message;
  } catch {
    // not JSON
  }
  return err instanceof Error ? err.message : String(err);
}

/** 404 (already gone) or 409 (a UID precondition failed: another object of that name, not ours to delete). */
function gone(err: unknown): boolean {
  const status = statusOf(err);
  return status === 404 || status === 409;
}
