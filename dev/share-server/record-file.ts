/**
 * The share's data: numbered records appended as JSON lines to `records.jsonl` in the
 * volume directory. The sequence continues from the last complete record in the file,
 * so a restarted server (or its replacement on another node) never reuses a number.
 *
 * Invariant: records are appended with one write(2) each on an O_APPEND descriptor, so
 * a crash leaves at most one partial trailing line, which readers skip.
 * Not guaranteed: durability beyond the page cache (no fsync: on a volume with one
 * mount per node, what the old node had only in its page cache may never reach the
 * next; dev/system/real-share.ts createRealRecordShare uses the directory kind for it).
 */
import { closeSync, existsSync, openSync, readFileSync, writeSync } from 'node:fs';
import { monotonicMs } from '../../lib/clock.ts';

export interface ShareRecord {
  seq: number;
  writer: string;
  wall: string;
  /** CLOCK_MONOTONIC milliseconds, comparable across the processes of one machine. */
  monoMs: number;
}

/** Parses a records file's text; a partial or garbled line is skipped, not fatal. */
export function parseRecords(text: string): ShareRecord[] {
  const records: ShareRecord[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    try {
      const value = JSON.parse(line) as ShareRecord;
      if (Number.isInteger(value.seq)) records.push(value);
    } catch {
      // NB: only the last line can be partial (a crash mid-append); it never held a record.
    }
  }
  return records;
}

export function readRecords(path: string): ShareRecord[] {
  return existsSync(path) ? parseRecords(readFileSync(path, 'utf8')) : [];
}

export class RecordFile {
  private readonly fd: number;
  private nextSeq: number;
  private readonly records: ShareRecord[];

  constructor(
    readonly path: string,
    private readonly writer: string,
  ) {
    this.records = readRecords(path);
    this.nextSeq = (this.records.at(-1)?.seq ?? 0) + 1;
    this.fd = openSync(path, 'a');
    // A partial trailing line from a crash must not swallow our first record.
    const text = existsSync(path) ? readFileSync(path, 'utf8') : '';
    if (text.length > 0 && !text.endsWith('\n')) writeSync(this.fd, '\n');
  }

  get lastSeq(): number {
    return this.nextSeq - 1;
  }

  append(): ShareRecord {
    const record: ShareRecord = {
      seq: this.nextSeq,
      writer: this.writer,
      wall: new Date().toISOString(),
      monoMs: monotonicMs(),
    };
    writeSync(this.fd, `${JSON.stringify(record)}\n`);
    this.nextSeq++;
    this.records.push(record);
    return record;
  }

  /** Records with seq > after (all when after is 0). */
  since(after: number): ShareRecord[] {
    const first = this.records.findIndex((r) => r.seq > after);
    return first < 0 ? [] : this.records.slice(first);
  }

  close(): void {
    closeSync(this.fd);
  }
}
