/**
 * Reconciling one ShareManager (pure): snapshot in, actions out. Level-based: the same
 * snapshot always gives the same actions, and running them twice is harmless.
 *
 * Triggers: any change of the ShareManager, its Lease or its pods; a requeue after a
 * pending pod request times out.
 *
 * Steps, each skipped with a reason when it does not apply:
 *  1. spec invalid (cross-field rules, see share-manager-spec.ts) -> status Error with the
 *     message; nothing else is touched.
 *  2. the Lease is missing -> create it (labelled, owned by the ShareManager).
 *  3. the Service is not known to exist -> ensure it. The share's endpoints: the
 *     manager's own EndpointSlice made what share-endpoints.ts says (the live pods with
 *     an address), or deleted when no pod may be published. A selector on the Service (a
 *     previous release's, or a hand edit) is removed only once that slice is in place, so
 *     an upgrade never leaves the Service without endpoints; then the slices Kubernetes'
 *     controller wrote for that selector are deleted (it never updates them again), and
 *     the v1 Endpoints its Endpoints controller wrote (mirrored into a slice once the
 *     selector is gone, and as stale).
 *  4. the Lease (not delinquent) names a pod of this ShareManager that the kubelet reported
 *     ended (phase Succeeded/Failed, no container running) -> free the lease by CAS, so the
 *     replacement's agent acquires at once instead of after D, and no manager ever judges
 *     it stale. This is what follows an API outage longer than T: every agent fenced, as
 *     it must, and its pod ended; it is not a failure of the node. NB: never for a pod that
 *     is merely deleted or gone from the cache (a force-deleted pod's containers may still
 *     run), nor for a pod still running: its name in the Lease is the evidence.
 *  5. a failover is in progress (Lease delinquent) -> pods belong to the failover.
 *  6. finished pods (Succeeded/Failed: restartPolicy Never, so an ended incarnation) -> delete,
 *     except the pod the Lease still names: it is deleted once the lease is freed or moved.
 *  7. no live pod and no pod request outstanding -> claim the creation (a CAS on the
 *     status: `status.podRequest`), then create the pod. With several managers exactly
 *     one claim wins; a claim whose pod never appears is retried after a timeout measured
 *     from when THIS manager first saw it. NB: not while the storage-fencing gate holds
 *     the share (its StorageFencing condition says AwaitingNodeDown and the Lease, not
 *     delinquent, still names a holder the kubelet has not reported ended): that holder's
 *     node may be frozen on storage that cannot fence it, so no pod starts behind the
 *     gate's back, even from a manager that holds no waiting failover (restarted, new)
 *     and even when the holder pod was deleted meanwhile (Kubernetes' eviction after the
 *     default 300 s unreachable toleration). It lifts when the lease is marked (the gate
 *     said proceed), freed or taken over, or the pod is reported ended (step 4).
 *  8. status (state, node, pod, leaseHolder, export) -> written only when it differs.
 *     `export` (how to mount: ClusterIP, port 2049, the mount path, mount options) is
 *     published for the shipped NFS server once the Service's ClusterIP is known, and
 *     removed when the ShareManager names its own server (we do not know its protocol).
 *  9. the `Fencing` condition -> True for a fence that stops the server; False (reason
 *     FenceDisabled, plus a Warning event once per change) for an explicit
 *     `spec.fence.action: none`, whose server keeps running after its agent lost the
 *     lease until the kubelet's liveness backstop stops it. The `Scheduled` condition ->
 *     the share's pod as the scheduler sees it: False with the scheduler's reason and
 *     words (a backing claim that does not exist, no node that fits) and a Warning event
 *     (Unschedulable) once per change; True again once the pod has a node. Written only
 *     once scheduling failed: a healthy share costs no status write for it. The
 *     `ServedOnPromises` condition -> the holder's last period on witness promises, from
 *     the Lease, with a Normal event once per period.
 * 10. `spec.consumer` -> its PersistentVolume and claim (decide-consumer.ts): created,
 *     repaired, or, once the field is removed or the ShareManager is being deleted,
 *     deleted before the finalizer goes (also while deleting, and with a spec in Error
 *     only then: an invalid spec touches nothing).
 *
 * Not guaranteed: at most one live pod at every instant (a claim retried after its
 * timeout may race a very slow creator); the lease gate still lets only one serve.
 */
