/**
 * The NFS client's side of a failover, and the demo's verdict, from facts already
 * gathered (pure: no I/O, no clock):
 *   - clientViewOf: the writer's report (dev/nfs-client/write-analysis.ts) around one
 *     crash in seconds since the crash: when its acknowledged writes stalled (the last
 *     ack at or before the crash) and resumed (the first after it), the gap between;
 *   - withClientSteps: the failover timeline (dev/system/failover-facts.ts, lib/failover-timeline.ts) with the
 *     client's two steps placed in time order among the others;
 *   - demoVerdict: ok only when no two ganesha of the share overlapped, the share moved
 *     off the crashed node, the client resumed, and its view upholds every guarantee
 *     (0 acknowledged writes lost, no duplicates, no stale handle); each failure named.
 * Not judged here: how fast (the figures are printed; a slow failover is not a failure).
 */

import type { TimelineStep } from '../../lib/failover-timeline.ts';
import type { ReadBack, Stall } from '../kernel-client/workload-analysis.ts';
import type { WriteRunReport } from '../nfs-client/write-analysis.ts';
import type { WriterEvent } from '../nfs-client/writer-lines.ts';

export interface ClientView {
  /** The last acknowledged write at or before the crash, s since the crash (<= 0). */
  stalledS?: number;
  /** The first acknowledged write after the crash, s since the crash. */
  resumedS?: number;
  /** resumed - stalled: the clientWriteGap, s. */
  gapS?: number;
  acked: number;
  lost: number;
  duplicates: number;
  staleHandles: number;
  violations: readonly string[];
}

const s2 = (ms: number) => Math.round(ms / 10) / 100;

/** `report` from a run whose fault (faultsMs[0]) is the crash at `crashMonoMs`. */
export function clientViewOf(report: WriteRunReport, crashMonoMs: number): ClientView {
  const gap = report.clientWriteGaps[0];
  const view: ClientView = {
    acked: report.acked,
    lost: report.ackedWritesLost,
    duplicates: report.duplicates.length,
    staleHandles: report.staleHandles,
    violations: report.violations,
  };
  if (gap?.lastAck) view.stalledS = s2(gap.lastAck.ms - crashMonoMs);
  if (gap?.firstAck) view.resumedS = s2(gap.firstAck.ms - crashMonoMs);
  if (gap?.gapMs !== undefined) view.gapS = s2(gap.gapMs);
  return view;
}

/**
 * A kernel client's view (dev/kernel-client) of the same crash: its writer's last ack at
 * or before the crash (`atCrash`, stallOf at the crash) and first after the replacement
 * served (`afterServing`, stallOf at that time: an ack in flight at the crash may land
 * just after it, which is no resumption), its records read back from the volume, and the
 * broken guarantees the caller found besides (a lock granted to another client, a second
 * client reading other data). ESTALE lines count as stale handles; duplicates do not
 * apply (each record has its place in the file).
 */
export function kernelClientViewOf(
  atCrash: Stall,
  afterServing: Stall,
  readBack: ReadBack,
  crashMonoMs: number,
  violations: readonly string[] = [],
): ClientView {
  const stale = atCrash.errorsAfter.find((g) => g.errno === 'ESTALE')?.count ?? (atCrash.staleSeen ? 1 : 0);
  const view: ClientView = {
    acked: readBack.acked,
    lost: readBack.lost.length,
    duplicates: 0,
    staleHandles: stale,
    violations,
  };
  if (atCrash.lastSuccessBefore) view.stalledS = s2(atCrash.lastSuccessBefore.atMs - crashMonoMs);
  if (afterServing.firstSuccessAfter) view.resumedS = s2(afterServing.firstSuccessAfter.atMs - crashMonoMs);
  if (view.stalledS !== undefined && view.resumedS !== undefined)
    view.gapS = s2((view.resumedS - view.stalledS) * 1000);
  return view;
}

