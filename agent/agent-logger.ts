/**
 * The agent's logger: the lines pino writes for the manager (lib/logger.ts), written by
 * hand, because loading pino costs the agent ~6 MB of RSS (measured on Node 24: a
 * process holding node:https grows from 49.8 to 56.1 MB when it also loads pino), most
 * of the agent's budget.
 *
 * Guarantees (test/unit/agent-logger.test.ts compares every case with pino's output):
 *  - One JSON object per line: `level` (the label), `time` (ISO 8601), the bindings
 *    (component, pid, then each child's, in order), the merging object's own keys
 *    (undefined and function values left out, non-finite numbers as null), then `msg`.
 *  - `err` values and an Error passed as the object are serialized like pino's
 *    stdSerializers.err (type, message and stack with causes, own enumerable fields);
 *    `msg` defaults to the error's message.
 *  - A value JSON cannot encode never throws: a cycle becomes "[Circular]" (as in
 *    pino, whose fallback also sorts keys; this one keeps them in order), a BigInt its
 *    decimal string (pino writes it unquoted).
 *  - Lines go to process.stdout: written at once while the pipe has room, queued by
 *    libuv when it is full, so a stalled log reader never blocks the renew loop
 *    (checked: 200 KB into a pipe nobody reads returns in 6 ms). EPIPE stops logging
 *    instead of raising an error (as pino does).
 * NB: lines still queued when the process exits are lost; that needs a reader stalled
 * for a whole pipe buffer (64 KB, hundreds of lines at the agent's rate). pino would
 * instead block the exit until they are written.
 * Not supported (the agent does not use them): printf-style arguments, redaction,
 * custom serializers, transports.
 */
import type { LogFn, Logger, LogLevel } from '../lib/logger.ts';

const LEVEL_VALUES: Record<Exclude<LogLevel, 'silent'>, number> = {
  fatal: 60,
  error: 50,
  warn: 40,
  info: 30,
  debug: 20,
  trace: 10,
};
type Method = keyof typeof LEVEL_VALUES;
const METHODS = Object.keys(LEVEL_VALUES) as Method[];

export interface LineSink {
  write(line: string): void;
}

/** Test seam: where lines go (default process.stdout) and the wall clock (default Date.now). */
export interface AgentLoggerOptions {
  sink?: LineSink;
  now?: () => number;
  pid?: number;
}

export function createAgentLogger(
  component: string,
  level: LogLevel = 'info',
  opts: AgentLoggerOptions = {},
): Logger {
  const sink = opts.sink ?? stdoutSink();
  const now = opts.now ?? Date.now;
  const threshold = level === 'silent' ? Number.POSITIVE_INFINITY : LEVEL_VALUES[level];
  const make = (bindings: string): Logger => {
    const logger = { child: (more: Record<string, unknown>) => make(bindings + encodeBindings(more)) };
    for (const method of METHODS) {
      const prefix = `{"level":"${method}","time":"`;
      (logger as Record<string, unknown>)[method] =
        LEVEL_VALUES[method] < threshold
          ? noop
          : (((objOrMsg: object | string, msg?: string) =>
              sink.write(
                `${prefix}${new Date(now()).toISOString()}"${bindings}${encodeCall(objOrMsg, msg)}}\n`,
              )) as LogFn);
    }
    return logger as Logger;
  };
  return make(encodeBindings({ component, pid: opts.pid ?? process.pid }));
}

function noop(): void {}

/** pino's chindings: every own key with a defined value, JSON-encoded. */
function encodeBindings(bindings: Record<string, unknown>): string {
  let out = '';
  for (const key of Object.keys(bindings)) {
    const value = bindings[key];
    if (value === undefined || key === 'level') continue;
    const encoded = encodeValue(value);
    if (encoded !== undefined) out += `,"${key}":${encoded}`;
  }
  return out;
}

function encodeCall(objOrMsg: object | string | null | undefined, msg: string | undefined): string {
  if (typeof objOrMsg !== 'object' || objOrMsg === null) {
    const text = objOrMsg ?? msg;
    return text === undefined || text === null ? '' : `,"msg":${JSON.stringify(String(text))}`;
  }
  let obj = objOrMsg as Record<string, unknown>;
  let message = msg;
  if (obj instanceof Error) {
    obj = { err: obj };
    message ??= (objOrMsg as Error).message;
  } else if (message === undefined && obj.msg === undefined && isErrorLike(obj.err)) {
    message = obj.err.message;
  }
  let out = '';
  for (const key in obj) {
    if (!Object.hasOwn(obj, key)) continue;
    let value = obj[key];
    if (value === undefined) continue;
    if (key === 'err') value = serializeError(value);
    const encoded = encodeValue(value);
    if (encoded !== undefined) out += `,${JSON.stringify(key)}:${encoded}`;
  }
  return message === undefined ? out : `${out},"msg":${JSON.stringify(message)}`;
}

