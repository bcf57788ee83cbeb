/**
 * The I/O of a failover's steps (thin: no decisions beyond "already done counts as
 * done"). Each method is one step of the failover (docs/design.md, "The failover state
 * machine") and returns a typed outcome; API failures throw KubeApiError naming the
 * object, which the driver turns into `stepFailed`.
 *
 *  - markDelinquent / takeOver: a CAS on the Lease with the resourceVersion of the last
 *    observation; 409 is the outcome `conflict`, never retried here. They write the
 *    Lease as read plus the manager's own annotations (delinquent, failover-by).
 *  - forceDeletePod: grace period 0 with a UID precondition (only that incarnation);
 *    404 or a UID mismatch (409) mean it is gone; a holder that is not a pod name (an
 *    edited Lease) names no pod, so there is nothing to delete.
 *  - deleteAttachments: the VolumeAttachments of the PVC's bound PV on the lost node.
 *  - createReplacement: a fresh pod list first; a live pod other than the lost one means
 *    the replacement already exists (another manager, or our earlier attempt).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { isObjectName } from '../lib/env-config.ts';
import { KubeApiError } from '../lib/errors.ts';
import { k8s, kubeCall, statusOf, withDeadline } from '../lib/kube-client.ts';
import { fromWire, LABEL_SHARE_MANAGER, type LeaseRecord } from '../lib/lease-record.ts';
import type { LeaseStore } from '../lib/lease-store.ts';
import type { ManagerConfig } from './config.ts';
import { type NodeAvoidance, sharePodFor } from './pod-spec.ts';
import { isLive } from './reconcile-share-manager.ts';
import type { ShareManager } from './share-manager-spec.ts';
import type { StatusWriter } from './status-writer.ts';

export type CasOutcome = { kind: 'won'; lease: LeaseRecord } | { kind: 'conflict' };

export class FailoverExecutor {
  private readonly core: k8s.CoreV1Api;
  private readonly storage: k8s.StorageV1Api;

  constructor(
    kc: k8s.KubeConfig,
    private readonly leases: LeaseStore,
    readonly status: StatusWriter,
    private readonly config: ManagerConfig,
  ) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
    this.storage = kc.makeApiClient(k8s.StorageV1Api);
  }

  private get deadline() {
    return withDeadline(this.config.requestTimeoutMs);
  }

  async markDelinquent(observed: LeaseRecord, wallNow: Date): Promise<CasOutcome> {
    const outcome = await this.leases.update(
      { ...asRead(observed), delinquentSince: wallNow.toISOString(), failoverBy: this.config.identity },
      this.config.requestTimeoutMs,
    );
    return outcome.kind === 'written' ? { kind: 'won', lease: outcome.lease } : { kind: 'conflict' };
  }

  async takeOver(observed: LeaseRecord): Promise<CasOutcome> {
    const outcome = await this.leases.update(
      { ...asRead(observed), failoverBy: this.config.identity },
      this.config.requestTimeoutMs,
    );
    return outcome.kind === 'written' ? { kind: 'won', lease: outcome.lease } : { kind: 'conflict' };
  }

  async readLease(namespace: string, name: string): Promise<LeaseRecord | undefined> {
    return this.leases.get(namespace, name, this.config.requestTimeoutMs);
  }

  /** Force-deletes the lost incarnation. Returns what happened for the log. */
  async forceDeletePod(
    namespace: string,
    name: string,
    knownUid: string | undefined,
  ): Promise<'deleted' | 'absent'> {
    if (!isObjectName(name)) return 'absent';
    let uid = knownUid;
    if (!uid) {
      try {
        uid = (await this.core.readNamespacedPod({ namespace, name }, this.deadline)).metadata?.uid;
      } catch (err) {
        if (statusOf(err) === 404) return 'absent';
        throw failed(`reading pod ${namespace}/${name}`, err);
      }
    }
    try {
      await this.core.deleteNamespacedPod(
        { namespace, name, gracePeriodSeconds: 0, body: { gracePeriodSeconds: 0, preconditions: { uid } } },
        this.deadline,
      );
      return 'deleted';
    } catch (err) {
      const status = statusOf(err);
      if (status === 404 || status === 409) return 'absent';
      throw failed(`force-deleting pod ${namespace}/${name}`, err);
    }
  }

  /** Deletes the VolumeAttachments of the PVC's PV on `node`; returns their names. */
  async deleteAttachments(namespace: string, pvc: string, node: string): Promise<string[]> {
    if (!this.config.volumeAttachmentCleanup || node === '') return [];
    let pv: string | undefined;
    try {
      pv = (await this.core.readNamespacedPersistentVolumeClaim({ namespace, name: pvc }, this.deadline)).spec
        ?.volumeName;
    } catch (err) {
      if (statusOf(err) === 404) return [];
      throw failed(`reading PVC ${namespace}/${pvc}`, err);
    }
    if (!pv) return [];
    const list = await kubeCall('listing VolumeAttachments', () =>
      this.storage.listVolumeAttachment({}, this.deadline),
    );
    const doomed = list.items.filter(
      (va) => va.spec.source.persistentVolumeName === pv && va.spec.nodeName === node,
    );
    for (const va of doomed) {
      const name = va.metadata?.name ?? '';
      try {
        await this.storage.deleteVolumeAttachment({ name }, this.deadline);
      } catch (err) {
        if (statusOf(err) !== 404) {
          throw failed(`deleting VolumeAttachment ${name}`, err);
        }
      }
    }
    return doomed.map((va) => va.metadata?.name ?? '');
  }

  /** Creates the replacement unless a live pod other than `lostPod` exists; returns its name. */
  async createReplacement(
    sm: ShareManager,
    lostPod: string,
    avoid: NodeAvoidance,
  ): Promise<{ pod: string; created: boolean }> {
    const namespace = sm.metadata.namespace ?? '';
    const name = sm.metadata.name ?? '';
    const pods = await kubeCall(`listing pods of share manager ${namespace}/${name}`, () =>
      this.core.listNamespacedPod(
        { namespace, labelSelector: `${LABEL_SHARE_MANAGER}=${name}` },
        this.deadline,
      ),
    );
    const existing = pods.items.find((p: V1Pod) => isLive(p) && p.metadata?.name !== lostPod);
    if (existing) return { pod: existing.metadata?.name ?? '', created: false };
    const built = sharePodFor(sm, this.config, avoid, { 'leasehold.dev/replaces': lostPod });
    if (!built.ok)
      throw new Error(`share manager ${namespace}/${name} has an invalid spec: ${built.message}`);
    const body = built.pod;
    const created = await kubeCall(`creating the replacement pod of ${namespace}/${name}`, () =>
      this.core.createNamespacedPod({ namespace, body }, this.deadline),
    );
    return { pod: created.metadata?.name ?? '', created: true };
  }
}

/**
 * The Lease as read, not as the manager cleaned it (lease-fields.ts): the marks write
 * only the manager's own annotations and keep every other field as its writer left it.
 * NB: toWire still drops what the API would reject (a missing duration, a bad time).
 */
function asRead(observed: LeaseRecord): LeaseRecord {
  return observed.wire.metadata
    ? { ...fromWire(observed.wire), resourceVersion: observed.resourceVersion }
    : observed;
}

function failed(operation: string, err: unknown): KubeApiError {
  return new KubeApiError(operation, statusOf(err), { cause: err });
}
