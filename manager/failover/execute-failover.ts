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
 *    edited Lease) names no pod, so there is nothing to delete; a pod that is not the
 *    share's own (its share label and controller reference: an edited holder naming
 *    another share's pod) is never deleted (`foreign`).
 *  - readStorageGate: what the storage-fencing gate needs (storage-fencing.ts): the PVC,
 *    its PV, the PV's CSIDriver (get only) and the lost Node. A 404 is an answer (gone,
 *    missing), a 403 on the CSIDriver too (`unreadable`: the RBAC lacks it, which no
 *    retry fixes); any other failure throws, so a passing API fault is retried rather
 *    than taken for storage that cannot fence.
 *  - handOffVolume: the PVC's volume off the lost node, as volume-handoff.ts decides
 *    (a volumesInUse entry removed, or the VolumeAttachments deleted, or nothing).
 *  - createReplacement: a fresh pod list first; a live pod other than the lost one means
 *    the replacement already exists (another manager, or our earlier attempt).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { isObjectName } from '../../lib/env-config.ts';
import { KubeApiError } from '../../lib/errors.ts';
import { k8s, kubeCall, statusOf, withDeadline } from '../../lib/kube-client.ts';
import { fromWire, LABEL_SHARE_MANAGER, type LeaseRecord } from '../../lib/lease-record.ts';
import type { LeaseStore } from '../../lib/lease-store.ts';
import type { ManagerConfig } from '../config.ts';
import { isLive, isPodOfShare, type NodeAvoidances, sharePodFor } from '../share-model/pod-spec.ts';
import type { ShareManager } from '../share-model/share-manager-spec.ts';
import type { StatusWriter } from '../share-model/status-writer.ts';
import {
  type CsiDriverRead,
  classifyStorage,
  type LostNodeRead,
  readLostNode,
  type StorageFencing,
  unclassifiable,
} from './storage-fencing.ts';
import { decideHandoff, type HandoffDecision, type HandoffPv, releaseInUsePatch } from './volume-handoff.ts';

/** What the step knows that the API does not: the failover's own observations. */
export interface HandoffContext {
  newerPodOnNode: string | undefined;
  heartbeatChangedAt(): number | undefined;
  holderSilentSince: number | undefined;
  renewDeadlineMs: number;
  /** The unmount check's second look (volume-handoff.ts `unmountOverdue`). */
  unmountOverdue?: boolean;
}

export interface HandoffOutcome {
  decision: HandoffDecision;
  pv: string | undefined;
  attachments: readonly string[];
}

/** How long a multi-attach PV may take to detach before the step fails (and is retried). */
const DETACH_WAIT_MS = 60_000;

export type CasOutcome = { kind: 'won'; lease: LeaseRecord } | { kind: 'conflict' };

export class FailoverExecutor {
  private readonly core: k8s.CoreV1Api;
  private readonly storage: k8s.StorageV1Api;
  private readonly coordination: k8s.CoordinationV1Api;

  constructor(
    kc: k8s.KubeConfig,
    private readonly leases: LeaseStore,
    readonly status: StatusWriter,
    private readonly config: ManagerConfig,
  ) {
    this.core = kc.makeApiClient(k8s.CoreV1Api);
    this.storage = kc.makeApiClient(k8s.StorageV1Api);
    this.coordination = kc.makeApiClient(k8s.CoordinationV1Api);
  }

  private get deadline() {
    return withDeadline(this.config.requestTimeoutMs);
  }

  async markDelinquent(observed: LeaseRecord, wallNow: Date): Promise<CasOutcome> {
    const outcome = await this.leases.update(
      {
        ...asRead(observed),
        delinquentSince: wallNow.toISOString(),
        failoverBy: this.config.identity,
        failoverByNode: this.config.nodeName,
      },
      this.config.requestTimeoutMs,
    );
    return outcome.kind === 'written' ? { kind: 'won', lease: outcome.lease } : { kind: 'conflict' };
  }

  async takeOver(observed: LeaseRecord): Promise<CasOutcome> {
    const outcome = await this.leases.update(
      { ...asRead(observed), failoverBy: this.config.identity, failoverByNode: this.config.nodeName },
      this.config.requestTimeoutMs,
    );
    return outcome.kind === 'written' ? { kind: 'won', lease: outcome.lease } : { kind: 'conflict' };
  }

  async readLease(namespace: string, name: string): Promise<LeaseRecord | undefined> {
    return this.leases.get(namespace, name, this.config.requestTimeoutMs);
  }

  /** Node `node`'s heartbeat Lease as the API server has it now (a quorum read); undefined = none. */
  async readNodeHeartbeat(node: string): Promise<k8s.V1Lease | undefined> {
    try {
      return await this.coordination.readNamespacedLease(
        { namespace: 'kube-node-lease', name: node },
        this.deadline,
      );
    } catch (err) {
      if (statusOf(err) === 404) return undefined;
      throw failed(`reading node ${node}'s heartbeat Lease`, err);
    }
  }