import type { V1EndpointSlice, V1Pod, V1Service } from '@kubernetes/client-node';
import type { LeaseRecord } from '../../lib/lease-record.ts';
import { type ExportStatus, exportStatus } from '../share-model/nfs-server-preset.ts';
import { ANNOTATION_POD_REQUEST, isLive } from '../share-model/pod-spec.ts';
import type {
  FenceAction,
  ResolvedSpec,
  ShareManager,
  ShareManagerState,
  ShareManagerStatus,
} from '../share-model/share-manager-spec.ts';
import { type ConsumerAction, type ConsumerObjects, decideConsumer } from './decide-consumer.ts';
import { decideEndpoints, type EndpointsAction } from './share-endpoints.ts';

export interface ShareManagerSnapshot {
  sm: ShareManager;
  resolved: ResolvedSpec;
  /** undefined when the lease informer has not synced yet. */
  lease: LeaseRecord | undefined | 'unknown';
  /** The share's own Service (isOwnService) as the cache has it; undefined: missing or taken. */
  service: V1Service | undefined;
  /** What of that Service differs from what the share needs (serviceDrift); [] = nothing. */
  serviceDrift: readonly string[];
  /** The manager's EndpointSlice of the share (isOwnEndpointSlice) as the cache has it. */
  endpointSlice: V1EndpointSlice | undefined;
  /** Slices Kubernetes' controller wrote for the share's Service while it had a selector (isKubernetesSliceOf). */
  kubernetesSlices?: readonly V1EndpointSlice[];
  /** Whether a slice mirrors the v1 Endpoints Kubernetes wrote for that selector (isMirroredLegacySliceOf). */
  legacyEndpointsMirrored?: boolean;
  pods: readonly V1Pod[];
  now: number;
  /** When this manager first saw the current status.podRequest (monotonic). */
  podRequestSeenAt: number | undefined;
  podCreateTimeoutMs: number;
  /** A failover machine of this manager is not idle. */
  failoverRunning: boolean;
  newRequestId: string;
  /** The consumer PV and claims (decide-consumer.ts); undefined: not needed (no spec.consumer, no finalizer). */
  consumer?: ConsumerObjects;
}

export type StatusFields = Pick<
  ShareManagerStatus,
  'state' | 'message' | 'node' | 'pod' | 'leaseHolder' | 'observedGeneration'
> & {
  /** The mount information; null removes it (a merge patch deletes a null field). */
  export?: ExportStatus | null;
};

export type ReconcileAction =
  | { kind: 'setStatus'; status: StatusFields }
  | { kind: 'createLease'; durationSeconds: number }
  | { kind: 'ensureService' }
  /** Put back the drifted `fields` of the share's own Service (`service`: the cached version, for the CAS). */
  | { kind: 'repairService'; service: V1Service; fields: string[] }
  | { kind: 'deletePod'; name: string; uid: string; reason: string }
  /** CAS on `lease` (exactly this version): holder emptied, transitions kept. */
  | { kind: 'releaseLease'; lease: LeaseRecord; pod: string; phase: string }
  | { kind: 'claimPodCreation'; requestId: string }
  /** Set a condition (Fencing, Scheduled, ServedOnPromises); `event`: also an event with its message. */
  | {
      kind: 'setCondition';
      condition: ShareCondition;
      event?: { type: 'Normal' | 'Warning'; reason: 'FenceDisabled' | 'Unschedulable' | 'ServedOnPromises' };
    }
  | { kind: 'requeueAfter'; ms: number; reason: string }
  | EndpointsAction
  | ConsumerAction;

export interface ShareCondition {
  type: 'Fencing' | 'Scheduled' | 'ServedOnPromises';
  status: 'True' | 'False';
  reason: string;
  message: string;
}

export interface FencingCondition extends ShareCondition {
  type: 'Fencing';
}

/** What the Fencing condition says for a fence action (step 9). */
export function fencingCondition(action: FenceAction): FencingCondition {
  if (action === 'none') {
    return {
      type: 'Fencing',
      status: 'False',
      reason: 'FenceDisabled',
      message:
        'spec.fence.action is none: when the agent loses the lease, the server keeps running until the kubelet stops it (liveness probe on the agent, about T + 2 s later; never while the node is down), so it may serve beside its replacement. Remove spec.fence for the default pod fence.',
    };
  }
  const what: Record<Exclude<FenceAction, 'none'>, string> = {
    pod: 'every process of the pod but the agent',
    signal: 'the processes named by spec.fence.process',
    command: 'spec.fence.command',
  };
  return {
    type: 'Fencing',
    status: 'True',
    reason: `Fence${action[0]?.toUpperCase()}${action.slice(1)}`,
    message: `the agent stops ${what[action]} when it can no longer prove it holds the lease; the kubelet's liveness probe on the agent backs it up`,
  };
}

