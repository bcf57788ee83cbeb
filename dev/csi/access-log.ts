/**
 * The fencing storage's own log of access to each volume: a `grant` when a node's view
 * of a volume is mounted (before the attacher reports the VolumeAttachment attached),
 * a `revoke` when it is cut (before the attacher removes its finalizer). Times are
 * CLOCK_MONOTONIC ms (lib/clock.ts), comparable with serving windows and the attacher's
 * events; `seq` is the order the storage acted in (one process, one log).
 * Pure: the checks read only the log (and, for writesAcrossRevokes, each view's write
 * times, from the views' own stats: dev/fuse Stats).
 * Shared: the real nodes' testbed CSI driver (dev/csi) writes the same log and reports
 * the same view stats (controller.ts accessLog, viewStats), judged by these functions.
 */

export type AccessOp = 'grant' | 'revoke';

export interface AccessLogEntry {
  seq: number;
  op: AccessOp;
  pv: string;
  node: string;
  /** The mount point of that view. */
  view: string;
  monoMs: number;
  wall: Date;
}

/**
 * Every grant of a volume to a node while another node's view of it was still live
 * (granted and not revoked), as messages. `[]` means each node lost its access before
 * the volume was granted anywhere else: the storage's fencing order for RWO volumes.
 */
export function accessOrderViolations(log: readonly AccessLogEntry[]): string[] {
  const live = new Map<string, Map<string, number>>(); // pv -> node -> seq of its grant
  const out: string[] = [];
  for (const e of [...log].sort((a, b) => a.seq - b.seq)) {
    const ofPv = live.get(e.pv) ?? new Map<string, number>();
    live.set(e.pv, ofPv);
    if (e.op === 'grant') {
      for (const [node, grantSeq] of ofPv)
        if (node !== e.node)
          out.push(
            `PV ${e.pv}: granted to ${e.node} (#${e.seq}) while ${node}'s access (granted #${grantSeq}) was not revoked`,
          );
      ofPv.set(e.node, e.seq);
    } else {
      ofPv.delete(e.node);
    }
  }
  return out;
}

/**
 * The first grant of `pv` to another node than `node`, and `node`'s last revoke before
 * it, if `node` had no access at that grant (revoked, not granted again since). NB: the
 * last revoke, not the first: a volume may have been revoked and granted again on the
 * same node before (a pod replaced there).
 */
export function revokeBeforeGrantElsewhere(
  log: readonly AccessLogEntry[],
  pv: string,
  node: string,
): { revoke: AccessLogEntry; grant: AccessLogEntry } | undefined {
  const ofPv = [...log].filter((e) => e.pv === pv).sort((a, b) => a.seq - b.seq);
  const grant = ofPv.find((e) => e.op === 'grant' && e.node !== node);
  if (!grant) return undefined;
  const mine = ofPv.filter((e) => e.node === node && e.seq < grant.seq);
  const last = mine.at(-1);
  return last?.op === 'revoke' ? { revoke: last, grant } : undefined;
}

/** What one view of a volume served (from the storage's view stats), by its grant. */
export interface ViewWrites {
  node: string;
  /** `seq` of the grant that made this view. */
  grantSeq: number;
  writes: number;
  firstWriteMonoMs: number | undefined;
  lastWriteMonoMs: number | undefined;
}

/**
 * Pure: for each revoke of `pv` on a node, every write through that node's view served
 * at or after the revoke, and every write through a view granted after it (to another
 * node) served at or before the revoke, as messages. `[]` with the access order above
 * means: no write of the old node landed after the new node's first.
 */
export function writesAcrossRevokes(
  log: readonly AccessLogEntry[],
  pv: string,
  views: readonly ViewWrites[],
): string[] {
  const out: string[] = [];
  const ofPv = [...log].filter((e) => e.pv === pv).sort((a, b) => a.seq - b.seq);
  for (const revoke of ofPv.filter((e) => e.op === 'revoke')) {
    const revoked = views
      .filter((v) => v.node === revoke.node && v.grantSeq < revoke.seq)
      .sort((a, b) => b.grantSeq - a.grantSeq)[0];
    if (
      revoked &&
      revoked.writes > 0 &&
      (revoked.lastWriteMonoMs ?? Number.POSITIVE_INFINITY) >= revoke.monoMs
    )
      out.push(
        `PV ${pv}: a write through ${revoke.node}'s view (granted #${revoked.grantSeq}) at ${revoked.lastWriteMonoMs} ms, not before its revoke (#${revoke.seq}) at ${revoke.monoMs} ms`,
      );
    for (const later of views.filter((v) => v.node !== revoke.node && v.grantSeq > revoke.seq))
      if (later.writes > 0 && (later.firstWriteMonoMs ?? Number.NEGATIVE_INFINITY) <= revoke.monoMs)
        out.push(
          `PV ${pv}: a write through ${later.node}'s view (granted #${later.grantSeq}) at ${later.firstWriteMonoMs} ms, not after ${revoke.node}'s revoke (#${revoke.seq}) at ${revoke.monoMs} ms`,
        );
  }
  return out;
}
