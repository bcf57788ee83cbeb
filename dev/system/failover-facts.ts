/**
 * What happened during one failover of one share, gathered from the sources that saw
 * each step (each on this machine's wall clock, so they compare with the fault's time):
 *   - what caused the fault (`faultSource`, e.g. RealNode crash);
 *   - the ShareManager's status.lastFailover (the manager's timestamps: detected,
 *     marked delinquent, pod deleted, volume detached, replacement created, acquired);
 *   - a pod tracker polling the share's pods (replacement created, scheduled: the first
 *     time its spec.nodeName was seen);
 *   - the testbed CSI controller's record of the attach to the new node (`attachedAt`);
 *   - the moment the new server served and who saw it (`servingAt`, `servingSource`:
 *     e.g. the NFS server entrypoint's `serving` log line);
 *   - optionally the NFS client's first acknowledged write after the fault
 *     (`clientResumedAt`, from dev/nfs-client's writer).
 * Pure `timelineOf` turns the facts into ordered steps with seconds since the fault, named
 * and printed as lib/failover-timeline.ts does for every timeline.
 */
import { sleep } from '../../lib/clock.ts';
import {
  RECORD_SOURCE,
  RECORDED_STEP,
  secondsSince,
  type TimelineStep,
} from '../../lib/failover-timeline.ts';
import type { RealSystem } from './real-system.ts';
import { type ShareStatus, sharePods, shareStatus } from './shares.ts';

/**
 * First-seen times of the share's pods (created, scheduled), and the first value of each
 * status.lastFailover field, polled every `periodMs`.
 * NB: the first value matters: a manager that takes a slow failover over rewrites
 * lastFailover with its own times, which would hide when the failover really began.
 */
export class PodTracker {
  readonly created = new Map<string, Date>();
  readonly scheduled = new Map<string, { node: string; at: Date }>();
  /** When a pod seen before was first missing from the list (deleted from the API). */
  readonly gone = new Map<string, Date>();
  readonly firstFailover: Record<string, string> = {};
  private running = true;
  private readonly done: Promise<void>;
  private readonly startedAt = Date.now();

  constructor(sys: Pick<RealSystem, 'kc' | 'core'>, share: string, periodMs = 100) {
    this.done = (async () => {
      while (this.running) {
        const pods = await sharePods(sys, share).catch(() => []);
        const now = new Date();
        const live = new Set(pods.map((p) => p.metadata?.name ?? ''));
        for (const name of this.created.keys()) {
          if (!live.has(name) && !this.gone.has(name)) this.gone.set(name, now);
        }
        for (const pod of pods) {
          const name = pod.metadata?.name ?? '';
          if (!this.created.has(name)) this.created.set(name, now);
          const node = pod.spec?.nodeName;
          if (node && !this.scheduled.has(name)) this.scheduled.set(name, { node, at: now });
        }
        const status = await shareStatus(sys, share).catch(() => undefined);
        const detected = status?.lastFailover?.detectedAt;
        // A lastFailover from before this tracker started belongs to an earlier failover.
        if (detected === undefined || new Date(detected).getTime() < this.startedAt - 1_000) {
          await sleep(periodMs);
          continue;
        }
        for (const [k, v] of Object.entries(status?.lastFailover ?? {})) {
          if (v !== undefined && this.firstFailover[k] === undefined) this.firstFailover[k] = v;
        }
        await sleep(periodMs);
      }
    })();
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

export interface FailoverFacts {
  share: string;
  /** What happened to the node, as a past participle (default "crashed"). */
  fault?: string;
  /** What did it, for the fault's step (e.g. "RealNode crash"). */
  faultSource: string;
  crashedNode: string;
  crashAt: Date;
  oldPod: string;
  newPod: string;
  newNode: string;
  status: ShareStatus;
  scheduledAt?: Date;
  oldPodGoneAt?: Date;
  newPodSeenAt?: Date;
  /** The CSI controller's record of the attach to the new node. */
  attachedAt?: Date;
  servingAt?: Date;
  /** Where servingAt comes from (e.g. the NFS server log's `serving` line). */
  servingSource: string;
  /** The NFS client's first acknowledged write after the fault (a step only when set). */
  clientResumedAt?: Date;
}

const at = (iso: string | undefined): Date | undefined => (iso ? new Date(iso) : undefined);

export function timelineOf(f: FailoverFacts): TimelineStep[] {
  const since = (d: Date | undefined) => secondsSince(f.crashAt, d);
  const lf = f.status.lastFailover ?? {};
  // The earliest report of a step wins: status.lastFailover may have been rewritten by a
  // manager that took a slow failover over (its times come late), the other sources not.
  const earliest = (...options: Array<[Date | undefined, string]>) => {
    const known = options.filter((o): o is [Date, string] => o[0] !== undefined);
    known.sort((a, b) => a[0].getTime() - b[0].getTime());
    const first = known[0];
    return { seconds: since(first?.[0]), source: first?.[1] ?? 'not seen' };
  };
  const steps: TimelineStep[] = [
    { step: `node ${f.crashedNode} ${f.fault ?? 'crashed'}`, seconds: 0, source: f.faultSource },
    { step: RECORDED_STEP.detected, seconds: since(at(lf.detectedAt)), source: RECORD_SOURCE },
    { step: RECORDED_STEP.marked, seconds: since(at(lf.markedAt)), source: RECORD_SOURCE },
    {
      step: RECORDED_STEP.podDeleted(f.oldPod),
      ...earliest([at(lf.podDeletedAt), RECORD_SOURCE], [f.oldPodGoneAt, 'pod watch']),
    },
    {
      step: RECORDED_STEP.released(f.crashedNode),
      seconds: since(at(lf.detachedAt)),
      source: RECORD_SOURCE,
    },
    {
      step: RECORDED_STEP.replacementCreated(f.newPod),
      ...earliest([at(lf.replacementCreatedAt), RECORD_SOURCE], [f.newPodSeenAt, 'pod watch']),
    },
    { step: `scheduled on ${f.newNode}`, seconds: since(f.scheduledAt), source: 'pod watch' },
    {
      step: `volume attached to ${f.newNode}`,
      seconds: since(f.attachedAt),
      source: 'CSI controller record',
    },
    { step: RECORDED_STEP.acquired, seconds: since(at(lf.completedAt)), source: RECORD_SOURCE },
    {
      step: `share served from ${f.newNode}`,
      seconds: since(f.servingAt),
      source: f.servingSource,
    },
  ];
  if (f.clientResumedAt)
    steps.push({
      step: 'NFS client writes resumed',
      seconds: since(f.clientResumedAt),
      source: 'nfs-writer',
    });
  return steps;
}
