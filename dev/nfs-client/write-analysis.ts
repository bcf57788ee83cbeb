/**
 * What a user of the share sees, computed from one nfs-writer run: how long writes
 * stalled around each fault and whether anything acknowledged was lost. Pure: the
 * writer's events, the fault moments and the file's final bytes in, a report out.
 *
 * Definitions (all times CLOCK_MONOTONIC ms, lib/clock.ts monotonicMs):
 *  - clientWriteGap of a fault at F: the interval between the two consecutive acks
 *    around F (last ack at or before F, first ack after F), i.e. the longest stretch
 *    without an acknowledged write that covers F. Undefined (and a violation) when no
 *    write was acknowledged before or after F. When the writer reconnected after F
 *    (a `connected` event after F and before the next fault), the gap is the longest
 *    interval between consecutive acks from the last ack at or before F to the first
 *    ack after that reconnect: a reply already in flight when the fault struck (acked
 *    a few ms after F, e.g. while a crashed node's processes are being killed) does not
 *    hide the stall that follows it.
 *  - ackedWritesLost: acknowledged records whose bytes in the final file are missing
 *    (file too short) or differ from what was written (nfs-writer writes record n at
 *    offset (n - 1) * recordSize).
 *  - duplicates: a record (same seq and writer) found at more than one place;
 *    outOfOrder: a record found at another record's place; corrupt: a record-sized
 *    piece of the file that is no record at all (e.g. zeros of a hole).
 *  - ackSequenceBreaks: acks must come in order 1, 2, 3, ... (the writer retries a
 *    record until acknowledged and never skips one); any other step is listed.
 *  - staleHandles: error events of kind `stale` (an NFS STALE answer, or a re-opened
 *    file whose handle differs from the first open's).
 *
 * Records past the last acknowledged one may or may not be in the file (a write that
 * landed but whose reply was lost): they are allowed, and still checked for duplicates,
 * order and corruption. `violations` lists, in words, everything that breaks a
 * guarantee; empty means the run upheld them all.
 */
import { parseRecord, recordBytes, type WriterErrorKind, type WriterEvent } from './writer-lines.ts';

export interface FaultGap {
  faultMs: number;
  /**
   * The acks that bound the gap: the last at or before the fault and the first after it
   * (after a reconnect: the ends of the longest interval, see clientWriteGap above).
   */
  lastAck?: { seq: number; ms: number };
  firstAck?: { seq: number; ms: number };
  /** firstAck.ms - lastAck.ms: the clientWriteGap. */
  gapMs?: number;
  /** firstAck.ms - faultMs: how long after the fault writes resumed. */
  resumedAfterMs?: number;
}

export interface WriteRunReport {
  writer: number;
  recordSize: number;
  acked: number;
  clientWriteGaps: FaultGap[];
  ackedWritesLost: number;
  lost: Array<{ seq: number; reason: 'missing' | 'different' }>;
  duplicates: Array<{ seq: number; places: number[] }>;
  outOfOrder: Array<{ place: number; seq: number }>;
  corrupt: number[];
  trailingBytes: number;
  ackSequenceBreaks: Array<{ after: number | undefined; next: number }>;
  staleHandles: number;
  errors: Record<WriterErrorKind, number>;
  violations: string[];
}

export interface WriteRunInput {
  events: readonly WriterEvent[];
  faultsMs: readonly number[];
  /** The file's final content (read from the export directory or over NFS). */
  content: Buffer;
}

export class WriteAnalysisError extends Error {
  readonly code = 'E_WRITE_ANALYSIS';
}

