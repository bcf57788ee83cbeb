/**
 * Logging: JSON lines on stdout, one root logger per process. Modules take a child
 * logger carrying their context (lease, node, pod) instead of repeating it per line.
 *
 * Two writers share the line shape and the narrow `Logger` interface below:
 *  - `createLogger` (the manager): pino, with `level` as its label and an ISO `time`.
 *  - agent/agent-logger.ts (the agent): the same lines written by hand, because loading
 *    pino costs the agent ~6 MB of RSS (measured: 49.8 -> 56.1 MB on top of node:https,
 *    Node 24), most of its memory budget.
 *
 * Invariant: this module loads pino only when `createLogger` is first called, so that
 * importing LOG_LEVELS or the Logger type (agent/config.ts does) costs nothing.
 */
import { createRequire } from 'node:module';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export interface LogFn {
  (obj: object, msg?: string): void;
  (msg: string): void;
}

/** What every module may call: the six levels and child(). pino's Logger satisfies it. */
export interface Logger {
  fatal: LogFn;
  error: LogFn;
  warn: LogFn;
  info: LogFn;
  debug: LogFn;
  trace: LogFn;
  child(bindings: Record<string, unknown>): Logger;
}

export function createLogger(component: string, level: LogLevel = 'info'): Logger {
  return loadPino().pino(pinoOptions(component, level));
}

/** The pino options behind createLogger (also the reference agent-logger.ts is tested against). */
export function pinoOptions(component: string, level: LogLevel): import('pino').LoggerOptions {
  return {
    level,
    base: { component, pid: process.pid },
    timestamp: loadPino().pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  };
}

/** NB: pino is CommonJS, so require() loads it synchronously, on first use only. */
function loadPino(): typeof import('pino') {
  return createRequire(import.meta.url)('pino') as typeof import('pino');
}
