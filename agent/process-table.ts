/**
 * The processes the agent can see in /proc: in a share-manager pod (shareProcessNamespace)
 * that is every process of the pod, and no other pod's.
 *
 * A process is identified by (pid, startTime), so a PID reused by a new process after
 * the old one ended is never mistaken for it. A process that is a zombie (state Z or X)
 * has stopped running: it serves nothing and counts as gone.
 * Reads are synchronous: a pod holds a handful of processes (a few ms), and nothing else
 * has to run while the agent fences.
 *
 * NB: node:fs is loaded with require(): its ESM import reads every export, and the lazy
 * `promises` getter loads fs/promises and more (~1 MB of RSS the agent does not need).
 */
import { createRequire } from 'node:module';

const { readdirSync, readFileSync } = createRequire(import.meta.url)('node:fs') as typeof import('node:fs');

export interface ProcessInfo {
  pid: number;
  ppid: number;
  /** One letter: R running, S sleeping, D disk sleep, T stopped, Z zombie, X dead, ... */
  state: string;
  /** Clock ticks since boot at which the process started (stat field 22). */
  startTime: number;
  comm: string;
  /** Empty unless read (listProcesses' `argv`): only the `signal` fence's name rule needs it. */
  argv: string[];
}

export interface ProcessRef {
  pid: number;
  startTime: number;
}

/** Parses /proc/PID/stat; undefined for text that is not one. */
export function parseStat(
  text: string,
): Pick<ProcessInfo, 'pid' | 'ppid' | 'state' | 'startTime'> | undefined {
  // NB: the command name (field 2) is in parentheses and may itself hold spaces or ")".
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  const pid = Number(text.slice(0, open).trim());
  const rest = text
    .slice(close + 2)
    .trim()
    .split(' ');
  // rest[0] is field 3 (state), so field N is rest[N - 3].
  const state = rest[0] ?? '';
  const ppid = Number(rest[1]);
  const startTime = Number(rest[19]);
  if (!Number.isInteger(pid) || state === '' || !Number.isInteger(ppid) || !Number.isFinite(startTime))
    return undefined;
  return { pid, ppid, state, startTime };
}

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined; // ended meanwhile, or not ours to read
  }
}

/**
 * What /proc says of `pid`. argv (/proc/PID/cmdline) only when `withArgv`: reading it
 * takes the target's memory-map lock, so it blocks (and with it the agent's event loop
 * and its /readyz) behind a process stuck in I/O holding that lock; stat and comm do
 * not. Without it `argv` is empty.
 */
export function readProcess(pid: number, procDir = '/proc', withArgv = false): ProcessInfo | undefined {
  const stat = read(`${procDir}/${pid}/stat`);
  const parsed = stat === undefined ? undefined : parseStat(stat);
  if (!parsed) return undefined;
  const comm = read(`${procDir}/${pid}/comm`)?.trimEnd() ?? '';
  const argv = withArgv ? (read(`${procDir}/${pid}/cmdline`) ?? '').split('\0').filter((a) => a !== '') : [];
  return { ...parsed, comm, argv };
}

/** Every process in /proc; `argv` read only when asked (see readProcess). */
export function listProcesses(procDir = '/proc', opts: { argv?: boolean } = {}): ProcessInfo[] {
  const all: ProcessInfo[] = [];
  for (const entry of readdirSync(procDir)) {
    if (!/^\d+$/.test(entry)) continue;
    const info = readProcess(Number(entry), procDir, opts.argv === true);
    if (info) all.push(info);
  }
  return all;
}

/** True when the process is still running: same PID and start time, and not a zombie. */
export function isRunning(ref: ProcessRef, procDir = '/proc'): boolean {
  const stat = read(`${procDir}/${ref.pid}/stat`);
  const parsed = stat === undefined ? undefined : parseStat(stat);
  return (
    parsed !== undefined && parsed.startTime === ref.startTime && parsed.state !== 'Z' && parsed.state !== 'X'
  );
}

/** The agent's own effective capability mask and user, from /proc/self/status. */
export function readOwnCredentials(procDir = '/proc'): { uid: number; capEff: bigint } | undefined {
  const status = read(`${procDir}/self/status`);
  if (status === undefined) return undefined;
  const uid = /^Uid:\s+(\d+)/m.exec(status)?.[1];
  const capEff = /^CapEff:\s+([0-9a-f]+)/m.exec(status)?.[1];
  if (uid === undefined || capEff === undefined) return undefined;
  return { uid: Number(uid), capEff: BigInt(`0x${capEff}`) };
}
