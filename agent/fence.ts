/**
 * Fencing: stop the local server once the agent can no longer prove it holds the lease.
 * The caller drops readiness first and exits non-zero after this returns, whatever the
 * outcome; a failed fence action is reported, never retried (there is no time left).
 *
 * Actions:
 *  - signal: send the configured signal to every process that matches the configured
 *    name in the pod's shared process namespace (/proc). Matching rule, first hit wins:
 *      1. /proc/PID/comm equals the name (comm is cut to 15 characters by the kernel,
 *         so the name's first 15 characters are compared), or
 *      2. the basename of any argv element (/proc/PID/cmdline) equals the name, with or
 *         without its extension: `share-server` matches `/usr/bin/share-server` and
 *         `/app/share-server.js`.
 *    NB: the agent never signals itself. Reads /proc synchronously: a few ms for a pod's
 *    handful of processes, and nothing else has to run meanwhile.
 *  - command: `/bin/sh -c <command>` in its own process group, killed (SIGKILL to the
 *    group) after the configured timeout.
 *  - none: nothing beyond dropping readiness and exiting.
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { basename, extname } from 'node:path';
import type { FenceConfig } from './config.ts';

export type FenceResult =
  | { kind: 'none' }
  | { kind: 'signalled'; signal: string; pids: number[] }
  | { kind: 'no-process'; name: string }
  /** Some matches could not be signalled (EPERM: another user, no CAP_KILL). */
  | { kind: 'signal-failed'; signal: string; signalled: number[]; refused: string[] }
  | { kind: 'command-finished'; exitCode: number | null; signal: string | null; durationMs: number }
  | { kind: 'command-timed-out'; durationMs: number }
  | { kind: 'command-failed'; error: string };

export async function runFence(config: FenceConfig, procDir = '/proc'): Promise<FenceResult> {
  if (config.action === 'none') return { kind: 'none' };
  if (config.action === 'signal') return signalByName(config.process, config.signal, procDir);
  return runFenceCommand(config.command, config.timeoutMs);
}

function signalByName(name: string, signal: NodeJS.Signals, procDir: string): FenceResult {
  const pids = findProcessesByName(name, procDir).filter((pid) => pid !== process.pid);
  const signalled: number[] = [];
  const refused: string[] = [];
  for (const pid of pids) {
    try {
      process.kill(pid, signal);
      signalled.push(pid);
    } catch (err) {
      // ESRCH: it ended between the scan and the signal, nothing left to stop.
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ESRCH') refused.push(`${pid}: ${code ?? String(err)}`);
    }
  }
  if (refused.length > 0) return { kind: 'signal-failed', signal, signalled, refused };
  return signalled.length === 0
    ? { kind: 'no-process', name }
    : { kind: 'signalled', signal, pids: signalled };
}

/** PIDs whose comm or any argv basename matches `name` (see the header for the rule). */
export function findProcessesByName(name: string, procDir = '/proc'): number[] {
  const found: number[] = [];
  for (const entry of readdirSync(procDir)) {
    if (!/^\d+$/.test(entry)) continue;
    const comm = readProc(`${procDir}/${entry}/comm`)?.trimEnd();
    const argv = readProc(`${procDir}/${entry}/cmdline`)
      ?.split('\0')
      .filter((a) => a !== '');
    if (comm === undefined && argv === undefined) continue;
    if (processMatches(name, comm ?? '', argv ?? [])) found.push(Number(entry));
  }
  return found;
}

/** The matching rule, pure. */
export function processMatches(name: string, comm: string, argv: readonly string[]): boolean {
  if (comm !== '' && comm === name.slice(0, 15)) return true;
  return argv.some((arg) => {
    const base = basename(arg);
    return base === name || (extname(base) !== '' && base.slice(0, -extname(base).length) === name);
  });
}

function readProc(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined; // the process ended, or is not ours to read
  }
}

function runFenceCommand(command: string, timeoutMs: number): Promise<FenceResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn('/bin/sh', ['-c', command], { stdio: 'inherit', detached: true });
    const timer = setTimeout(() => {
      killGroup(child.pid);
      resolve({ kind: 'command-timed-out', durationMs: performance.now() - started });
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      resolve({ kind: 'command-failed', error: err.message });
    });
    child.once('exit', (exitCode, signal) => {
      clearTimeout(timer);
      resolve({ kind: 'command-finished', exitCode, signal, durationMs: performance.now() - started });
    });
  });
}

function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}
