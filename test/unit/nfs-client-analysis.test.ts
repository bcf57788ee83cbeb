/**
 * dev/nfs-client/write-analysis.ts: the client's view of a run (gaps around faults, lost
 * acknowledged writes, duplicates, order, stale handles) from synthetic writer events and
 * file contents. Each safety check is shown to fail on a violation.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { analyzeWriteRun, WriteAnalysisError } from '../../dev/nfs-client/write-analysis.ts';
import { recordBytes, type WriterEvent } from '../../dev/nfs-client/writer-lines.ts';

const SIZE = 64;
const WRITER = 7;

function start(): WriterEvent {
  return { event: 'start', ms: 0, pid: 1, writer: WRITER, version: '3', recordSize: SIZE, startSeq: 1 };
}
function ack(seq: number, ms: number): WriterEvent {
  return { event: 'ack', seq, ms, sentMs: ms - 1 };
}
function error(kind: 'stale' | 'grace' | 'connection', seq: number, ms: number): WriterEvent {
  return { event: 'error', kind, seq, ms, op: 'write', rc: -5, message: kind };
}
function file(seqs: number[], writer = WRITER): Buffer {
  return Buffer.concat(seqs.map((s) => recordBytes(s, writer, SIZE)));
}
/** Acks 1..n every 100 ms from t = 100, then a stall: records n+1.. resume at `resumeMs`. */
function run(n: number, resumeMs: number, after: number): WriterEvent[] {
  const events = [start()];
  for (let s = 1; s <= n; s++) events.push(ack(s, s * 100));
  for (let i = 0; i < after; i++) events.push(ack(n + 1 + i, resumeMs + i * 100));
  return events;
}
const seqs = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('nfs-client write analysis', () => {
  it('measures the gap between the acks around each fault and finds nothing wrong in a clean run', () => {
    // Acks at 100..1000 ms, fault at 1050 ms, writes resume at 7000 ms.
    const events = run(10, 7000, 5);
    const report = analyzeWriteRun({ events, faultsMs: [1050], content: file(seqs(1, 15)) });
    assert.deepEqual(report.violations, []);
    assert.equal(report.acked, 15);
    assert.equal(report.ackedWritesLost, 0);
    assert.deepEqual(report.clientWriteGaps, [
      {
        faultMs: 1050,
        lastAck: { seq: 10, ms: 1000 },
        firstAck: { seq: 11, ms: 7000 },
        gapMs: 6000,
        resumedAfterMs: 5950,
      },
    ]);
    assert.equal(report.staleHandles, 0);
  });

  it('gives each of several faults its own gap', () => {
    const events = [start(), ack(1, 100), ack(2, 200), ack(3, 5000), ack(4, 5100), ack(5, 9000)];
    const report = analyzeWriteRun({ events, faultsMs: [250, 5200], content: file(seqs(1, 5)) });
    assert.deepEqual(
      report.clientWriteGaps.map((g) => g.gapMs),
      [4800, 3900],
    );
  });

  it('a reply in flight at the fault (acked just after it) does not hide the stall before the reconnect', () => {
    // Acks every 100 ms up to 1000; crash at 1000; record 11's reply arrives at 1005;
    // the writer reconnects at 9000 and record 12 is acked at 9100.
    const events: WriterEvent[] = [start(), ...seqs(1, 10).map((n) => ack(n, n * 100)), ack(11, 1005)];
    events.push({ event: 'connected', ms: 9000, seq: 12, handle: 'ab' }, ack(12, 9100), ack(13, 9200));
    const report = analyzeWriteRun({ events, faultsMs: [1000], content: file(seqs(1, 13)) });
    assert.deepEqual(report.violations, []);
    assert.deepEqual(report.clientWriteGaps[0], {
      faultMs: 1000,
      lastAck: { seq: 11, ms: 1005 },
      firstAck: { seq: 12, ms: 9100 },
      gapMs: 8095,
      resumedAfterMs: 8100,
    });
    // Without the reconnect (the same connection carried on) the gap is the one around the fault.
    const same = events.filter((e) => e.event !== 'connected');
    assert.equal(
      analyzeWriteRun({ events: same, faultsMs: [1000], content: file(seqs(1, 13)) }).clientWriteGaps[0]
        ?.gapMs,
      5,
    );
    // A reconnect after the next fault belongs to that fault, not to this one.
    const two = analyzeWriteRun({ events, faultsMs: [1000, 5000], content: file(seqs(1, 13)) });
    assert.deepEqual(
      two.clientWriteGaps.map((g) => g.gapMs),
      [5, 8095],
    );
  });

  it('allows a record past the last ack that landed without its reply, and a file short of unacked records', () => {
    const events = run(5, 1000, 0);
    assert.deepEqual(analyzeWriteRun({ events, faultsMs: [], content: file(seqs(1, 6)) }).violations, []);
    assert.deepEqual(analyzeWriteRun({ events, faultsMs: [], content: file(seqs(1, 5)) }).violations, []);
  });

  it('FAILS when an acknowledged record is missing from the file', () => {
    const events = run(10, 5000, 5);
    const report = analyzeWriteRun({ events, faultsMs: [1050], content: file(seqs(1, 14)) });
    assert.equal(report.ackedWritesLost, 1);
    assert.deepEqual(report.lost, [{ seq: 15, reason: 'missing' }]);
    assert.match(report.violations.join('\n'), /1 acknowledged writes lost \(first: seq 15, missing\)/);
  });

  it('FAILS when an acknowledged record was removed from the middle (the rest shifted down)', () => {
    const events = run(10, 5000, 5);
    const content = file([...seqs(1, 6), ...seqs(8, 15)]);
    const report = analyzeWriteRun({ events, faultsMs: [1050], content });
    assert.ok(report.ackedWritesLost >= 1, 'lost');
    assert.deepEqual(report.lost[0], { seq: 7, reason: 'different' });
    assert.ok(report.outOfOrder.length > 0, 'the shifted records are out of place');
    assert.notDeepEqual(report.violations, []);
  });

  it('FAILS when an acknowledged record differs by one byte', () => {
    const events = run(3, 400, 0);
    const content = file(seqs(1, 3));
    content[SIZE + 30] = 'x'.charCodeAt(0);
    const report = analyzeWriteRun({ events, faultsMs: [], content });
    assert.deepEqual(report.lost, [{ seq: 2, reason: 'different' }]);
    assert.deepEqual(report.corrupt, [1]);
    assert.equal(report.violations.length, 2);
  });

  it('FAILS when a record was written twice', () => {
    const events = run(5, 1000, 0);
    const report = analyzeWriteRun({ events, faultsMs: [], content: file([...seqs(1, 5), 3]) });
    assert.equal(report.ackedWritesLost, 0, 'nothing acknowledged is lost');
    assert.deepEqual(report.duplicates, [{ seq: 3, places: [2, 5] }]);
    assert.deepEqual(report.outOfOrder, [{ place: 5, seq: 3 }]);
    assert.match(report.violations.join('\n'), /1 records written more than once \(first: seq 3\)/);
  });

  it('FAILS on zeros (a hole) and on records of another writer', () => {
    const events = run(2, 300, 0);
    const hole = Buffer.concat([file([1, 2]), Buffer.alloc(SIZE)]);
    assert.deepEqual(analyzeWriteRun({ events, faultsMs: [], content: hole }).corrupt, [2]);
    const other = analyzeWriteRun({ events, faultsMs: [], content: file([1, 2], WRITER + 1) });
    assert.equal(other.ackedWritesLost, 2);
  });

  it('FAILS when acknowledgements skip a number', () => {
    const events = [start(), ack(1, 100), ack(2, 200), ack(4, 300)];
    const report = analyzeWriteRun({ events, faultsMs: [], content: file(seqs(1, 4)) });
    assert.deepEqual(report.ackSequenceBreaks, [{ after: 2, next: 4 }]);
    assert.match(report.violations.join('\n'), /skipped or repeated a number 1 times \(first: 4 after 2\)/);
  });

  it('FAILS on stale handles and counts every error kind', () => {
    const events = [
      start(),
      ack(1, 100),
      error('connection', 2, 150),
      error('grace', 2, 300),
      error('stale', 2, 400),
      ack(2, 500),
    ];
    const report = analyzeWriteRun({ events, faultsMs: [120], content: file([1, 2]) });
    assert.equal(report.staleHandles, 1);
    assert.deepEqual(report.errors, { timeout: 0, stale: 1, grace: 1, connection: 1, other: 0 });
    assert.deepEqual(report.violations, ['1 stale file handles']);
  });

  it('FAILS when writes never resumed after a fault, or none preceded it', () => {
    const events = run(3, 0, 0);
    const report = analyzeWriteRun({ events, faultsMs: [50, 350], content: file(seqs(1, 3)) });
    assert.equal(report.clientWriteGaps[0]?.gapMs, undefined);
    assert.equal(report.clientWriteGaps[1]?.gapMs, undefined);
    assert.deepEqual(report.violations, [
      'no write was acknowledged before the fault at 50 ms',
      'writes did not resume after the fault at 350 ms',
    ]);
  });

  it('reports trailing bytes of a partial record without calling them lost', () => {
    const events = run(2, 300, 0);
    const content = Buffer.concat([file([1, 2]), Buffer.from('leasehold-nfs seq=3')]);
    const report = analyzeWriteRun({ events, faultsMs: [], content });
    assert.equal(report.trailingBytes, 19);
    assert.deepEqual(report.violations, []);
  });

  it('refuses events without a start line (record size unknown)', () => {
    assert.throws(
      () => analyzeWriteRun({ events: [ack(1, 1)], faultsMs: [], content: Buffer.alloc(0) }),
      WriteAnalysisError,
    );
  });
});
