/**
 * What a failover tells the world: the LeaseExpired event and status FailingOver when it
 * starts, the FailoverCompleted event with phase timings, status Running and the
 * histogram observations when the new pod's agent acquired. Best effort: a failed
 * status write or event is logged and never blocks the failover itself.
 *
 * The storage-fencing gate's verdict (storage-fencing.ts) is the StorageFencing condition,
 * written only when it says something new (so N managers waiting on the same node and
 * each recheck write once, not every time), with an event for the False reasons.
 * NB: conditions are a list that a merge patch replaces whole; the other conditions are
 * taken from the cached ShareManager, so a Fencing condition the reconciler wrote a
 * moment before can be lost, and the reconciler writes it again on its next pass.
 *
 * After a takeover the status keeps the phase timestamps the first owner already wrote
 * (status.lastFailover tells when the failover began, not when we joined it); the
 * histograms only ever get spans measured on this manager's own monotonic clock.
 */
import type { Logger } from '../../lib/logger.ts';
import type { EventRecorder } from '../events.ts';
import type { FailoverPhaseName, ManagerMetrics } from '../manager-metrics.ts';
import type { LastFailover, ShareManager } from '../share-model/share-manager-spec.ts';
import type { StatusWriter } from '../share-model/status-writer.ts';
import { conditionChanged, type FencingCondition } from './storage-fencing.ts';

export interface Instant {
  mono: number;
  wall: Date;
}

export interface FailoverTimes {
  detected?: Instant;
  marked?: Instant;
  podDeleted?: Instant;
  detached?: Instant;
  replacementCreated?: Instant;
  acquired?: Instant;
  /** A replacement was lost with its node; the steps after it are this round's. */
  replacementLost?: Instant;
}

export interface ReportContext {
  sm: ShareManager | undefined;
  lostPod: string;
  lostNode: string;
  replacementPod: string | undefined;
  times: FailoverTimes;
  /** The previous owner's record of this failover (after a takeover). */
  inherited?: LastFailover | undefined;
  /** What the volume handoff did (volume-handoff.ts describeHandoff). */
  handoff?: string | undefined;
  /** status.lastFailover.reason: LeaseExpired, or ReplacementLost once a replacement was lost with its node. */
  reason?: 'LeaseExpired' | 'ReplacementLost';
  durationMs: number;
  identity: string;
  status: StatusWriter;
  events: EventRecorder;
  metrics: ManagerMetrics;
  log: Logger;
}

/**
 * The record a previous owner wrote about the same failover (same lost pod, not
 * completed), whose timestamps a taker keeps; undefined when `previous` is about
 * another (or a finished) failover.
 */
export function inheritedRecord(
  previous: LastFailover | undefined,
  lostPod: string,
): LastFailover | undefined {
  if (!previous || lostPod === '' || previous.lostPod !== lostPod || previous.completedAt) return undefined;
  return previous;
}

export function lastFailover(c: ReportContext): LastFailover {
  const iso = (i: Instant | undefined) => i?.wall.toISOString();
  const first = c.inherited;
  const record: LastFailover = {
    reason: c.reason ?? 'LeaseExpired',
    lostNode: c.lostNode,
    lostPod: c.lostPod,
    by: c.identity,
    detectedAt: first?.detectedAt ?? iso(c.times.detected),
    markedAt: first?.markedAt ?? iso(c.times.marked),
    podDeletedAt: first?.podDeletedAt ?? iso(c.times.podDeleted),
    detachedAt: first?.detachedAt ?? iso(c.times.detached),
    replacementCreatedAt: first?.replacementCreatedAt ?? iso(c.times.replacementCreated),
    completedAt: iso(c.times.acquired),
    replacementPod: c.replacementPod,
    volumeHandoff: c.handoff ?? first?.volumeHandoff,
  };
  return Object.fromEntries(
    Object.entries(record).filter(([, v]) => v !== undefined),
  ) as unknown as LastFailover;
}

const RECORD_FIELDS = [
  'detectedAt',
  'markedAt',
  'podDeletedAt',
  'detachedAt',
  'replacementCreatedAt',
  'completedAt',
  'replacementPod',
  'volumeHandoff',
] as const;

