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
 *  3. the Service is not known to exist -> ensure it.
 *  4. a failover is in progress (Lease delinquent) -> pods belong to the failover.
 *  5. finished pods (Succeeded/Failed: restartPolicy Never, so an ended incarnation) -> delete.
 *  6. no live pod and no pod request outstanding -> claim the creation (a CAS on the
 *     status: `status.podRequest`), then create the pod. With several managers exactly
 *     one claim wins; a claim whose pod never appears is retried after a timeout measured
 *     from when THIS manager first saw it.
 *  7. status (state, node, pod, leaseHolder) -> written only when it differs.
 *
 * Not guaranteed: at most one live pod at every instant (a claim retried after its
 * timeout may race a very slow creator); the lease gate still lets only one serve.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { LeaseRecord } from '../lib/lease-record.ts';
import { ANNOTATION_POD_REQUEST } from './pod-spec.ts';
import type {
  ResolvedSpec,
  ShareManager,
  ShareManagerState,
  ShareManagerStatus,
} from './share-manager-spec.ts';

export interface ShareManagerSnapshot {
  sm: ShareManager;
  resolved: ResolvedSpec;
  /** undefined when the lease informer has not synced yet. */
  lease: LeaseRecord | undefined | 'unknown';
  serviceKnown: boolean;
  pods: readonly V1Pod[];
  now: number;
  /** When this manager first saw the current status.podRequest (monotonic). */
  podRequestSeenAt: number | undefined;
  podCreateTimeoutMs: number;
  /** A failover machine of this manager is not idle. */
  failoverRunning: boolean;
  newRequestId: string;
}

export type StatusFields = Pick<
  ShareManagerStatus,
  'state' | 'message' | 'node' | 'pod' | 'leaseHolder' | 'observedGeneration'
>;

export type ReconcileAction =
  | { kind: 'setStatus'; status: StatusFields }
  | { kind: 'createLease'; durationSeconds: number }
  | { kind: 'ensureService' }
  | { kind: 'deletePod'; name: string; uid: string; reason: string }
  | { kind: 'claimPodCreation'; requestId: string }
  | { kind: 'requeueAfter'; ms: number; reason: string };

export function isLive(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return !pod.metadata?.deletionTimestamp && phase !== 'Succeeded' && phase !== 'Failed';
}

export function decideShareManager(s: ShareManagerSnapshot): ReconcileAction[] {
  const generation = s.sm.metadata.generation;
  if (s.sm.metadata.deletionTimestamp)
    return statusIfChanged(s.sm, { state: 'Stopped', observedGeneration: generation });
  if (!s.resolved.ok) {
    return statusIfChanged(s.sm, {
      state: 'Error',
      message: s.resolved.message,
      observedGeneration: generation,
    });
  }
  if (s.lease === 'unknown') return [];
  const actions: ReconcileAction[] = [];
  if (s.lease === undefined) {
    actions.push({ kind: 'createLease', durationSeconds: s.resolved.timings.leaseDurationMs / 1000 });
  }
  if (!s.serviceKnown) actions.push({ kind: 'ensureService' });

  const failingOver = s.failoverRunning || Boolean(s.lease?.delinquentSince);
  const live = s.pods.filter(isLive);
  if (!failingOver) {
    for (const pod of s.pods) {
      const phase = pod.status?.phase;
      if (!pod.metadata?.deletionTimestamp && (phase === 'Succeeded' || phase === 'Failed')) {
        actions.push({
          kind: 'deletePod',
          name: pod.metadata?.name ?? '',
          uid: pod.metadata?.uid ?? '',
          reason: `pod ${phase}`,
        });
      }
    }
    if (live.length === 0) actions.push(...podCreation(s));
  }
  actions.push(...statusIfChanged(s.sm, desiredStatus(s, live, failingOver)));
  return actions;
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

function desiredStatus(s: ShareManagerSnapshot, live: V1Pod[], failingOver: boolean): StatusFields {
  const lease = s.lease === 'unknown' ? undefined : s.lease;
  const holder = lease?.holder ?? '';
  const holderPod = live.find((p) => p.metadata?.name === holder);
  const pod = holderPod ?? live[0];
  let state: ShareManagerState;
  if (failingOver) state = 'FailingOver';
  else if (holderPod) state = 'Running';
  else if (pod?.spec?.nodeName) state = 'Starting';
  else state = 'Pending';
  return {
    state,
    message: '',
    node: pod?.spec?.nodeName ?? '',
    pod: pod?.metadata?.name ?? '',
    leaseHolder: holder,
    observedGeneration: s.sm.metadata.generation,
  };
}

function statusIfChanged(sm: ShareManager, desired: StatusFields): ReconcileAction[] {
  const current = sm.status ?? {};
  const differs = (Object.keys(desired) as (keyof StatusFields)[]).some(
    (key) => desired[key] !== undefined && (current[key] ?? '') !== (desired[key] ?? ''),
  );
  return differs ? [{ kind: 'setStatus', status: desired }] : [];
}
