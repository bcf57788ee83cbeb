/**
 * Logging: pino JSON on stdout, one root logger per process. Modules take a child
 * logger carrying their context (lease, node, pod) instead of repeating it per line.
 */
import { type Logger, pino } from 'pino';

export type { Logger };
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export function createLogger(component: string, level: LogLevel = 'info'): Logger {
  return pino({
    level,
    base: { component, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  });
}