/**
 * The kubelet reported this pod ended: a terminal phase and no container (init, sidecar,
 * main) reported running. NB: the phase alone is not enough: the pod garbage collector
 * sets Failed on pods of a vanished node without knowing whether their processes run,
 * and leaves the container statuses as last reported (running).
 */
export function endedByKubelet(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  if (phase !== 'Succeeded' && phase !== 'Failed') return false;
  const containers = [
    ...(pod.status?.initContainerStatuses ?? []),
    ...(pod.status?.containerStatuses ?? []),
    ...(pod.status?.ephemeralContainerStatuses ?? []),
  ];
  return !containers.some((c) => c.state?.running);
}

export function decideShareManager(s: ShareManagerSnapshot): ReconcileAction[] {
  const generation = s.sm.metadata.generation;
  if (s.sm.metadata.deletionTimestamp)
    return [
      ...consumerActions(s, true),
      ...statusIfChanged(s.sm, { state: 'Stopped', observedGeneration: generation }),
    ];
  if (!s.resolved.ok) {
    return statusIfChanged(s.sm, {
      state: 'Error',
      message: summariseProblems(s.resolved.message),
      observedGeneration: generation,
    });
  }
  if (s.lease === 'unknown') return [];
  const actions: ReconcileAction[] = [];
  if (s.lease === undefined) {
    actions.push({ kind: 'createLease', durationSeconds: s.resolved.timings.leaseDurationMs / 1000 });
  }
  if (!s.service) actions.push({ kind: 'ensureService' });
  const endpoints = decideEndpoints(s.sm, s.pods, s.endpointSlice);
  if (endpoints) actions.push(endpoints);
  // The selector goes once the manager's slice is in place (this pass writes none).
  const drift = s.serviceDrift.filter((f) => f !== 'spec.selector' || endpoints === undefined);
  if (s.service && drift.length > 0)
    actions.push({ kind: 'repairService', service: s.service, fields: drift });
  // Once the selector is gone, Kubernetes' controllers leave what they wrote as it was: stale.
  if (s.service && !s.serviceDrift.includes('spec.selector') && endpoints === undefined) {
    for (const slice of s.kubernetesSlices ?? []) actions.push({ kind: 'deleteEndpoints', current: slice });
    if (s.legacyEndpointsMirrored)
      actions.push({
        kind: 'deleteLegacyEndpoints',
        namespace: s.sm.metadata.namespace ?? '',
        name: s.sm.metadata.name ?? '',
      });
  }

  // The pod the (non-delinquent) Lease names; its deletion waits for the lease to be freed.
  const holding = s.lease && !s.lease.delinquentSince ? s.lease.holder : '';
  const release = releaseOfEndedHolder(s.lease, s.pods);
  if (release) actions.push(release);

  const failingOver = s.failoverRunning || Boolean(s.lease?.delinquentSince);
  const live = s.pods.filter(isLive);
  if (!failingOver) {
    for (const pod of s.pods) {
      const phase = pod.status?.phase;
      const ended = phase === 'Succeeded' || phase === 'Failed';
      if (ended && !pod.metadata?.deletionTimestamp && pod.metadata?.name !== holding) {
        actions.push({
          kind: 'deletePod',
          name: pod.metadata?.name ?? '',
          uid: pod.metadata?.uid ?? '',
          reason: `pod ${phase}`,
        });
      }
    }
    if (live.length === 0 && !storageGateHolds(s)) actions.push(...podCreation(s));
  }
  actions.push(...statusIfChanged(s.sm, desiredStatus(s, live, failingOver)));
  const fencing = fencingCondition(s.resolved.fenceAction);
  if (conditionDiffers(s.sm, fencing))
    actions.push({
      kind: 'setCondition',
      condition: fencing,
      ...(fencing.status === 'False' ? { event: { type: 'Warning', reason: 'FenceDisabled' } as const } : {}),
    });
  // Scheduled is written only once scheduling failed (then kept, True again once the pod
  // has a node): a healthy share costs no status write for it.
  const scheduled = scheduledCondition(shownPod(s, live));
  const saidBefore = s.sm.status?.conditions?.some((c) => c.type === 'Scheduled');
  if (scheduled && (scheduled.status === 'False' || saidBefore) && conditionDiffers(s.sm, scheduled))
    actions.push({
      kind: 'setCondition',
      condition: scheduled,
      ...(scheduled.status === 'False'
        ? { event: { type: 'Warning', reason: 'Unschedulable' } as const }
        : {}),
    });
  const served = servedOnPromisesCondition(s.lease);
  if (served && conditionDiffers(s.sm, served))
    actions.push({
      kind: 'setCondition',
      condition: served,
      event: { type: 'Normal', reason: 'ServedOnPromises' },
    });
  actions.push(...consumerActions(s, false));
  return actions;
}

