/**
 * Glue for provisioning: keeps indexes by claim UID over the informer caches, builds a
 * snapshot per UID, asks decide-provisioning.ts and hands the actions to the executor.
 * Only the leader acts (provisioner-leadership.ts); the others keep their caches warm
 * so that a handover starts at once.
 *
 * Keys are claim UIDs. Enqueued by: a claim's change (its own UID), a change of one of
 * our objects (its LABEL_PROVISIONED_FOR), a StorageClass's change (every claim waiting
 * on it), becoming leader (everything known). Nothing is decided before every cache
 * has synced: an unsynced claim cache would make every claim look deleted.
 *
 * ProvisioningFailed is recorded once per claim and distinct message (the claim is
 * retried on every change, and classes are immutable: a refusal repeats until the class
 * is re-created); the others once per step.
 */
import type { V1PersistentVolume, V1PersistentVolumeClaim, V1StorageClass } from '@kubernetes/client-node';
import { failureGist } from '../../lib/errors.ts';
import type { Informer } from '../../lib/informer.ts';
import type { Logger } from '../../lib/logger.ts';
import { WorkQueue } from '../../lib/work-queue.ts';
import type { LeaseTimings } from '../config.ts';
import type { ShareManager } from '../share-model/share-manager-spec.ts';
import { type ParsedParameters, PROVISIONER_NAME, parseClassParameters } from './class-parameters.ts';
import { asksUs, decideProvisioning, type ProvisionSnapshot } from './decide-provisioning.ts';
import type { ProvisionExecutor } from './execute-provisioning.ts';
import { LABEL_PROVISIONED_FOR } from './provisioned-objects.ts';

export interface ProvisionerSources {
  /** Every claim of the cluster (the users' and the backing ones). */
  claims: Informer<V1PersistentVolumeClaim>;
  storageClasses: Informer<V1StorageClass>;
  /** PVs selected by LABEL_PROVISIONED_FOR. */
  volumes: Informer<V1PersistentVolume>;
  shareManagers: Informer<ShareManager>;
}

export interface ProvisionerSettings {
  defaultNamespace: string;
  onlyNamespace: string | undefined;
  defaults: LeaseTimings;
}

type Labelled = { metadata?: { uid?: string; labels?: Record<string, string> } };

export class Provisioner {
  readonly queue: WorkQueue;
  private readonly claimsByUid = new Map<string, V1PersistentVolumeClaim>();
  private readonly backingByUid = new Map<string, V1PersistentVolumeClaim>();
  private readonly sharesByUid = new Map<string, ShareManager>();
  private readonly volumesByUid = new Map<string, V1PersistentVolume>();
  /** Claim UID -> the last ProvisioningFailed message recorded. */
  private readonly failedSaid = new Map<string, string>();
  /** PV UIDs this manager deleted, until the PV leaves the cache (a stale pass would delete again). */
  private readonly volumesDeleted = new Set<string>();
  /** Parsed parameters per class, by resourceVersion (classes are immutable but may be re-created). */
  private readonly parsed = new Map<string, { resourceVersion: string; result: ParsedParameters }>();

  constructor(
    private readonly settings: ProvisionerSettings,
    private readonly log: Logger,
    private readonly sources: ProvisionerSources,
    private readonly executor: ProvisionExecutor,
    private readonly isLeader: () => boolean,
  ) {
    this.queue = new WorkQueue(
      (uid) => this.provision(uid),
      (uid, err, failures) => this.failed(uid, err, failures),
    );
  }

  claimSeen(claim: V1PersistentVolumeClaim, deleted: boolean): void {
    const uid = claim.metadata?.uid ?? '';
    const owner = claim.metadata?.labels?.[LABEL_PROVISIONED_FOR];
    if (owner) {
      this.index(this.backingByUid, owner, claim, deleted);
      this.enqueue(owner);
    }
    if (deleted) this.claimsByUid.delete(uid);
    else this.claimsByUid.set(uid, claim);
    if (asksUs(claim) || this.known(uid)) this.enqueue(uid);
  }

  shareSeen(share: ShareManager, deleted: boolean): void {
    const owner = share.metadata.labels?.[LABEL_PROVISIONED_FOR];
    if (!owner) return;
    this.index(this.sharesByUid, owner, share, deleted);
    this.enqueue(owner);
  }

