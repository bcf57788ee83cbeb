/**
 * Whether a share is served, and why not (pure): `kubectl leasehold why` and the SERVED
 * column of `status`.
 *
 * Served means what a client needs: the ShareManager is not in Error nor being deleted,
 * no failover runs (lease not marked delinquent, status not FailingOver), the Lease
 * names a holder, that pod exists, is not being deleted and runs (phase Running), and,
 * for a user's server (spec.server, whose pod becomes a Service endpoint only when
 * Ready), it is not reported unready. The first of these that fails is the reason, so
 * the reason names the earliest broken link. NB: the verdict is as of the reads: a
 * holder that stopped renewing a moment ago still looks served until a manager judges
 * its lease stale (this tool never compares the Lease's renewTime with its own clock).
 *
 * `why` then shows what explains it: the conditions whose status is False, where a
 * running failover stands (its next recorded step), the latest Warning events on the
 * ShareManager and its pods, and the agent's log lines (log-excerpt.ts). For a served
 * share it says so and lists only the False conditions, which are caveats then.
 */
import type { CoreV1Event, V1Pod } from '@kubernetes/client-node';
import type { LastFailover } from '../manager/share-model/share-manager-spec.ts';
import { byTime, eventTime, isoSeconds, timeOf } from './event-times.ts';
import { logExcerpt } from './log-excerpt.ts';
import { claimOf, type ShareSnapshot, shareKey } from './share-snapshot.ts';
import { failoverOrigin, recordedSteps } from './timeline-lines.ts';

export type Serving = { served: true; pod: string; node: string } | { served: false; reason: string };

/** The agent container's last log lines of `pod`, or why they could not be read. */
export type AgentLog = { pod: string; lines: readonly string[] } | { pod: string; error: string };

export interface WhyInput extends ShareSnapshot {
  /** Events about the ShareManager and its pods, in any order. */
  events: readonly CoreV1Event[];
  /** undefined: the share has no pod whose log could be read. */
  agentLog: AgentLog | undefined;
}

/** How many Warning events and agent log lines `why` shows at most. */
export const WHY_EVENTS = 5;
export const WHY_LOG_LINES = 3;

export function servingOf(s: ShareSnapshot): Serving {
  const status = s.sm.status ?? {};
  const no = (reason: string): Serving => ({ served: false, reason });
  if (s.sm.metadata.deletionTimestamp || status.state === 'Stopped')
    return no(`the ShareManager is being deleted (status ${status.state ?? 'none'})`);
  if (status.state === 'Error') return no(`its spec is rejected (status Error): ${status.message ?? ''}`);
  if (!status.state)
    return no('no manager has reconciled it yet (no status): is the leasehold manager DaemonSet running?');
  const lease = s.lease;
  if (lease?.delinquentSince)
    return no(
      `failing over: the lease of pod ${lease.holder || '(none)'} on node ${lease.holderNode || '(unknown)'} was declared dead at ${lease.delinquentSince}`,
    );
  if (status.state === 'FailingOver') {
    const gate = status.conditions?.find((c) => c.type === 'StorageFencing');
    if (gate?.status === 'False' && gate.reason === 'AwaitingNodeDown')
      return no(
        `its failover waits for evidence that node ${lease?.holderNode || '(unknown)'} is down (StorageFencing=False, AwaitingNodeDown: its storage cannot fence that node)`,
      );
    return no(`failing over${status.message ? `: ${status.message}` : ''}`);
  }
  if (!lease) return no(`its Lease ${shareKey(s.sm)} does not exist (a manager creates it with the share)`);
  if (lease.holder === '') return no(noHolder(s.pods));
  const pod = s.pods.find((p) => p.metadata?.name === lease.holder);
  if (!pod) return no(`its Lease names pod ${lease.holder}, which does not exist`);
  if (pod.metadata?.deletionTimestamp) return no(`its holder pod ${lease.holder} is being deleted`);
  const phase = pod.status?.phase ?? 'Unknown';
  if (phase !== 'Running') return no(`its holder pod ${lease.holder} is ${phase}`);
  const ready = pod.status?.conditions?.find((c) => c.type === 'Ready');
  if (s.sm.spec?.server && ready?.status === 'False')
    return no(
      `its holder pod ${lease.holder} is not Ready, so its Service sends it nothing${ready.message ? `: ${ready.message}` : ''}`,
    );
  return { served: true, pod: lease.holder, node: lease.holderNode || pod.spec?.nodeName || '(unknown)' };
}

/** Why no pod holds a free lease: none exists, none is scheduled, or one has not acquired yet. */
function noHolder(pods: readonly V1Pod[]): string {
  const pod = byCreation(pods)
    .filter((p) => !p.metadata?.deletionTimestamp)
    .at(-1);
  if (!pod) return 'no pod holds its lease and none exists (a manager creates one)';
  const name = pod.metadata?.name ?? '';
  if (!pod.spec?.nodeName) {
    const scheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled');
    return scheduled?.status === 'False'
      ? `its pod ${name} cannot be scheduled: ${scheduled.message ?? scheduled.reason ?? ''}`
      : `its pod ${name} is not scheduled on a node yet`;
  }
  return `its pod ${name} on node ${pod.spec.nodeName} (phase ${pod.status?.phase ?? 'Unknown'}) has not acquired the lease`;
}