/** One value as pino encodes it; undefined when the key is to be left out. */
function encodeValue(value: unknown): string | undefined {
  switch (typeof value) {
    case 'undefined':
    case 'function':
      return undefined;
    case 'number':
      return Number.isFinite(value) ? String(value) : 'null';
    case 'boolean':
      return String(value);
    case 'string':
      return JSON.stringify(value);
    default:
      try {
        return JSON.stringify(value);
      } catch {
        return encodeUnsafe(value);
      }
  }
}

/** The fallback for cycles (pino: safe-stable-stringify): a repeated ancestor is "[Circular]". */
function encodeUnsafe(value: unknown): string {
  const ancestors: unknown[] = [];
  try {
    return JSON.stringify(value, function (this: unknown, _key, v: unknown) {
      if (typeof v === 'bigint') return v.toString();
      if (typeof v !== 'object' || v === null) return v;
      while (ancestors.length > 0 && ancestors.at(-1) !== this) ancestors.pop();
      if (ancestors.includes(v)) return '[Circular]';
      ancestors.push(v);
      return v;
    });
  } catch {
    return '"[unable to serialize, circular reference is too complex to analyze]"';
  }
}

interface ErrorLike {
  message: string;
  stack?: string;
  cause?: unknown;
  errors?: unknown;
  constructor?: unknown;
  name?: string;
}

function isErrorLike(value: unknown): value is ErrorLike {
  return typeof value === 'object' && value !== null && typeof (value as ErrorLike).message === 'string';
}

/** pino-std-serializers' err(): type, message and stack with causes, then own fields. */
function serializeError(err: unknown, seen = new Set<unknown>()): unknown {
  if (!isErrorLike(err)) return err;
  seen.add(err);
  const out: Record<string, unknown> = {
    type: typeof err.constructor === 'function' ? (err.constructor as { name: string }).name : err.name,
    message: messageWithCauses(err),
    stack: stackWithCauses(err),
  };
  if (Array.isArray(err.errors)) out.aggregateErrors = err.errors.map((e) => serializeError(e, seen));
  for (const key in err) {
    if (out[key] !== undefined) continue;
    const value = (err as unknown as Record<string, unknown>)[key];
    if (isErrorLike(value)) {
      if (key !== 'cause' && !seen.has(value)) out[key] = serializeError(value, seen);
    } else {
      out[key] = value;
    }
  }
  seen.delete(err); // only the chain being serialized counts as a cycle
  return out;
}

function causeOf(err: ErrorLike): ErrorLike | undefined {
  const cause = typeof err.cause === 'function' ? (err.cause as () => unknown)() : err.cause;
  return isErrorLike(cause) ? cause : undefined;
}

function messageWithCauses(err: ErrorLike, seen = new Set<ErrorLike>(), skip = false): string {
  const message = skip ? '' : err.message || '';
  if (seen.has(err)) return `${message}: ...`;
  const cause = causeOf(err);
  if (!cause) return message;
  seen.add(err);
  const vErrorStyle = typeof err.cause === 'function';
  return message + (vErrorStyle ? '' : ': ') + messageWithCauses(cause, seen, vErrorStyle);
}

function stackWithCauses(err: ErrorLike, seen = new Set<ErrorLike>()): string {
  const stack = err.stack || '';
  if (seen.has(err)) return `${stack}\ncauses have become circular...`;
  const cause = causeOf(err);
  if (!cause) return stack;
  seen.add(err);
  return `${stack}\ncaused by: ${stackWithCauses(cause, seen)}`;
}

function stdoutSink(): LineSink {
  let broken = false;
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    // NB: a closed stdout must not become an uncaught exception (the agent fences on
    // those); stop logging, as pino does. Anything else is said once on stderr.
    if (err.code !== 'EPIPE') process.stderr.write(`leasehold agent: writing logs failed: ${err.message}\n`);
    broken = true;
  });
  return {
    write(line) {
      if (!broken) process.stdout.write(line);
    },
  };
}