export function analyzeWriteRun(input: WriteRunInput): WriteRunReport {
  const start = input.events.find((e) => e.event === 'start');
  if (!start)
    throw new WriteAnalysisError('nfs-writer events: no start event (recordSize and writer unknown)');
  const { recordSize, writer, startSeq } = start;
  const acks = input.events.filter((e) => e.event === 'ack');
  const errors: Record<WriterErrorKind, number> = { timeout: 0, stale: 0, grace: 0, connection: 0, other: 0 };
  for (const e of input.events) if (e.event === 'error') errors[e.kind]++;

  const ackSequenceBreaks: WriteRunReport['ackSequenceBreaks'] = [];
  let expected = startSeq;
  for (const ack of acks) {
    if (ack.seq !== expected)
      ackSequenceBreaks.push({ after: expected === startSeq ? undefined : expected - 1, next: ack.seq });
    expected = ack.seq + 1;
  }

  const connects = input.events.filter((e) => e.event === 'connected').map((e) => e.ms);
  const sortedFaults = [...input.faultsMs].sort((a, b) => a - b);
  const clientWriteGaps = input.faultsMs.map((faultMs) =>
    faultGap(acks, connects, faultMs, sortedFaults.find((f) => f > faultMs) ?? Number.POSITIVE_INFINITY),
  );
  const { lost, duplicates, outOfOrder, corrupt, trailingBytes } = checkContent(
    input.content,
    acks.map((a) => a.seq),
    writer,
    recordSize,
  );

  const violations: string[] = [];
  for (const g of clientWriteGaps) {
    if (!g.lastAck)
      violations.push(`no write was acknowledged before the fault at ${g.faultMs.toFixed(0)} ms`);
    if (!g.firstAck) violations.push(`writes did not resume after the fault at ${g.faultMs.toFixed(0)} ms`);
  }
  if (lost.length > 0)
    violations.push(
      `${lost.length} acknowledged writes lost (first: seq ${lost[0]?.seq}, ${lost[0]?.reason})`,
    );
  if (duplicates.length > 0)
    violations.push(`${duplicates.length} records written more than once (first: seq ${duplicates[0]?.seq})`);
  if (outOfOrder.length > 0)
    violations.push(
      `${outOfOrder.length} records out of place (first: seq ${outOfOrder[0]?.seq} at place ${outOfOrder[0]?.place})`,
    );
  if (corrupt.length > 0) violations.push(`${corrupt.length} corrupt records (first at place ${corrupt[0]})`);
  if (ackSequenceBreaks.length > 0)
    violations.push(
      `acknowledgements skipped or repeated a number ${ackSequenceBreaks.length} times (first: ${ackSequenceBreaks[0]?.next} after ${ackSequenceBreaks[0]?.after ?? 'the start'})`,
    );
  if (errors.stale > 0) violations.push(`${errors.stale} stale file handles`);

  return {
    writer,
    recordSize,
    acked: acks.length,
    clientWriteGaps,
    ackedWritesLost: lost.length,
    lost,
    duplicates,
    outOfOrder,
    corrupt,
    trailingBytes,
    ackSequenceBreaks,
    staleHandles: errors.stale,
    errors,
    violations,
  };
}

function faultGap(
  acks: ReadonlyArray<{ seq: number; ms: number }>,
  connects: readonly number[],
  faultMs: number,
  nextFaultMs: number,
): FaultGap {
  let before: { seq: number; ms: number } | undefined;
  let after: { seq: number; ms: number } | undefined;
  for (const a of acks) {
    if (a.ms <= faultMs) before = { seq: a.seq, ms: a.ms };
    else {
      after = { seq: a.seq, ms: a.ms };
      break;
    }
  }
  const reconnectMs = connects.find((c) => c > faultMs && c < nextFaultMs);
  if (before && after && reconnectMs !== undefined) {
    // The longest ack-to-ack interval from `before` up to the first ack after the reconnect.
    const fromMs = before.ms;
    let best = { from: before, to: after };
    let prev = before;
    for (const a of acks) {
      if (a.ms <= fromMs) continue;
      if (a.ms - prev.ms > best.to.ms - best.from.ms) best = { from: prev, to: { seq: a.seq, ms: a.ms } };
      prev = { seq: a.seq, ms: a.ms };
      if (a.ms > reconnectMs) break;
    }
    before = best.from;
    after = best.to;
  }
  const gap: FaultGap = { faultMs };
  if (before) gap.lastAck = before;
  if (after) {
    gap.firstAck = after;
    gap.resumedAfterMs = after.ms - faultMs;
  }
  if (before && after) gap.gapMs = after.ms - before.ms;
  return gap;
}

/** Place i of the file holds record seq i + 1 (nfs-writer's offsets). */
function checkContent(content: Buffer, ackedSeqs: readonly number[], writer: number, recordSize: number) {
  const places = Math.floor(content.length / recordSize);
  const seen = new Map<number, number[]>();
  const outOfOrder: Array<{ place: number; seq: number }> = [];
  const corrupt: number[] = [];
  for (let place = 0; place < places; place++) {
    const record = parseRecord(content.subarray(place * recordSize, (place + 1) * recordSize));
    if (!record || record.writer !== writer) {
      corrupt.push(place);
      continue;
    }
    seen.set(record.seq, [...(seen.get(record.seq) ?? []), place]);
    if (record.seq !== place + 1) outOfOrder.push({ place, seq: record.seq });
  }
  const duplicates = [...seen]
    .filter(([, at]) => at.length > 1)
    .map(([seq, at]) => ({ seq, places: at }))
    .sort((a, b) => a.seq - b.seq);
  const lost: Array<{ seq: number; reason: 'missing' | 'different' }> = [];
  for (const seq of ackedSeqs) {
    const offset = (seq - 1) * recordSize;
    if (offset + recordSize > content.length) lost.push({ seq, reason: 'missing' });
    else if (!content.subarray(offset, offset + recordSize).equals(recordBytes(seq, writer, recordSize)))
      lost.push({ seq, reason: 'different' });
  }
  return { lost, duplicates, outOfOrder, corrupt, trailingBytes: content.length % recordSize };
}