/**
 * lastFailover as a merge patch: the fields this failover has not reached yet are null,
 * so none of the previous failover's values survives into this one's record.
 */
export function lastFailoverPatch(c: ReportContext): LastFailover {
  const clears = Object.fromEntries(RECORD_FIELDS.map((f) => [f, null]));
  return { ...clears, ...lastFailover(c) } as unknown as LastFailover;
}

/** Seconds between two instants, on the monotonic clock. */
function span(from: Instant | undefined, to: Instant | undefined): number | undefined {
  return from && to ? (to.mono - from.mono) / 1000 : undefined;
}

export function phaseDurations(t: FailoverTimes): Partial<Record<FailoverPhaseName, number>> {
  const out: Partial<Record<FailoverPhaseName, number>> = {
    mark: span(t.detected, t.marked),
    pod_delete: span(t.replacementLost ?? t.marked, t.podDeleted),
    detach: span(t.podDeleted, t.detached),
    replace: span(t.detached, t.replacementCreated),
    acquire: span(t.replacementCreated, t.acquired),
    total: span(t.detected, t.acquired),
  };
  for (const key of Object.keys(out) as FailoverPhaseName[]) if (out[key] === undefined) delete out[key];
  return out;
}

export async function announceFailover(
  c: ReportContext,
  takeover: boolean,
  observeOnly = false,
): Promise<void> {
  const sm = c.sm;
  if (!sm) return;
  const who = `pod ${c.lostPod || '(none)'} on node ${c.lostNode || '(unknown)'}`;
  if (observeOnly) {
    const message = `observe-only: lease of ${who} unchanged for ${c.durationMs / 1000}s by ${c.identity}'s observation; would mark it delinquent, force-delete the pod, hand its volume off the node and create a replacement`;
    c.log.warn({ sm: sm.metadata.name, lostPod: c.lostPod, lostNode: c.lostNode }, message);
    await c.events.record(sm, 'Warning', 'WouldFailOver', message);
    return;
  }
  const message = takeover
    ? `${c.identity} took over the failover of ${who}: its previous owner made no visible progress`
    : `lease of ${who} unchanged for ${c.durationMs / 1000}s by ${c.identity}'s observation: failing over`;
  const namespace = sm.metadata.namespace ?? '';
  const name = sm.metadata.name ?? '';
  await Promise.all([
    c.events.record(sm, 'Warning', takeover ? 'FailoverTakenOver' : 'LeaseExpired', message),
    c.status
      .patch(namespace, name, { state: 'FailingOver', message, lastFailover: lastFailoverPatch(c) })
      .catch((err: unknown) =>
        c.log.warn({ err, sm: `${namespace}/${name}` }, 'writing status FailingOver failed'),
      ),
  ]);
}

/**
 * A replacement lost with its node before it acquired (replacement-lost.ts): event
 * ReplacementLost, status FailingOver with lastFailover naming it as the lost pod.
 */
export async function reportReplacementLost(
  c: ReportContext,
  verdict: { node: string; silentMs: number; thresholdMs: number },
  earlierNodes: readonly string[],
): Promise<void> {
  const sm = c.sm;
  if (!sm) return;
  const avoided = [verdict.node, ...earlierNodes].join(', ');
  const message = `replacement ${c.lostPod || '(none)'} on node ${verdict.node} did not acquire the lease and that node's heartbeat has been silent ${(verdict.silentMs / 1000).toFixed(1)}s (lost after ${(verdict.thresholdMs / 1000).toFixed(1)}s) by ${c.identity}'s observation: force-deleting it, handing the volume off ${verdict.node} and creating another away from ${avoided}`;
  c.log.warn({ sm: sm.metadata.name, lostPod: c.lostPod, lostNode: verdict.node, earlierNodes }, message);
  const namespace = sm.metadata.namespace ?? '';
  const name = sm.metadata.name ?? '';
  await Promise.all([
    c.events.record(sm, 'Warning', 'ReplacementLost', message),
    c.status
      .patch(namespace, name, { state: 'FailingOver', message, lastFailover: lastFailoverPatch(c) })
      .catch((err: unknown) =>
        c.log.warn(
          { err, sm: `${namespace}/${name}` },
          'writing status FailingOver (replacement lost) failed',
        ),
      ),
  ]);
}

