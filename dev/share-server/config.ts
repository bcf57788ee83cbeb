/**
 * Configuration of the demo share server, from args (`--dir=/data` or `--dir /data`)
 * or env vars; an arg wins over its env var. Every problem is reported at once, each
 * naming the input (the arg or the env var), the value and the rule; main exits 2.
 *
 *   --dir         SHARE_SERVER_DIR        volume directory holding records and the window log (required)
 *   --port        SHARE_SERVER_PORT       HTTP port (default 8080; 0 picks a free port)
 *   --interval    SHARE_SERVER_INTERVAL   time between two appended records (default 100ms)
 *   --window-log  SHARE_SERVER_WINDOW_LOG serving-window log (default <dir>/serving-windows.jsonl)
 *   --id          SHARE_SERVER_ID         name written into records and windows (default $HOSTNAME,
 *                                         which the kubelet sets to the pod name)
 *   --sigterm-delay SHARE_SERVER_SIGTERM_DELAY  how long it keeps serving after SIGTERM: 0 (default)
 *                                         stops at once; a duration (up to 10m) keeps appending and
 *                                         answering that long, then stops; `never` ignores SIGTERM,
 *                                         so only SIGKILL ends it (its window then has no stop line).
 *                                         A stubborn server, for tests of what the fence and the
 *                                         kubelet's grace period do. Hazard: with a delay, a fence
 *                                         by SIGTERM does not stop the serving. SIGINT always stops
 *                                         at once.
 */
import { hostname } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { type Env, EnvReader, parseDuration } from '../../lib/env-config.ts';

export interface ShareServerConfig {
  dir: string;
  port: number;
  intervalMs: number;
  windowLogPath: string;
  id: string;
  recordsPath: string;
  /** Serving time after SIGTERM: 0 stops at once, Infinity ignores SIGTERM. */
  sigtermDelayMs: number;
}

const MAX_SIGTERM_DELAY_MS = 600_000;

const SETTINGS = {
  dir: 'SHARE_SERVER_DIR',
  port: 'SHARE_SERVER_PORT',
  interval: 'SHARE_SERVER_INTERVAL',
  'window-log': 'SHARE_SERVER_WINDOW_LOG',
  id: 'SHARE_SERVER_ID',
  'sigterm-delay': 'SHARE_SERVER_SIGTERM_DELAY',
} as const;
type Setting = keyof typeof SETTINGS;

/** Turns args into `{ '--dir': value }` entries; unknown args are problems. */
function parseArgs(args: readonly string[], problems: string[]): Map<Setting, string> {
  const given = new Map<Setting, string>();
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? '';
    const match = /^--([a-z-]+)(?:=(.*))?$/.exec(arg);
    const name = match?.[1] as Setting | undefined;
    if (!match || name === undefined || !(name in SETTINGS)) {
      problems.push(
        `argument ${JSON.stringify(arg)}: unknown; expected --${Object.keys(SETTINGS).join(', --')}`,
      );
      continue;
    }
    const value = match[2] ?? args[++i];
    if (value === undefined) problems.push(`argument --${name}: needs a value`);
    else given.set(name, value);
  }
  return given;
}

export function loadShareServerConfig(args: readonly string[], env: Env): ShareServerConfig {
  const problems: string[] = [];
  const fromArgs = parseArgs(args, problems);
  // One record keyed by the name the user wrote, so that every message names it.
  const source: Record<string, string | undefined> = { ...env };
  const nameOf = (setting: Setting): string => {
    const value = fromArgs.get(setting);
    if (value === undefined) return SETTINGS[setting];
    source[`--${setting}`] = value;
    return `--${setting}`;
  };
  const reader = new EnvReader(source);
  const dirName = nameOf('dir');
  const dir = reader.string(dirName, { rule: 'the volume directory is required (an absolute path)' });
  if (dir !== '')
    reader.require(isAbsolute(dir), `${dirName}=${JSON.stringify(dir)}: must be an absolute path`);
  const port = reader.port(nameOf('port'), 8080);
  const intervalMs = reader.duration(nameOf('interval'), 100, 10, 60_000);
  const windowLogName = nameOf('window-log');
  const windowLog = reader.optionalString(windowLogName);
  if (windowLog !== undefined) {
    reader.require(
      isAbsolute(windowLog),
      `${windowLogName}=${JSON.stringify(windowLog)}: must be an absolute path`,
    );
  }
  const id = reader.optionalString(nameOf('id')) ?? env.HOSTNAME ?? hostname();
  const delayName = nameOf('sigterm-delay');
  const delay = reader.optionalString(delayName);
  const delayMs =
    delay === undefined ? 0 : delay === 'never' ? Number.POSITIVE_INFINITY : parseDuration(delay);
  reader.require(
    (delayMs !== undefined && delayMs <= MAX_SIGTERM_DELAY_MS) || delayMs === Number.POSITIVE_INFINITY,
    `${delayName}=${JSON.stringify(delay)}: must be a duration from 0 to 10m (such as 0, 500ms or 2s) or never`,
  );
  for (const problem of problems) reader.require(false, problem);
  reader.done();
  return {
    dir,
    port,
    intervalMs,
    windowLogPath: windowLog ?? join(dir, 'serving-windows.jsonl'),
    id,
    recordsPath: join(dir, 'records.jsonl'),
    sigtermDelayMs: delayMs ?? 0,
  };
}
