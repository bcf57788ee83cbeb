/**
 * What the kernel NFS client's users saw around a fault, computed from one workload's
 * events (workload-lines.ts) and, for writes, the file read back from the volume. Pure:
 * events, a fault time and bytes in, a report out. All times are the host's, the clock
 * that stamped the console lines (atMs); the fault time must be on that clock.
 *
 * Definitions:
 *  - Success, per workload: `ack` (write), `read` (read), `lockio` (lock), `created`
 *    (create). One tag runs one workload: events of several tags, or successes of
 *    several kinds, are refused (a gap over two workloads means nothing).
 *  - stallOf: the last success at or before the fault, the first success after it, the
 *    gap = first success after - fault, the `err` lines after the fault grouped by errno
 *    (count, first and last time, the calls), and whether ESTALE was seen at all (before
 *    the fault too: a stale handle is a failure wherever it appears).
 *  - lockExclusion: a probe's `granted` lines, each a moment when a second process got
 *    the lock the holder holds. The caller passes the probe events of the window in which
 *    the holder holds the lock; `exclusive` needs at least one `denied` in it (a probe
 *    that only failed shows nothing).
 *  - checkReadBack: every acked record is in the file at (seq - 1) * recordSize, byte for
 *    byte `expectedRecord(seq)` (lh-kload.c fill_record); records past the last ack may or
 *    may not be there (a write that landed but was not acked is allowed).
 *
 * Not guaranteed: the gap is measured from the console's arrival times, so it includes
 * the console's latency (small, and the same for every line); a success printed just
 * after the fault may have been served just before it (the gap then ends early: take the
 * fault time from the moment the fault was in force). A lost lock is seen here only
 * through `err ... EIO lockio` lines, not by this module deciding it.
 */
import { LeaseholdError } from '../../lib/errors.ts';
import type { AckEvent, WorkloadEvent, WorkloadOp } from './workload-lines.ts';

/** The line that counts as a success for each workload. */
export const SUCCESS_KIND = { write: 'ack', read: 'read', lock: 'lockio', create: 'created' } as const;
export type Workload = keyof typeof SUCCESS_KIND;

/** Bounds lh-kload.c accepts for recordSize. */
export const RECORD_SIZE_MIN = 64;
export const RECORD_SIZE_MAX = 65536;
const SEQ_MAX = 4_294_967_295;

/** Bad input to an analysis (events of several tags, a bad size, a fault time that is no number). */
export class WorkloadAnalysisError extends LeaseholdError {
  constructor(message: string) {
    super('E_WORKLOAD_ANALYSIS', message);
  }
}

/** A success line: `n` is its number (the record's seq for `ack`). */
export interface Success {
  n: number;
  atMs: number;
}

export interface ErrnoGroup {
  errno: string;
  count: number;
  firstMs: number;
  lastMs: number;
  /** The calls that failed with it, in order of first appearance. */
  ops: WorkloadOp[];
}

export interface Stall {
  /** The events' tag; undefined when there were none. */
  tag: string | undefined;
  /** The workload the successes belong to; undefined when there were none. */
  workload: Workload | undefined;
  faultMs: number;
  /** `resumed`: a success came after the fault; `never-resumed`: none did (a violation). */
  outcome: 'resumed' | 'never-resumed';
  /** Undefined when the workload had not succeeded yet at the fault. */
  lastSuccessBefore?: Success;
  firstSuccessAfter?: Success;
  /** firstSuccessAfter.atMs - faultMs. */
  gapMs?: number;
  /** The err lines after the fault by errno, in order of their first appearance. */
  errorsAfter: ErrnoGroup[];
  /** An `err ... ESTALE` line anywhere in the events. */
  staleSeen: boolean;
}

export interface LockExclusion {
  tag: string | undefined;
  /**
   * `exclusive`: denied at least once, never granted; `violated`: granted at least once;
   * `unprobed`: no attempt was answered (only errors, or no events).
   */
  outcome: 'exclusive' | 'violated' | 'unprobed';
  denied: number;
  granted: Success[];
  errors: ErrnoGroup[];
}

export interface ReadBack {
  tag: string | undefined;
  /** `intact`: every acked record is there; `lost`: some are not; `nothing-acked`: no ack to check. */
  outcome: 'intact' | 'lost' | 'nothing-acked';
  /** Distinct acked seqs checked. */
  acked: number;
  /** Acked records beyond the end of `content` (missing) or not as written (different). */
  lost: Array<{ seq: number; reason: 'missing' | 'different' }>;
  /** The highest seq whose record is in place, byte for byte (acked or not); 0 when none. */
  highestPresent: number;
}

/** The bytes of record `seq` of `size` bytes, as lh-kload.c fill_record writes them. */
export function expectedRecord(seq: number, size: number): Buffer {
  checkRecordSize(size);
  if (!Number.isInteger(seq) || seq < 1 || seq > SEQ_MAX)
    throw new WorkloadAnalysisError(`record seq ${seq}: expected an integer from 1 to ${SEQ_MAX}`);
  const record = Buffer.alloc(size, 0x61 + (seq % 26));
  record.write(`lh-kload seq=${String(seq).padStart(10, '0')}\n`, 0, 'latin1');
  record[size - 1] = 0x0a;
  return record;
}