/** The volume handoff's outcome: event VolumeHandoff on the ShareManager, status.lastFailover.volumeHandoff. */
export async function reportHandoff(c: ReportContext): Promise<void> {
  const sm = c.sm;
  if (!sm || !c.handoff) return;
  const namespace = sm.metadata.namespace ?? '';
  const name = sm.metadata.name ?? '';
  await Promise.all([
    c.events.record(sm, 'Normal', 'VolumeHandoff', c.handoff),
    c.status
      .patch(namespace, name, { lastFailover: lastFailoverPatch(c) })
      .catch((err: unknown) =>
        c.log.warn({ err, sm: `${namespace}/${name}` }, 'writing status.lastFailover.volumeHandoff failed'),
      ),
  ]);
}

export async function completeFailover(c: ReportContext): Promise<void> {
  const durations = phaseDurations(c.times);
  for (const [phase, seconds] of Object.entries(durations))
    c.metrics.phaseSeconds.observe({ phase }, seconds);
  const sm = c.sm;
  const summary = Object.entries(durations)
    .map(([phase, s]) => `${phase} ${s.toFixed(3)}s`)
    .join(', ');
  c.log.info(
    { sm: sm?.metadata.name, lostPod: c.lostPod, replacementPod: c.replacementPod, durations },
    'failover completed',
  );
  if (!sm) return;
  const namespace = sm.metadata.namespace ?? '';
  const name = sm.metadata.name ?? '';
  const message = `pod ${c.replacementPod} holds the lease after the loss of ${c.lostPod} on ${c.lostNode || '(unknown)'}: ${summary}`;
  await Promise.all([
    c.events.record(sm, 'Normal', 'FailoverCompleted', message),
    c.status
      .patch(namespace, name, {
        state: 'Running',
        message: '',
        leaseHolder: c.replacementPod,
        lastFailover: lastFailoverPatch(c),
      })
      .catch((err: unknown) =>
        c.log.warn({ err, sm: `${namespace}/${name}` }, 'writing status Running failed'),
      ),
  ]);
}

const GATE_EVENT_TYPE: Record<FencingCondition['reason'], 'Normal' | 'Warning' | undefined> = {
  StorageFences: undefined,
  AwaitingNodeDown: 'Warning',
  LeaseOnly: 'Warning',
  NodeDown: 'Normal',
  HolderReturned: 'Normal',
};

/** The StorageFencing condition (and, for the False reasons, an event of that reason) when it changed. */
export async function reportStorageGate(
  c: ReportContext,
  condition: FencingCondition,
  wallNow: Date,
): Promise<void> {
  const sm = c.sm;
  if (!sm) return;
  const conditions = withStorageFencing(sm.status?.conditions ?? [], condition, wallNow);
  if (!conditions) return;
  const namespace = sm.metadata.namespace ?? '';
  const name = sm.metadata.name ?? '';
  const reason = condition.reason;
  const type = GATE_EVENT_TYPE[reason];
  const line = { sm: `${namespace}/${name}`, reason, lostNode: c.lostNode };
  if (type === 'Warning') c.log.warn(line, condition.message);
  else c.log.info(line, condition.message);
  await Promise.all([
    type && reason !== 'StorageFences' ? c.events.record(sm, type, reason, condition.message) : undefined,
    c.status
      .patch(namespace, name, { conditions })
      .catch((err: unknown) =>
        c.log.warn({ err, sm: `${namespace}/${name}` }, 'writing the StorageFencing condition failed'),
      ),
  ]);
}

type Conditions = NonNullable<NonNullable<ShareManager['status']>['conditions']>;

/**
 * The condition list with `condition` in place of the StorageFencing one, or undefined
 * when it says nothing new. lastTransitionTime moves only when the status changes.
 */
export function withStorageFencing(
  conditions: Conditions,
  condition: FencingCondition,
  wallNow: Date,
): Conditions | undefined {
  const current = conditions.find((x) => x.type === condition.type);
  if (!conditionChanged(current, condition)) return undefined;
  const lastTransitionTime =
    current?.status === condition.status && current.lastTransitionTime
      ? current.lastTransitionTime
      : wallNow.toISOString();
  return [...conditions.filter((x) => x.type !== condition.type), { ...condition, lastTransitionTime }];
}
