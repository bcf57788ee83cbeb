/**
 * `kubectl leasehold timeline SHARE` (pure): the steps of the share's last failover as
 * status.lastFailover records them (manager/failover/failover-report.ts), in the demo's
 * format and words (lib/failover-timeline.ts), then the Events on the ShareManager
 * during that failover.
 *
 * Times are seconds since the stale lease was detected: the record holds no crash time
 * (nobody observes a crash; the manager observes a lease that stopped changing). They
 * are the managers' wall-clock times, so after a takeover two managers' clocks meet in
 * one timeline (the record keeps the first owner's times: failover-report.ts). A step
 * not reached shows `?`. Events come after the steps, not between them: their times are
 * kept to the second (event-times.ts), too coarse to order them among the steps.
 */
import type { CoreV1Event } from '@kubernetes/client-node';
import {
  formatTimeline,
  RECORD_SOURCE,
  RECORDED_STEP,
  secondsSince,
  type TimelineStep,
  timelineHeading,
} from '../lib/failover-timeline.ts';
import type { LastFailover, ShareManager } from '../manager/share-model/share-manager-spec.ts';
import { byTime, eventTime, isoSeconds, timeOf } from './event-times.ts';
import { shareKey } from './share-snapshot.ts';

const at = (iso: string | undefined): Date | undefined => {
  const ms = iso ? Date.parse(iso) : Number.NaN;
  return Number.isNaN(ms) ? undefined : new Date(ms);
};

/** When the failover began: its detection, else the earliest time it recorded. */
export function failoverOrigin(lf: LastFailover): Date | undefined {
  const times = [lf.detectedAt, lf.markedAt, lf.podDeletedAt, lf.detachedAt, lf.replacementCreatedAt]
    .map(at)
    .filter((d): d is Date => d !== undefined);
  return at(lf.detectedAt) ?? times.sort((a, b) => a.getTime() - b.getTime())[0];
}

/** The recorded steps in order, seconds since `origin` (all `?` without one). */
export function recordedSteps(lf: LastFailover, origin: Date | undefined): TimelineStep[] {
  const since = (iso: string | undefined) => (origin ? secondsSince(origin, at(iso)) : undefined);
  const step = (name: string, iso: string | undefined): TimelineStep => ({
    step: name,
    seconds: since(iso),
    source: RECORD_SOURCE,
  });
  return [
    step(RECORDED_STEP.detected, lf.detectedAt),
    step(RECORDED_STEP.marked, lf.markedAt),
    step(RECORDED_STEP.podDeleted(lf.lostPod || '(none)'), lf.podDeletedAt),
    step(RECORDED_STEP.released(lf.lostNode || '(unknown)'), lf.detachedAt),
    step(RECORDED_STEP.replacementCreated(lf.replacementPod ?? 'pod'), lf.replacementCreatedAt),
    step(RECORDED_STEP.acquired, lf.completedAt),
  ];
}

/** Seconds from detection to the new holder's acquisition; undefined while it runs. */
export function failoverSeconds(lf: LastFailover): number | undefined {
  const origin = failoverOrigin(lf);
  return origin && lf.completedAt ? secondsSince(origin, at(lf.completedAt)) : undefined;
}

export function timelineLines(sm: ShareManager, events: readonly CoreV1Event[]): string[] {
  const key = shareKey(sm);
  const lf = sm.status?.lastFailover;
  if (!lf)
    return [
      `${key} has no recorded failover (no status.lastFailover): it has not failed over since it was created.`,
    ];
  const origin = failoverOrigin(lf);
  const steps = recordedSteps(lf, origin);
  const took = failoverSeconds(lf);
  const next = steps.find((s) => s.seconds === undefined);
  const lines = [
    timelineHeading(
      key,
      origin ? `the stale lease was detected, ${origin.toISOString()}` : 'its detection (no time recorded)',
      lf.by,
    ),
    formatTimeline(steps),
    `${lf.reason}: pod ${lf.lostPod || '(none)'} on node ${lf.lostNode || '(unknown)'} lost the lease; ${
      took !== undefined
        ? `${lf.replacementPod ?? 'the replacement'} acquired it ${took.toFixed(2)} s after the detection`
        : `in progress, next step not reached: ${next?.step ?? '?'}`
    }`,
  ];
  if (lf.volumeHandoff) lines.push(`volume handoff: ${lf.volumeHandoff}`);
  const from = origin ? Math.floor(origin.getTime() / 1000) * 1000 : Number.POSITIVE_INFINITY;
  const until = lf.completedAt ? (at(lf.completedAt)?.getTime() ?? 0) + 1000 : Number.POSITIVE_INFINITY;
  const during = byTime(events).filter((e) => {
    const t = timeOf(eventTime(e));
    return t >= from && t <= until;
  });
  lines.push(`Events on ${key} during the failover (times to the second, as Events keep them):`);
  if (during.length === 0) lines.push('  (none)');
  const width = Math.max(0, ...during.map((e) => (e.reason ?? '').length));
  for (const e of during)
    lines.push(
      `  ${isoSeconds(eventTime(e))}  ${(e.type ?? '').padEnd(7)}  ${(e.reason ?? '').padEnd(width)}  ${e.message ?? ''}`,
    );
  return lines;
}