/** How the workload fared around a fault at `faultMs` (see the module header). */
export function stallOf(events: readonly WorkloadEvent[], faultMs: number): Stall {
  if (!Number.isFinite(faultMs))
    throw new WorkloadAnalysisError(`faultMs ${faultMs}: expected a finite number`);
  const tag = oneTag(events, 'stallOf');
  const successes = events.filter(isSuccess);
  const kinds = [...new Set(successes.map((e) => e.kind))];
  if (kinds.length > 1)
    throw new WorkloadAnalysisError(
      `stallOf: tag ${tag} has successes of several workloads (${kinds.join(', ')}); pass one workload's events`,
    );
  const workload = (Object.keys(SUCCESS_KIND) as Workload[]).find((w) => SUCCESS_KIND[w] === kinds[0]);
  let before: Success | undefined;
  let after: Success | undefined;
  for (const e of successes) {
    const s = { n: e.kind === 'ack' ? e.seq : e.n, atMs: e.atMs };
    if (e.atMs <= faultMs) {
      if (!before || e.atMs >= before.atMs) before = s;
    } else if (!after || e.atMs < after.atMs) after = s;
  }
  const stall: Stall = {
    tag,
    workload,
    faultMs,
    outcome: after ? 'resumed' : 'never-resumed',
    errorsAfter: groupErrors(events.filter((e) => e.atMs > faultMs)),
    staleSeen: events.some((e) => e.kind === 'err' && e.errno === 'ESTALE'),
  };
  if (before) stall.lastSuccessBefore = before;
  if (after) {
    stall.firstSuccessAfter = after;
    stall.gapMs = after.atMs - faultMs;
  }
  return stall;
}

/** Whether a probe ever got the lock the holder holds (pass the holding window's events). */
export function lockExclusion(probeEvents: readonly WorkloadEvent[]): LockExclusion {
  const tag = oneTag(probeEvents, 'lockExclusion');
  const granted = probeEvents
    .filter((e) => e.kind === 'granted')
    .map((e) => ({ n: e.n, atMs: e.atMs }))
    .sort((a, b) => a.atMs - b.atMs);
  const denied = probeEvents.filter((e) => e.kind === 'denied').length;
  return {
    tag,
    outcome: granted.length > 0 ? 'violated' : denied > 0 ? 'exclusive' : 'unprobed',
    denied,
    granted,
    errors: groupErrors(probeEvents),
  };
}

/** Whether every acked record is in `content`, the file read back from the volume. */
export function checkReadBack(ackEvents: readonly AckEvent[], content: Buffer, recordSize: number): ReadBack {
  checkRecordSize(recordSize);
  const tag = oneTag(ackEvents, 'checkReadBack');
  const other = ackEvents.find((e) => e.kind !== 'ack');
  if (other)
    throw new WorkloadAnalysisError(
      `checkReadBack: takes ack events only, got a ${other.kind} of tag ${tag}`,
    );
  const seqs = [...new Set(ackEvents.map((e) => e.seq))].sort((a, b) => a - b);
  const lost: ReadBack['lost'] = [];
  for (const seq of seqs) {
    const offset = (seq - 1) * recordSize;
    if (offset + recordSize > content.length) lost.push({ seq, reason: 'missing' });
    else if (!content.subarray(offset, offset + recordSize).equals(expectedRecord(seq, recordSize)))
      lost.push({ seq, reason: 'different' });
  }
  let highestPresent = 0;
  const places = Math.min(Math.floor(content.length / recordSize), SEQ_MAX);
  for (let seq = places; seq >= 1 && highestPresent === 0; seq--) {
    const at = (seq - 1) * recordSize;
    if (content.subarray(at, at + recordSize).equals(expectedRecord(seq, recordSize))) highestPresent = seq;
  }
  return {
    tag,
    outcome: seqs.length === 0 ? 'nothing-acked' : lost.length > 0 ? 'lost' : 'intact',
    acked: seqs.length,
    lost,
    highestPresent,
  };
}

type SuccessEvent = Extract<WorkloadEvent, { kind: (typeof SUCCESS_KIND)[Workload] }>;

function isSuccess(e: WorkloadEvent): e is SuccessEvent {
  return e.kind === 'ack' || e.kind === 'read' || e.kind === 'lockio' || e.kind === 'created';
}

function oneTag(events: readonly WorkloadEvent[], what: string): string | undefined {
  const tags = [...new Set(events.map((e) => e.tag))];
  if (tags.length > 1)
    throw new WorkloadAnalysisError(`${what}: takes the events of one tag, got ${tags.join(', ')}`);
  return tags[0];
}

function checkRecordSize(size: number): void {
  if (!Number.isInteger(size) || size < RECORD_SIZE_MIN || size > RECORD_SIZE_MAX)
    throw new WorkloadAnalysisError(
      `recordSize ${size}: expected an integer from ${RECORD_SIZE_MIN} to ${RECORD_SIZE_MAX} (lh-kload's bounds)`,
    );
}

function groupErrors(events: readonly WorkloadEvent[]): ErrnoGroup[] {
  const groups = new Map<string, ErrnoGroup>();
  for (const e of [...events].sort((a, b) => a.atMs - b.atMs)) {
    if (e.kind !== 'err') continue;
    const g = groups.get(e.errno);
    if (!g) groups.set(e.errno, { errno: e.errno, count: 1, firstMs: e.atMs, lastMs: e.atMs, ops: [e.op] });
    else {
      g.count++;
      g.lastMs = e.atMs;
      if (!g.ops.includes(e.op)) g.ops.push(e.op);
    }
  }
  return [...groups.values()];
}