/**
 * The timeline with the client's steps inserted before the first later step (order
 * kept); `client` names it in the steps (default the libnfs writer) and is their source.
 */
export function withClientSteps(
  steps: readonly TimelineStep[],
  view: ClientView,
  client: { name: string; source: string } = { name: 'NFS client', source: 'nfs-writer' },
): TimelineStep[] {
  const extra: TimelineStep[] = [
    {
      step: `${client.name}'s last acknowledged write before the stall`,
      seconds: view.stalledS,
      source: client.source,
    },
    {
      step: `${client.name}'s first acknowledged write after the crash`,
      seconds: view.resumedS,
      source: client.source,
    },
  ];
  const out = steps.filter((s) => s.source !== client.source);
  for (const e of extra) {
    if (e.seconds === undefined) {
      out.push(e);
      continue;
    }
    const at = out.findIndex((s) => s.seconds !== undefined && s.seconds > (e.seconds as number));
    if (at < 0) out.push(e);
    else out.splice(at, 0, e);
  }
  return out;
}

export interface DemoFacts {
  crashedNode: string;
  newNode: string;
  /** Pairs of ganesha processes of the share alive at once (GaneshaTracker windows). */
  ganeshaOverlaps: number;
  /** How many distinct ganesha processes of the share were seen (the old and the new). */
  ganeshaSeen: number;
  /** Each NFS client's view, by its name. */
  clients: ReadonlyArray<{ name: string; view: ClientView }>;
}

export function demoVerdict(f: DemoFacts): { ok: boolean; problems: string[] } {
  const problems: string[] = [];
  if (f.ganeshaOverlaps > 0)
    problems.push(`${f.ganeshaOverlaps} overlapping ganesha processes (two servers at once)`);
  if (f.ganeshaSeen < 2)
    problems.push(`only ${f.ganeshaSeen} ganesha process(es) seen (the tracker missed a server)`);
  if (f.newNode === f.crashedNode) problems.push(`the share is still on the crashed node ${f.crashedNode}`);
  if (f.clients.length === 0) problems.push('no NFS client was watched');
  for (const { name, view } of f.clients) {
    if (view.resumedS === undefined) problems.push(`${name}'s writes never resumed`);
    // The client's report names each broken guarantee; the counts are checked as well, in
    // case a report carries a count without its line.
    problems.push(...view.violations.map((v) => `${name}: ${v}`));
    if (view.violations.length === 0) {
      if (view.lost > 0) problems.push(`${name}: ${view.lost} acknowledged writes lost`);
      if (view.duplicates > 0) problems.push(`${name}: ${view.duplicates} records written twice`);
      if (view.staleHandles > 0) problems.push(`${name}: ${view.staleHandles} stale file handles`);
    }
  }
  return { ok: problems.length === 0, problems };
}

/**
 * The client's failed calls from the crash to its resume, compacted: consecutive
 * failures of the same op and kind as one entry `first..last s op kind xN` (seconds
 * since the crash), so a long stall reads as what the client kept hitting.
 */
export function clientErrorsLine(
  events: readonly WriterEvent[],
  crashMonoMs: number,
  untilMonoMs: number,
): string {
  const runs: Array<{ from: number; to: number; what: string; n: number }> = [];
  for (const e of events) {
    if (e.event !== 'error' || e.ms < crashMonoMs || e.ms > untilMonoMs) continue;
    const what = `${e.op} ${e.kind}`;
    const t = s2(e.ms - crashMonoMs);
    const last = runs.at(-1);
    if (last && last.what === what) {
      last.to = t;
      last.n++;
    } else runs.push({ from: t, to: t, what, n: 1 });
  }
  if (runs.length === 0) return 'none';
  return runs
    .map((r) =>
      r.n === 1
        ? `${r.from.toFixed(2)} s ${r.what}`
        : `${r.from.toFixed(2)}..${r.to.toFixed(2)} s ${r.what} x${r.n}`,
    )
    .join(', ');
}