/** The pod whose agent log explains the share best: the holder, else the newest live pod, else the newest. */
export function explainingPod(s: ShareSnapshot): V1Pod | undefined {
  const byAge = byCreation(s.pods);
  return (
    byAge.find((p) => p.metadata?.name === s.lease?.holder) ??
    byAge.filter((p) => !p.metadata?.deletionTimestamp).at(-1) ??
    byAge.at(-1)
  );
}

/**
 * The agent log `why` shows: the explaining pod's, read when it has a node (a pod
 * that was never scheduled ran no container, and the API server has no log to give).
 */
export function agentLogPlan(s: ShareSnapshot): { read: string } | { known: AgentLog | undefined } {
  const pod = explainingPod(s);
  const name = pod?.metadata?.name;
  if (!pod || !name) return { known: undefined };
  if (!pod.spec?.nodeName)
    return { known: { pod: name, error: 'it has no node yet, so no container has run' } };
  return { read: name };
}

/** Oldest first. */
function byCreation(pods: readonly V1Pod[]): V1Pod[] {
  return [...pods].sort(
    (a, b) => timeOf(a.metadata?.creationTimestamp) - timeOf(b.metadata?.creationTimestamp),
  );
}

export function whyLines(input: WhyInput): { served: boolean; lines: string[] } {
  const key = shareKey(input.sm);
  const serving = servingOf(input);
  const claim = claimOf(input.sm);
  const rows: Array<[string, string]> = [];
  for (const c of input.sm.status?.conditions ?? [])
    if (c.status === 'False')
      rows.push(['condition', `${c.type}=False (${c.reason ?? 'no reason'}): ${c.message ?? ''}`.trim()]);
  if (serving.served) {
    const head = `${key} is served: pod ${serving.pod} on node ${serving.node} holds the lease (status ${input.sm.status?.state})${claim ? `; clients mount it through claim ${claim}` : ''}.`;
    return { served: true, lines: [head, ...table(rows)] };
  }
  const lf = input.sm.status?.lastFailover;
  if (input.sm.status?.state === 'FailingOver' || input.lease?.delinquentSince)
    rows.push(['failover', failoverProgress(lf)]);
  const warnings = byTime(input.events)
    .filter((e) => e.type === 'Warning')
    .slice(-WHY_EVENTS);
  for (const e of warnings)
    rows.push([
      'event',
      `${isoSeconds(eventTime(e))} ${e.reason ?? ''} on ${e.involvedObject?.kind ?? '?'} ${e.involvedObject?.name ?? '?'}${(e.count ?? 1) > 1 ? ` (${e.count} times)` : ''}: ${e.message ?? ''}`,
    ]);
  if (warnings.length === 0) rows.push(['event', 'no Warning event on the ShareManager or its pods']);
  const log = input.agentLog;
  if (!log) rows.push(['agent log', 'no pod, so no agent log to read']);
  else if ('error' in log) rows.push(['agent log', `pod ${log.pod}: not readable: ${log.error}`]);
  else {
    const excerpt = logExcerpt(log.lines, WHY_LOG_LINES);
    if (excerpt.length === 0) rows.push(['agent log', `pod ${log.pod}: empty`]);
    for (const line of excerpt) rows.push(['agent log', `pod ${log.pod}: ${line}`]);
  }
  const head = `${key} is NOT served: ${serving.reason}`;
  return {
    served: false,
    lines: [head, ...table(rows), 'What to do: docs/operations.md, "Troubleshooting", has each case.'],
  };
}

/** Where a running failover stands: when it began, what was lost, the first step not recorded yet. */
function failoverProgress(lf: LastFailover | undefined): string {
  // NB: status.lastFailover is written once the failover takes its first step; until
  // then it is absent or still the previous failover's (completed).
  if (!lf || lf.completedAt)
    return `no step taken yet${lf ? ` (status.lastFailover is the previous failover's, completed at ${lf.completedAt})` : ''}`;
  const next = recordedSteps(lf, failoverOrigin(lf)).find((s) => s.seconds === undefined)?.step;
  return `${lf.reason} detected at ${lf.detectedAt ?? '?'} by ${lf.by}: pod ${lf.lostPod || '(none)'} on node ${lf.lostNode || '(unknown)'}; ${next ? `next step not reached: ${next}` : 'every step recorded'}`;
}

function table(rows: ReadonlyArray<[string, string]>): string[] {
  const width = Math.max(0, ...rows.map(([label]) => label.length));
  return rows.map(([label, text]) => `  ${label.padEnd(width)}  ${text}`);
}