  /**
   * Force-deletes the lost incarnation of share `share`'s pod `name` (`known`: the pod as
   * the cache has it, else it is read). Returns what happened for the log: `foreign` when
   * the pod is not the share's own (isPodOfShare), which is never deleted.
   */
  async forceDeletePod(
    namespace: string,
    name: string,
    share: { name: string; uid?: string },
    known: V1Pod | undefined,
  ): Promise<'deleted' | 'absent' | 'foreign'> {
    if (!isObjectName(name)) return 'absent';
    let pod = known;
    if (!pod) {
      try {
        pod = await this.core.readNamespacedPod({ namespace, name }, this.deadline);
      } catch (err) {
        if (statusOf(err) === 404) return 'absent';
        throw failed(`reading pod ${namespace}/${name}`, err);
      }
    }
    if (!isPodOfShare(pod, share.name, share.uid)) return 'foreign';
    try {
      await this.core.deleteNamespacedPod(
        {
          namespace,
          name,
          gracePeriodSeconds: 0,
          body: { gracePeriodSeconds: 0, preconditions: { uid: pod.metadata?.uid } },
        },
        this.deadline,
      );
      return 'deleted';
    } catch (err) {
      const status = statusOf(err);
      if (status === 404 || status === 409) return 'absent';
      throw failed(`force-deleting pod ${namespace}/${name}`, err);
    }
  }

  /**
   * What the storage-fencing gate needs: the storage's classification (PVC -> PV -> CSI
   * driver -> CSIDriver.attachRequired) and the lost Node (read in parallel). `node` ''
   * (the lost node is not known) reads no Node.
   */
  async readStorageGate(
    namespace: string,
    pvc: string,
    node: string,
  ): Promise<{ storage: StorageFencing; node: LostNodeRead }> {
    const readNode = async (): Promise<LostNodeRead> => {
      if (node === '') return { kind: 'unknown' };
      try {
        return readLostNode(await this.core.readNode({ name: node }, this.deadline));
      } catch (err) {
        if (statusOf(err) === 404) return readLostNode(undefined);
        throw failed(`reading node ${node}`, err);
      }
    };
    const [storage, lost] = await Promise.all([this.classifyClaim(namespace, pvc), readNode()]);
    return { storage, node: lost };
  }