/** Step 10 (decide-consumer.ts); nothing without the consumer caches or with a spec in Error. */
function consumerActions(s: ShareManagerSnapshot, deleting: boolean): ConsumerAction[] {
  if (!s.consumer || (!deleting && !s.resolved.ok)) return [];
  const ip = s.service?.spec?.clusterIP;
  const nfs = s.resolved.ok && s.resolved.nfsDefault;
  return decideConsumer({
    sm: s.sm,
    deleting,
    wanted: s.resolved.ok ? s.resolved.consumer : undefined,
    export:
      nfs && s.resolved.ok && ip && ip !== 'None'
        ? exportStatus(ip, s.resolved.mountPath, s.sm.spec.nfs)
        : undefined,
    objects: s.consumer,
    now: s.now,
  });
}

/** Step 7's NB: the storage-fencing gate waits for this share's holder node. */
function storageGateHolds(s: ShareManagerSnapshot): boolean {
  const lease = s.lease === 'unknown' ? undefined : s.lease;
  if (!lease || lease.delinquentSince || lease.holder === '') return false;
  const gate = s.sm.status?.conditions?.find((c) => c.type === 'StorageFencing');
  if (gate?.reason !== 'AwaitingNodeDown') return false;
  const holder = s.pods.find((p) => p.metadata?.name === lease.holder);
  return !(holder && endedByKubelet(holder));
}

/** Step 4: the release of a lease whose holder pod ended, if that is the case. */
function releaseOfEndedHolder(
  lease: LeaseRecord | undefined,
  pods: readonly V1Pod[],
): ReconcileAction | undefined {
  if (!lease || lease.delinquentSince || lease.holder === '') return undefined;
  const pod = pods.find((p) => p.metadata?.name === lease.holder);
  if (!pod || !endedByKubelet(pod)) return undefined;
  return { kind: 'releaseLease', lease, pod: lease.holder, phase: pod.status?.phase ?? '' };
}

function podCreation(s: ShareManagerSnapshot): ReconcileAction[] {
  const request = s.sm.status?.podRequest;
  const fulfilled =
    request && s.pods.some((p) => p.metadata?.annotations?.[ANNOTATION_POD_REQUEST] === request.id);
  if (request && !fulfilled) {
    const seenAt = s.podRequestSeenAt ?? s.now;
    const waited = s.now - seenAt;
    if (waited < s.podCreateTimeoutMs) {
      return [
        {
          kind: 'requeueAfter',
          ms: s.podCreateTimeoutMs - waited,
          reason: `pod request ${request.id} by ${request.by} pending`,
        },
      ];
    }
  }
  return [{ kind: 'claimPodCreation', requestId: s.newRequestId }];
}

function conditionDiffers(sm: ShareManager, want: ShareCondition): boolean {
  const current = sm.status?.conditions?.find((c) => c.type === want.type);
  return (
    current?.status !== want.status || current.reason !== want.reason || current.message !== want.message
  );
}

/** The pod the status describes: the holder's, else the first live one. */
function shownPod(s: ShareManagerSnapshot, live: V1Pod[]): V1Pod | undefined {
  const lease = s.lease === 'unknown' ? undefined : s.lease;
  const holder = lease?.holder ?? '';
  return live.find((p) => p.metadata?.name === holder) ?? live[0];
}

/**
 * The ServedOnPromises condition (step 9): the holder's last period of serving on witness
 * promises, as its agent wrote it into the Lease at its first renewal after it
 * (`leasehold.dev/served-on-promises: <from>/<to>`); undefined when it never did. Written
 * after the fact: while the API is away nobody can write it.
 */
export function servedOnPromisesCondition(
  lease: LeaseRecord | 'unknown' | undefined,
): ShareCondition | undefined {
  if (lease === undefined || lease === 'unknown' || !lease.servedOnPromises) return undefined;
  const [from = '', to = ''] = lease.servedOnPromises.split('/');
  const seconds = (Date.parse(to) - Date.parse(from)) / 1000;
  const length = Number.isFinite(seconds) && seconds >= 0 ? ` (${seconds.toFixed(1)} s)` : '';
  return {
    type: 'ServedOnPromises',
    status: 'True',
    reason: 'ApiUnreachable',
    message:
      `holder ${lease.holder} served on witness promises from ${from} to ${to}${length}: the API server was unreachable for it and for a majority of its witnesses`.slice(
        0,
        1024,
      ),
  };
}

