/**
 * The guest workloads' console lines (guest/lh-kload.c prints them), parsed into typed
 * events stamped with the host's arrival time. Pure: a line and a time in, an event out.
 *
 * Guarantees: a line is the program's when its first word has a tag's shape
 * (`[a-z][a-z0-9-]*`) and its second word is a known kind; anything else (kernel
 * messages, init's output, usage text on stderr) is `undefined`, never an error: they
 * share the console. A line of the program's shape whose fields are wrong throws a
 * `WorkloadLineError` naming the line and the rule, never a half-filled event. Words are
 * separated by single spaces; a trailing `\r` (a tty's line ending) is dropped.
 *
 * Not guaranteed: that a line of the right shape came from lh-kload (a foreign line
 * that happens to read `<word> ack 5` is taken as one; tags should be distinctive), or
 * that the console delivered every line.
 */
import { LeaseholdError } from '../../lib/errors.ts';

/** The kinds of line lh-kload prints, the second word of each. */
export const WORKLOAD_KINDS = [
  'ack',
  'err',
  'read',
  'locked',
  'lockio',
  'denied',
  'granted',
  'created',
  'verified',
  'bad',
  'exit',
] as const;
export type WorkloadKind = (typeof WORKLOAD_KINDS)[number];

/** The calls an `err` line names (lh-kload.c's emit_err callers). */
export const WORKLOAD_OPS = [
  'open',
  'write',
  'fsync',
  'read',
  'lock',
  'lockio',
  'setlk',
  'unlock',
  'mkdir',
  'create',
] as const;
export type WorkloadOp = (typeof WORKLOAD_OPS)[number];

interface Stamped {
  /** The workload's tag, the line's first word. */
  tag: string;
  /** When the host saw the line (its clock, as passed to parseWorkloadLine). */
  atMs: number;
}
/** write: record `seq` was written and fsynced. */
export interface AckEvent extends Stamped {
  kind: 'ack';
  seq: number;
}
/**
 * A call failed. `n` is the number the workload is trying to reach (the record, file or
 * attempt whose success line would carry it; 0 in lock mode before the lock is held).
 */
export interface ErrEvent extends Stamped {
  kind: 'err';
  n: number;
  /** Symbolic errno (EIO, ESTALE, ...), or E<number> for one lh-kload has no name for. */
  errno: string;
  op: WorkloadOp;
}
/** read: the n-th O_DIRECT read from the server succeeded. */
export interface ReadEvent extends Stamped {
  kind: 'read';
  n: number;
}
/** lock: the write lock on byte 0 is held. */
export interface LockedEvent extends Stamped {
  kind: 'locked';
}
/** lock: the n-th write + fsync through the locked fd succeeded. */
export interface LockIoEvent extends Stamped {
  kind: 'lockio';
  n: number;
}
/** probe: attempt n found the lock held by someone else. */
export interface DeniedEvent extends Stamped {
  kind: 'denied';
  n: number;
}
/** probe: attempt n got the lock (and released it at once). */
export interface GrantedEvent extends Stamped {
  kind: 'granted';
  n: number;
}
/** create: file f-<n> was created, written and closed. */
export interface CreatedEvent extends Stamped {
  kind: 'created';
  n: number;
}
/** verify: records 1..count are all as written. */
export interface VerifiedEvent extends Stamped {
  kind: 'verified';
  count: number;
}
/** verify: record `seq` is the first that is not as written. */
export interface BadEvent extends Stamped {
  kind: 'bad';
  seq: number;
  /** short-read, mismatch, or the ERRNAME of the failed open or read. */
  reason: string;
}
/** The workload stopped on SIGTERM/SIGINT. */
export interface ExitEvent extends Stamped {
  kind: 'exit';
}
export type WorkloadEvent =
  | AckEvent
  | ErrEvent
  | ReadEvent
  | LockedEvent
  | LockIoEvent
  | DeniedEvent
  | GrantedEvent
  | CreatedEvent
  | VerifiedEvent
  | BadEvent
  | ExitEvent;