  private async classifyClaim(namespace: string, pvc: string): Promise<StorageFencing> {
    const claim = `${namespace}/${pvc}`;
    let pvName: string | undefined;
    try {
      pvName = (await this.core.readNamespacedPersistentVolumeClaim({ namespace, name: pvc }, this.deadline))
        .spec?.volumeName;
    } catch (err) {
      if (statusOf(err) === 404) return unclassifiable(claim, 'does not exist');
      throw failed(`reading PVC ${claim}`, err);
    }
    if (!pvName) return unclassifiable(claim, 'is not bound to a PV');
    let driver: string | undefined;
    try {
      driver = (await this.core.readPersistentVolume({ name: pvName }, this.deadline)).spec?.csi?.driver;
    } catch (err) {
      if (statusOf(err) === 404)
        return unclassifiable(claim, `is bound to PV ${pvName}, which does not exist`);
      throw failed(`reading PV ${pvName}`, err);
    }
    const pv = { name: pvName, csiDriver: driver };
    if (driver === undefined) return classifyStorage(pv, { kind: 'missing' });
    let read: CsiDriverRead;
    try {
      const object = await this.storage.readCSIDriver({ name: driver }, this.deadline);
      read = { kind: 'found', attachRequired: object.spec?.attachRequired };
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) read = { kind: 'missing' };
      else if (status === 403)
        read = {
          kind: 'unreadable',
          error: "403: the manager's RBAC lacks get on storage.k8s.io csidrivers",
        };
      else throw failed(`reading CSIDriver ${driver}`, err);
    }
    return classifyStorage(pv, read);
  }

  /**
   * Hands the PVC's volume off the lost node (volume-handoff.ts decides how): reads the
   * PVC, its PV, the PV's VolumeAttachments on `node` and the Node, decides, acts. A
   * volumesInUse patch whose `test` failed (422: the list moved under us) is decided
   * again on a fresh read, at most 3 times. With `waitDetached` (a multi-attach PV) it
   * returns only once no VolumeAttachment of the PV is left on `node`.
   */
  async handOffVolume(
    namespace: string,
    pvc: string,
    node: string,
    context: HandoffContext,
  ): Promise<HandoffOutcome> {
    for (let attempt = 1; ; attempt++) {
      const snapshot = await this.handoffSnapshot(namespace, pvc, node);
      let decision: HandoffDecision = decideHandoff({
        mode: this.config.volumeHandoff,
        lostNode: node,
        pv: snapshot.pv,
        volumesInUse: snapshot.volumesInUse,
        attachments: snapshot.attachments,
        newerPodOnNode: context.newerPodOnNode,
        heartbeatChangedAt: context.heartbeatChangedAt(),
        holderSilentSince: context.holderSilentSince,
        renewDeadlineMs: context.renewDeadlineMs,
        unmountOverdue: context.unmountOverdue ?? false,
      });
      const pv = snapshot.pv?.name;
      if (decision.kind === 'releaseInUse') {
        try {
          await this.core.patchNodeStatus(
            { name: node, body: releaseInUsePatch(decision.uniqueName, decision.index) },
            k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch, this.deadline),
          );
        } catch (err) {
          const status = statusOf(err);
          if (status === 422 && attempt < 3) continue;
          // NB: without the permission, fall back to the older handoff rather than stall the failover.
          if (status === 403) {
            decision = {
              kind: 'deleteAttachments',
              names: snapshot.attachments,
              reason: `patching node ${node} status was forbidden (403): the manager's RBAC lacks patch on nodes/status`,
              waitDetached: decision.waitDetached,
            };
          } else if (status === 404) {
            decision = { kind: 'nothing', reason: `node ${node} is gone` };
          } else {
            throw failed(`removing ${decision.uniqueName} from node ${node} status.volumesInUse`, err);
          }
        }
      }
      if (decision.kind === 'deleteAttachments') {
        for (const name of decision.names) {
          try {
            await this.storage.deleteVolumeAttachment({ name }, this.deadline);
          } catch (err) {
            if (statusOf(err) !== 404) throw failed(`deleting VolumeAttachment ${name}`, err);
          }
        }
      }
      if (decision.waitDetached && pv) await this.waitDetached(pv, node);
      return { decision, pv, attachments: snapshot.attachments };
    }
  }

  /** The Node is read alongside the PVC -> PV -> VolumeAttachments chain (one round trip less). */
  private async handoffSnapshot(
    namespace: string,
    pvc: string,
    node: string,
  ): Promise<{ pv: HandoffPv | undefined; volumesInUse: string[] | undefined; attachments: string[] }> {
    const readNode = async (): Promise<string[] | undefined> => {
      try {
        return (await this.core.readNode({ name: node }, this.deadline)).status?.volumesInUse ?? [];
      } catch (err) {
        if (statusOf(err) === 404) return undefined;
        throw failed(`reading node ${node}`, err);
      }
    };
    const readVolume = async (): Promise<{ pv: HandoffPv | undefined; attachments: string[] }> => {
      let pvName: string | undefined;
      try {
        pvName = (
          await this.core.readNamespacedPersistentVolumeClaim({ namespace, name: pvc }, this.deadline)
        ).spec?.volumeName;
      } catch (err) {
        if (statusOf(err) !== 404) throw failed(`reading PVC ${namespace}/${pvc}`, err);
      }
      if (!pvName) return { pv: undefined, attachments: [] };
      const [wire, attachments] = await Promise.all([
        this.core.readPersistentVolume({ name: pvName }, this.deadline).catch((err: unknown) => {
          if (statusOf(err) === 404) return undefined;
          throw failed(`reading PV ${pvName}`, err);
        }),
        this.attachmentsOn(pvName, node),
      ]);
      if (!wire) return { pv: undefined, attachments: [] };
      const modes = wire.spec?.accessModes ?? [];
      const csi = wire.spec?.csi;
      return {
        pv: {
          name: pvName,
          csi: csi ? { driver: csi.driver, volumeHandle: csi.volumeHandle } : undefined,
          multiAttach: modes.includes('ReadWriteMany') || modes.includes('ReadOnlyMany'),
        },
        attachments,
      };
    };
    const [volumesInUse, { pv, attachments }] = await Promise.all([readNode(), readVolume()]);
    return { pv, volumesInUse, attachments };
  }

  private async attachmentsOn(pv: string, node: string): Promise<string[]> {
    const list = await kubeCall('listing VolumeAttachments', () =>
      this.storage.listVolumeAttachment({}, this.deadline),
    );
    return list.items
      .filter((va) => va.spec.source.persistentVolumeName === pv && va.spec.nodeName === node)
      .map((va) => va.metadata?.name ?? '');
  }

  /** Until no VolumeAttachment of `pv` is left on `node` (ControllerUnpublish done, finalizer gone). */
  private async waitDetached(pv: string, node: string): Promise<void> {
    const deadline = performance.now() + DETACH_WAIT_MS;
    while ((await this.attachmentsOn(pv, node)).length > 0) {
      if (performance.now() > deadline)
        throw new KubeApiError(`waiting for PV ${pv} to detach from node ${node}`, undefined, {
          cause: new Error(`still attached after ${DETACH_WAIT_MS / 1000} s`),
        });
      await sleep(250);
    }
  }

  /** Creates the replacement unless a live pod other than `lostPod` exists; returns its name. */
  async createReplacement(
    sm: ShareManager,
    lostPod: string,
    avoid: NodeAvoidances,
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
