/**
 * Kubernetes Events about a ShareManager (LeaseExpired, FailoverCompleted, ...), so that
 * `kubectl describe sm` tells the story. Recording is best effort: a failure is logged
 * with the object and reason, never thrown into the failover.
 */
import { randomBytes } from 'node:crypto';
import { k8s, withDeadline } from '../lib/kube-client.ts';
import type { Logger } from '../lib/logger.ts';
import { type ShareManager, SM_GROUP, SM_KIND, SM_VERSION } from './share-model/share-manager-spec.ts';

/** Kubernetes' external-provisioner's and external-resizer's reasons, on a claim of a leasehold StorageClass. */
export type ClaimEventReason =
  | 'Provisioning'
  | 'ProvisioningSucceeded'
  | 'ProvisioningFailed'
  | 'Resizing'
  | 'VolumeResizeSuccessful'
  | 'VolumeResizeFailed';

export type EventReason =
  | 'LeaseExpired'
  | 'FailoverStarted'
  | 'FailoverTakenOver'
  | 'FailoverCompleted'
  // A failover step failed several times in a row (failover/failover-driver.ts).
  | 'FailoverStepFailing'
  | 'WouldFailOver'
  | 'StormGuardActive'
  | 'InvalidSpec'
  | 'FenceDisabled'
  // A holder asked this manager, a witness that reaches the API, for a promise: its node is
  // cut off from the API alone, and its agent fences (witness/witness-server.ts).
  | 'CutOffFromApi'
  // The agent served on witness promises while the API was away (reconciliation/decide-reconcile.ts).
  | 'ServedOnPromises'
  // The share's pod cannot be scheduled (the Scheduled condition, reconciliation/decide-reconcile.ts).
  | 'Unschedulable'
  | 'LeaseReleased'
  // An upgrade removed the previous release's Service selector (reconciliation/execute-reconcile.ts).
  | 'EndpointsManaged'
  | 'OutOfServiceTaintAdded'
  | 'OutOfServiceTaintRemoved'
  | 'VolumeHandoff'
  // A replacement lost with its node before it acquired (failover/replacement-lost.ts).
  | 'ReplacementLost'
  // The storage-fencing gate (failover/storage-fencing.ts), one per StorageFencing=False reason.
  | 'AwaitingNodeDown'
  | 'LeaseOnly'
  | 'NodeDown'
  | 'HolderReturned'
  // spec.consumer's PV and claim (reconciliation/decide-consumer.ts).
  | 'ConsumerCreated'
  | 'ConsumerRepaired'
  | 'ConsumerDeleted'
  | 'ClaimTaken'
  | 'VolumeTaken'
  // A Service of the share's name that this ShareManager did not create (execute-reconcile.ts).
  | 'ServiceTaken'
  | 'ServiceAddressChanged'
  | 'ServiceRepaired'
  // A reconcile that failed several times in a row (reconciliation/share-manager-controller.ts).
  | 'ReconcileFailing'
  | 'ImmutableFieldChanged'
  // Kubernetes' external-provisioner's and external-resizer's events, on a claim of a
  // leasehold StorageClass (provisioning/decide-provisioning.ts).
  | ClaimEventReason;

/** The object an event is about. */
export interface InvolvedObject {
  apiVersion: string;
  kind: string;
  name: string;
  /** Undefined for cluster-scoped objects (their events go to `default`, as the kubelet's do). */
  namespace: string | undefined;
  uid: string | undefined;
}

export class EventRecorder {
  private readonly api: k8s.CoreV1Api;
  constructor(
    kc: k8s.KubeConfig,
    private readonly identity: string,
    private readonly nodeName: string,
    private readonly log: Logger,
    private readonly deadlineMs: number,
  ) {
    this.api = kc.makeApiClient(k8s.CoreV1Api);
  }

  /** An event about a ShareManager. */
  record(sm: ShareManager, type: 'Normal' | 'Warning', reason: EventReason, message: string): Promise<void> {
    return this.recordAbout(
      {
        apiVersion: `${SM_GROUP}/${SM_VERSION}`,
        kind: SM_KIND,
        name: sm.metadata.name ?? '',
        namespace: sm.metadata.namespace ?? 'default',
        uid: sm.metadata.uid,
      },
      type,
      reason,
      message,
    );
  }

  /** An event about any object (a Node, ...). Best effort: failures are logged. */
  async recordAbout(
    involved: InvolvedObject,
    type: 'Normal' | 'Warning',
    reason: EventReason,
    message: string,
  ): Promise<void> {
    const namespace = involved.namespace ?? 'default';
    const now = new Date();
    try {
      await this.api.createNamespacedEvent(
        {
          namespace,
          body: {
            metadata: { name: `${involved.name}.${randomBytes(6).toString('hex')}`, namespace },
            involvedObject: {
              apiVersion: involved.apiVersion,
              kind: involved.kind,
              name: involved.name,
              ...(involved.namespace ? { namespace: involved.namespace } : {}),
              uid: involved.uid,
            },
            type,
            reason,
            message,
            source: { component: 'leasehold-manager', host: this.nodeName },
            reportingComponent: 'manager.leasehold.dev',
            reportingInstance: this.identity,
            firstTimestamp: now,
            lastTimestamp: now,
            count: 1,
          },
        },
        withDeadline(this.deadlineMs),
      );
    } catch (err) {
      const object = involved.namespace ? `${involved.namespace}/${involved.name}` : involved.name;
      this.log.warn({ err, kind: involved.kind, object, reason }, 'recording an event failed');
    }
  }
}
