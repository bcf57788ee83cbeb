/**
 * The stock mode's judgement on real nodes (pure, no I/O): whether a crash's sample is
 * measured or capped (`judgeStockSample`), why it was capped as the API shows it at the
 * cap (`stockCapReasons`: Multi-Attach / attach events, pods stuck Terminating on the
 * dead node, the VolumeAttachment still on it), and by which path a sample that did
 * resume got its volume back (`stockResumePath`, from the times seen and the
 * kube-controller-manager's own log lines).
 * Guarantees: a sample is `measured` only when the client's writes resumed after the
 * crash and within the budget: the first ack of the first flow of `needed` acks after
 * the crash, each within CLIENT_STALL_TOLERANCE_MS of the one before (`resumedAt`), so
 * a lone ack of a write in flight at the crash (the dying server committed it; seen in
 * the first real run: one ack 0.02 s after the crash, then none for 450 s) is not the
 * share serving again; a serving before the crash is `rejected`, never counted
 * (stats.ts crashToServing); no such flow within the budget is `capped`, which is
 * stock's expected outcome, not a failure.
 * Not guaranteed: the reasons are what the API holds at the cap (events are
 * deduplicated and may have aged out); the path is inferred from what was seen.
 */
import { crashToServing, resumedAt } from './stats.ts';

export type StockJudgement =
  | { outcome: 'measured'; writesResumedS: number }
  | { outcome: 'capped'; reason: string }
  | { outcome: 'rejected'; reason: string };

/** The sample's outcome from the crash and the client's acks (one clock): see the header. */
export function judgeStockSample(
  crashMs: number,
  acksMs: readonly number[],
  budgetMs: number,
  needed: number,
): StockJudgement {
  const j = crashToServing(crashMs, resumedAt(acksMs, crashMs, needed), budgetMs);
  if (j.kind === 'measured') return { outcome: 'measured', writesResumedS: j.s };
  if (j.kind === 'rejected') return { outcome: 'rejected', reason: j.reason };
  return { outcome: 'capped', reason: j.reason };
}

export interface CapFacts {
  deadNode: string;
  budgetS: number;
  /** The share namespace's events (reason, message, the object's name). */
  events: readonly { reason?: string; message?: string; object?: string }[];
  /** The share's pods (stock Deployment's) at the cap. */
  pods: readonly { name: string; node?: string; terminating: boolean; phase?: string }[];
  /** VolumeAttachments of the share's PV at the cap. */
  attachments: readonly { node: string; attached: boolean; deleting: boolean }[];
}

const ATTACH_REASONS = ['FailedAttachVolume', 'FailedMount', 'FailedScheduling'];

/** Why the share was not served again by the cap, one line per reason seen. */
export function stockCapReasons(f: CapFacts): string[] {
  const out = [`capped: not served again within ${f.budgetS} s of the crash of ${f.deadNode}`];
  const byReason = new Map<string, string>();
  for (const e of f.events)
    if (ATTACH_REASONS.includes(e.reason ?? '') && !byReason.has(e.reason ?? ''))
      byReason.set(e.reason ?? '', `${e.object ?? '?'}: ${(e.message ?? '').slice(0, 240)}`);
  for (const [r, m] of byReason) out.push(`event ${r} (${m})`);
  const stuck = f.pods.filter((p) => p.terminating && p.node === f.deadNode);
  if (stuck.length > 0)
    out.push(
      `${stuck.length} pod(s) stuck Terminating on the dead node ${f.deadNode} (${stuck.map((p) => p.name).join(', ')}): no kubelet confirms their end, so the volume stays in use there`,
    );
  const pending = f.pods.filter((p) => !p.terminating && p.phase === 'Pending');
  if (pending.length > 0)
    out.push(
      `${pending.length} replacement(s) Pending (${pending.map((p) => `${p.name} on ${p.node ?? '-'}`).join(', ')})`,
    );
  const onDead = f.attachments.filter((a) => a.node === f.deadNode);
  if (onDead.length > 0)
    out.push(
      `VolumeAttachment still on the dead node ${f.deadNode} (attached ${onDead.some((a) => a.attached)}, being deleted ${onDead.some((a) => a.deleting)})`,
    );
  if (stuck.length === 0 && pending.length === 0 && onDead.length === 0 && byReason.size === 0)
    out.push(
      'the API shows no reason (no attach event, nothing Terminating, no attachment on the dead node)',
    );
  return out;
}

export interface ResumeFacts {
  /** s since the crash: the old pod's deletionTimestamp first seen. */
  evictedS?: number;
  /** s since the crash: the old node's VolumeAttachment first seen gone. */
  oldAttachmentGoneS?: number;
  /** The controller-manager's log lines about the share's volume after the crash. */
  controllerLog: readonly string[];
}

/** How the volume came back for a sample that resumed (from what was seen). */
export function stockResumePath(f: ResumeFacts): string {
  if (f.controllerLog.some((l) => /force detach|maxWaitForUnmountDuration/i.test(l)))
    return `force-detach by the attach-detach controller after maxWaitForUnmountDuration (6 min)${f.oldAttachmentGoneS === undefined ? '' : `, old attachment gone ${f.oldAttachmentGoneS} s after the crash`}`;
  if (f.oldAttachmentGoneS !== undefined)
    return `the old node's attachment removed ${f.oldAttachmentGoneS} s after the crash without a force-detach line (a normal detach)${f.evictedS === undefined ? '' : `, after the eviction at ${f.evictedS} s`}`;
  return 'no detach of the old node seen (the volume was not moved)';
}