/**
 * The Scheduled condition for the share's pod (step 9): the scheduler's PodScheduled
 * verdict in its own words; undefined while there is no pod or the scheduler said nothing.
 */
export function scheduledCondition(pod: V1Pod | undefined): ShareCondition | undefined {
  if (!pod) return undefined;
  const name = pod.metadata?.name ?? '';
  if (pod.spec?.nodeName)
    return {
      type: 'Scheduled',
      status: 'True',
      reason: 'Scheduled',
      message: `pod ${name} on node ${pod.spec.nodeName}`,
    };
  const said = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
  if (said?.status !== 'False' || !said.message) return undefined;
  return {
    type: 'Scheduled',
    status: 'False',
    reason: said.reason || 'Unschedulable',
    message: `pod ${name}: ${said.message}`.slice(0, 1024),
  };
}

function desiredStatus(s: ShareManagerSnapshot, live: V1Pod[], failingOver: boolean): StatusFields {
  const lease = s.lease === 'unknown' ? undefined : s.lease;
  const holder = lease?.holder ?? '';
  const holderPod = live.find((p) => p.metadata?.name === holder);
  const pod = shownPod(s, live);
  let state: ShareManagerState;
  if (failingOver) state = 'FailingOver';
  else if (holderPod) state = 'Running';
  else if (pod?.spec?.nodeName) state = 'Starting';
  else state = 'Pending';
  return {
    state,
    message: state === 'Pending' ? pendingReason(pod) : '',
    node: pod?.spec?.nodeName ?? '',
    pod: pod?.metadata?.name ?? '',
    leaseHolder: holder,
    observedGeneration: s.sm.metadata.generation,
    ...exportField(s),
  };
}

/**
 * Why a share is Pending, in the scheduler's words (its PodScheduled=False condition:
 * a backing claim that does not exist, no node that fits), so that a missing claim is
 * not a silent Pending; '' while the pod is not created or the scheduler said nothing.
 */
function pendingReason(pod: V1Pod | undefined): string {
  const scheduled = pod?.status?.conditions?.find((c) => c.type === 'PodScheduled');
  if (!pod || scheduled?.status !== 'False' || !scheduled.message) return '';
  return `pod ${pod.metadata?.name}: ${scheduled.reason ?? 'Unschedulable'}: ${scheduled.message}`.slice(
    0,
    1024,
  );
}

/** status.export: set for the NFS default once the ClusterIP is known; null to remove it. */
function exportField(s: ShareManagerSnapshot): Pick<StatusFields, 'export'> {
  if (!s.resolved.ok) return {};
  const ip = s.service?.spec?.clusterIP;
  if (s.resolved.nfsDefault) {
    // Not known yet (the Service is being created): leave what is there.
    if (!ip || ip === 'None') return {};
    return { export: exportStatus(ip, s.resolved.mountPath, s.sm.spec.nfs) };
  }
  return s.sm.status?.export ? { export: null } : {};
}

function statusIfChanged(sm: ShareManager, desired: StatusFields): ReconcileAction[] {
  const current: StatusFields = sm.status ?? {};
  const differs = (Object.keys(desired) as (keyof StatusFields)[]).some((key) => {
    const want = desired[key];
    if (want === undefined) return false;
    if (key === 'export') return JSON.stringify(current.export ?? null) !== JSON.stringify(want);
    return (current[key] ?? '') !== want;
  });
  return differs ? [{ kind: 'setStatus', status: desired }] : [];
}

/** The longest status.message written: a whole status must stay far below etcd's 1.5 MiB request limit. */
export const MAX_STATUS_MESSAGE = 4096;

/**
 * A problem list ("a; b; c") cut to MAX_STATUS_MESSAGE at a problem's end, saying how
 * many were left out, so that 80,000 bad entries still give a status that can be written
 * (a longer one was refused by the API server and the status said nothing).
 */
export function summariseProblems(message: string): string {
  if (message.length <= MAX_STATUS_MESSAGE) return message;
  const problems = message.split('; ');
  const kept: string[] = [];
  let length = 0;
  for (const p of problems) {
    const piece = p.length > MAX_STATUS_MESSAGE / 2 ? `${p.slice(0, MAX_STATUS_MESSAGE / 2)}…` : p;
    if (length + piece.length + 2 > MAX_STATUS_MESSAGE - 80) break;
    kept.push(piece);
    length += piece.length + 2;
  }
  const left = problems.length - kept.length;
  return `${kept.join('; ')}; … and ${left} more problem${left === 1 ? '' : 's'} (${problems.length} in all)`;
}
