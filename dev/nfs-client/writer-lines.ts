/**
 * The nfs-writer's output, parsed: one JSON object per stdout line (nfs-writer.c prints
 * them) into a typed event, and the record bytes it writes. Pure: text in, values out.
 *
 * Guarantees: every event that parses has the fields its kind needs with the right
 * types; a line that does not is returned as a `WriterLineError` naming the line and the
 * rule (never thrown, never silently dropped). `recordBytes` reproduces nfs-writer.c's
 * fill_record byte for byte (the analysis compares the file with it).
 */

/** Error kinds nfs-writer reports (classify() in nfs-writer.c). */
export const ERROR_KINDS = ['timeout', 'stale', 'grace', 'connection', 'other'] as const;
export type WriterErrorKind = (typeof ERROR_KINDS)[number];

export interface WriterStart {
  event: 'start';
  ms: number;
  pid: number;
  writer: number;
  version: '3' | '4.0';
  recordSize: number;
  startSeq: number;
}
export interface WriterConnected {
  event: 'connected';
  ms: number;
  seq: number;
  /** Hex of the file handle the open returned. */
  handle: string;
}
/** Record `seq` was written and committed: `ms` is CLOCK_MONOTONIC ms at the reply. */
export interface WriterAck {
  event: 'ack';
  ms: number;
  seq: number;
  sentMs: number;
}
export interface WriterFailure {
  event: 'error';
  ms: number;
  seq: number;
  kind: WriterErrorKind;
  op: string;
  rc: number;
  message: string;
}
export interface WriterExit {
  event: 'exit';
  ms: number;
  acked: number;
  nextSeq: number;
  connects: number;
  staleHandles: number;
  errors: Record<WriterErrorKind, number>;
  signalled: boolean;
}
export type WriterEvent = WriterStart | WriterConnected | WriterAck | WriterFailure | WriterExit;

export class WriterLineError {
  readonly code = 'E_WRITER_LINE';
  constructor(
    readonly line: string,
    readonly problem: string,
  ) {}
  get message(): string {
    return `nfs-writer line ${JSON.stringify(this.line.slice(0, 200))}: ${this.problem}`;
  }
}

const NUMBER_FIELDS: Record<WriterEvent['event'], readonly string[]> = {
  start: ['ms', 'pid', 'writer', 'recordSize', 'startSeq'],
  connected: ['ms', 'seq'],
  ack: ['ms', 'seq', 'sentMs'],
  error: ['ms', 'seq', 'rc'],
  exit: ['ms', 'acked', 'nextSeq', 'connects', 'staleHandles'],
};

/** One stdout line of nfs-writer as an event, or an error value saying what is wrong. */
export function parseWriterLine(line: string): WriterEvent | WriterLineError {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return new WriterLineError(line, 'not JSON');
  }
  if (value === null || typeof value !== 'object') return new WriterLineError(line, 'not a JSON object');
  const o = value as Record<string, unknown>;
  const event = o.event;
  if (typeof event !== 'string' || !(event in NUMBER_FIELDS))
    return new WriterLineError(line, `event must be one of ${Object.keys(NUMBER_FIELDS).join(', ')}`);
  for (const field of NUMBER_FIELDS[event as WriterEvent['event']])
    if (typeof o[field] !== 'number' || !Number.isFinite(o[field]))
      return new WriterLineError(line, `${event} needs a number ${field}`);
  if (event === 'start' && o.version !== '3' && o.version !== '4.0')
    return new WriterLineError(line, 'start needs version "3" or "4.0"');
  if (event === 'connected' && typeof o.handle !== 'string')
    return new WriterLineError(line, 'connected needs a string handle');
  if (event === 'error') {
    if (!ERROR_KINDS.includes(o.kind as WriterErrorKind))
      return new WriterLineError(line, `error kind must be one of ${ERROR_KINDS.join(', ')}`);
    if (typeof o.op !== 'string' || typeof o.message !== 'string')
      return new WriterLineError(line, 'error needs string op and message');
  }
  if (event === 'exit') {
    const errors = o.errors as Record<string, unknown> | undefined;
    if (!errors || ERROR_KINDS.some((k) => typeof errors[k] !== 'number'))
      return new WriterLineError(
        line,
        `exit needs errors with a count for each of ${ERROR_KINDS.join(', ')}`,
      );
    if (typeof o.signalled !== 'boolean') return new WriterLineError(line, 'exit needs a boolean signalled');
  }
  return o as unknown as WriterEvent;
}

/** The bytes of record `seq` of writer `writerId` (nfs-writer.c fill_record). */
export function recordBytes(seq: number, writerId: number, recordSize: number): Buffer {
  const head = `leasehold-nfs seq=${seq} writer=${writerId} `.slice(0, recordSize - 1);
  return Buffer.from(`${head.padEnd(recordSize - 1, '.')}\n`, 'latin1');
}

/** Parses one record back: seq and writer, or undefined when it is not a record. */
export function parseRecord(bytes: Buffer): { seq: number; writer: number } | undefined {
  const m = /^leasehold-nfs seq=(\d+) writer=(\d+) \.*\n$/.exec(bytes.toString('latin1'));
  if (!m) return undefined;
  const seq = Number(m[1]);
  const writer = Number(m[2]);
  return recordBytes(seq, writer, bytes.length).equals(bytes) ? { seq, writer } : undefined;
}