  volumeSeen(volume: V1PersistentVolume, deleted: boolean): void {
    const owner = volume.metadata?.labels?.[LABEL_PROVISIONED_FOR];
    if (!owner) return;
    if (deleted) this.volumesDeleted.delete(volume.metadata?.uid ?? '');
    this.index(this.volumesByUid, owner, volume, deleted);
    this.enqueue(owner);
  }

  /** A class changed: every unbound claim of it that asks us. */
  storageClassSeen(storageClass: V1StorageClass): void {
    if (storageClass.provisioner !== PROVISIONER_NAME) return;
    for (const claim of this.claimsByUid.values())
      if (claim.spec?.storageClassName === storageClass.metadata?.name && asksUs(claim))
        this.enqueue(claim.metadata?.uid ?? '');
  }

  /** Became leader: look at everything (what the last leader left half-done included). */
  resync(): void {
    for (const [uid, claim] of this.claimsByUid) if (asksUs(claim)) this.enqueue(uid);
    for (const map of [this.backingByUid, this.sharesByUid, this.volumesByUid])
      for (const uid of map.keys()) this.enqueue(uid);
  }

  private enqueue(uid: string): void {
    if (uid && this.isLeader()) this.queue.add(uid);
  }

  private known(uid: string): boolean {
    return this.backingByUid.has(uid) || this.sharesByUid.has(uid) || this.volumesByUid.has(uid);
  }

  private index<T extends Labelled>(map: Map<string, T>, owner: string, object: T, deleted: boolean): void {
    if (deleted) {
      if (map.get(owner)?.metadata?.uid === object.metadata?.uid) map.delete(owner);
    } else map.set(owner, object);
  }

  private failed(uid: string, err: unknown, failures: number): void {
    const level = failures >= 3 ? 'warn' : 'info';
    this.log[level](
      { claimUid: uid, err: failureGist(err), failures },
      'provisioning step failed; retrying with backoff',
    );
    const claim = this.claimsByUid.get(uid);
    if (claim && failures === 3)
      void this.executor.run(uid, claim, {
        kind: 'event',
        type: 'Warning',
        reason: 'ProvisioningFailed',
        message: `${err instanceof Error ? err.message : String(err)} (3 times in a row; retried with backoff)`,
      });
  }

  private async provision(uid: string): Promise<number | undefined> {
    if (!this.isLeader()) return undefined;
    const s = this.sources;
    if (!s.claims.synced || !s.storageClasses.synced || !s.volumes.synced || !s.shareManagers.synced)
      return 500;
    const claim = this.claimsByUid.get(uid);
    const className = claim?.spec?.storageClassName ?? '';
    const storageClass = className ? s.storageClasses.get('', className) : undefined;
    const snapshot: ProvisionSnapshot = {
      uid,
      claim,
      storageClass,
      settings: storageClass ? this.parametersOf(storageClass) : undefined,
      share: this.sharesByUid.get(uid),
      backing: this.backingByUid.get(uid),
      volume: this.volumesByUid.get(uid),
    };
    const actions = decideProvisioning(snapshot);
    if (!claim && !this.known(uid)) this.failedSaid.delete(uid);
    for (const action of actions) {
      if (action.kind === 'event' && action.reason === 'ProvisioningFailed') {
        if (this.failedSaid.get(uid) === action.message) continue;
        this.failedSaid.set(uid, action.message);
      }
      if (action.kind === 'deleteVolume') {
        if (this.volumesDeleted.has(action.uid)) continue;
        if (await this.executor.run(uid, claim, action)) this.volumesDeleted.add(action.uid);
        continue;
      }
      await this.executor.run(uid, claim, action);
    }
    // The next step is driven by the watch events of what was just written.
    return undefined;
  }

  private parametersOf(storageClass: V1StorageClass): ParsedParameters {
    const name = storageClass.metadata?.name ?? '';
    const version = storageClass.metadata?.resourceVersion ?? '';
    const cached = this.parsed.get(name);
    if (cached?.resourceVersion === version) return cached.result;
    const result = parseClassParameters(name, storageClass.parameters, this.settings);
    this.parsed.set(name, { resourceVersion: version, result });
    return result;
  }
}