/** A line of lh-kload's shape with fields that break its format. */
export class WorkloadLineError extends LeaseholdError {
  readonly line: string;
  constructor(line: string, problem: string) {
    super('E_WORKLOAD_LINE', `workload line ${JSON.stringify(line.slice(0, 200))}: ${problem}`);
    this.line = line;
  }
}

const TAG = /^[a-z][a-z0-9-]*$/;
const ERRNO = /^E[A-Z0-9]+$/;
const REASON = /^(short-read|mismatch|E[A-Z0-9]+)$/;
const UINT = /^(0|[1-9][0-9]*)$/;
/** lh-kload prints numbers with %u of 32 bits. */
const UINT32_MAX = 4_294_967_295;

/** Field names after the kind, per kind (the number of words each line has). */
const FIELDS: Record<WorkloadKind, readonly string[]> = {
  ack: ['seq'],
  err: ['n', 'errno', 'op'],
  read: ['n'],
  locked: [],
  lockio: ['n'],
  denied: ['n'],
  granted: ['n'],
  created: ['n'],
  verified: ['count'],
  bad: ['seq', 'reason'],
  exit: [],
};

function isKind(word: string | undefined): word is WorkloadKind {
  return word !== undefined && Object.hasOwn(FIELDS, word);
}

/**
 * One console line as a workload event stamped `atMs`, or undefined when the line is
 * not lh-kload's. Throws WorkloadLineError for a line of its shape with bad fields.
 */
export function parseWorkloadLine(text: string, atMs: number): WorkloadEvent | undefined {
  const line = text.replace(/\r?\n?$/, '');
  const words = line.split(' ');
  const [tag, kind] = words;
  if (tag === undefined || !TAG.test(tag) || !isKind(kind)) return undefined;
  if (!Number.isFinite(atMs)) throw new WorkloadLineError(line, `atMs must be a finite number, got ${atMs}`);
  const names = FIELDS[kind];
  const fields = words.slice(2);
  if (fields.length !== names.length)
    throw new WorkloadLineError(
      line,
      names.length === 0
        ? `${kind} takes no fields`
        : `${kind} takes ${names.length} field(s) (${names.join(' ')}) after the tag and kind, separated by single spaces`,
    );
  const number = (index: number, min: number): number => {
    const word = fields[index] ?? '';
    const value = Number(word);
    if (!UINT.test(word) || value < min || value > UINT32_MAX)
      throw new WorkloadLineError(
        line,
        `${kind} ${names[index]} must be an integer from ${min} to ${UINT32_MAX}, got ${JSON.stringify(word)}`,
      );
    return value;
  };
  const word = (index: number, rule: RegExp, expected: string): string => {
    const value = fields[index] ?? '';
    if (!rule.test(value))
      throw new WorkloadLineError(
        line,
        `${kind} ${names[index]} must be ${expected}, got ${JSON.stringify(value)}`,
      );
    return value;
  };
  const at = { tag, atMs };
  switch (kind) {
    case 'ack':
      return { kind, ...at, seq: number(0, 1) };
    case 'err': {
      const n = number(0, 0);
      const errno = word(1, ERRNO, 'a symbolic errno (E followed by capitals or digits)');
      const op = word(2, /^[a-z]+$/, `one of ${WORKLOAD_OPS.join(', ')}`);
      if (!(WORKLOAD_OPS as readonly string[]).includes(op))
        throw new WorkloadLineError(line, `err op must be one of ${WORKLOAD_OPS.join(', ')}, got "${op}"`);
      return { kind, ...at, n, errno, op: op as WorkloadOp };
    }
    case 'read':
    case 'lockio':
    case 'denied':
    case 'granted':
    case 'created':
      return { kind, ...at, n: number(0, 1) };
    case 'verified':
      return { kind, ...at, count: number(0, 0) };
    case 'bad':
      return {
        kind,
        ...at,
        seq: number(0, 1),
        reason: word(1, REASON, 'short-read, mismatch or a symbolic errno'),
      };
    case 'locked':
    case 'exit':
      return { kind, ...at };
  }
}
