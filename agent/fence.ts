/**
 * Fencing: stop the local server once the agent can no longer prove it holds the lease.
 * The caller drops readiness first and exits non-zero after this returns, whatever the
 * outcome; the result says exactly what happened, for the one log line.
 *
 * Actions (targets: fence-targets.ts):
 *  - pod (the default) and signal: send the configured signal (SIGTERM by default) to
 *    every target; after the grace period, look again (a server may have forked) and
 *    SIGKILL whatever still runs; then wait until every target is gone — exited or a
 *    zombie, checked by (pid, start time) — or the fence timeout passes.
 *  - command: `/bin/sh -c <command>` in its own process group, SIGKILLed (the whole
 *    group) at the fence timeout.
 *  - none: nothing beyond dropping readiness and exiting (explicit opt-out only).
 *
 * Guarantee: returns within the fence timeout (+ one poll step, 10 ms) of its start;
 * config.ts and lib/fence-timing.ts keep that timeout below D - T, so a fence ends
 * before any manager may declare the holder dead. A target that survives SIGKILL (a
 * process in uninterruptible I/O) is reported as `incomplete`; the server container's
 * liveness probe on the agent (the kubelet's backstop) then stops it independently.
 * NB: the agent never signals itself or its own children.
 * NB: node:child_process is required only by the `command` action, when it runs (~0.5 MB
 * of RSS every other agent saves; a built-in loads in about a millisecond).
 */
import { createRequire } from 'node:module';
import type { Clock } from '../lib/clock.ts';
import { sleep } from '../lib/clock.ts';
import type { FenceConfig } from './config.ts';
import { type FenceTargetRule, fenceTargets } from './fence-targets.ts';
import { isRunning, listProcesses, type ProcessRef } from './process-table.ts';

export type FenceResult =
  | { kind: 'none' }
  /** Nothing to stop: no target was running when the fence began. */
  | { kind: 'no-process'; targets: string }
  /** Every target is gone; `killed` needed SIGKILL. */
  | { kind: 'stopped'; signal: string; pids: number[]; killed: number[]; durationMs: number }
  /** Some targets still ran at the fence timeout; `refused` lists kill() errors (EPERM). */
  | {
      kind: 'incomplete';
      signal: string;
      pids: number[];
      remaining: number[];
      refused: string[];
      durationMs: number;
    }
  | { kind: 'command-finished'; exitCode: number | null; signal: string | null; durationMs: number }
  | { kind: 'command-timed-out'; durationMs: number }
  | { kind: 'command-failed'; error: string };

const POLL_MS = 10;

export async function runFence(config: FenceConfig, clock: Clock, procDir = '/proc'): Promise<FenceResult> {
  if (config.action === 'none') return { kind: 'none' };
  if (config.action === 'command') return runFenceCommand(config.command, config.timeoutMs, clock);
  const rule: FenceTargetRule =
    config.action === 'pod' ? { action: 'pod' } : { action: 'signal', process: config.process };
  return stopTargets(rule, config.signal, config.graceMs, config.timeoutMs, clock, procDir);
}

async function stopTargets(
  rule: FenceTargetRule,
  signal: NodeJS.Signals,
  graceMs: number,
  timeoutMs: number,
  clock: Clock,
  procDir: string,
): Promise<FenceResult> {
  const startedAt = clock.now();
  const scan = (): ProcessRef[] =>
    // NB: argv only for `signal`'s name rule: the pod fence never reads a process's memory.
    fenceTargets(rule, listProcesses(procDir, { argv: rule.action === 'signal' }), process.pid).map((p) => ({
      pid: p.pid,
      startTime: p.startTime,
    }));
  const targets = scan();
  if (targets.length === 0)
    return { kind: 'no-process', targets: rule.action === 'pod' ? 'the pod' : rule.process };
  const refused: string[] = [];
  const send = (refs: readonly ProcessRef[], sig: NodeJS.Signals) => {
    for (const ref of refs) {
      try {
        process.kill(ref.pid, sig);
      } catch (err) {
        // ESRCH: it ended between the scan and the signal, nothing left to stop.
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ESRCH') refused.push(`${ref.pid} ${sig}: ${code ?? String(err)}`);
      }
    }
  };
  const running = (refs: readonly ProcessRef[]) => refs.filter((r) => isRunning(r, procDir));
  const waitGone = async (refs: readonly ProcessRef[], untilMs: number) => {
    while (running(refs).length > 0 && clock.now() < untilMs) await sleep(POLL_MS);
  };

  send(targets, signal);
  if (signal !== 'SIGKILL') await waitGone(targets, startedAt + graceMs);
  // Look again: a target may have forked while it shut down.
  const known = new Set(targets.map((r) => `${r.pid}/${r.startTime}`));
  const all = [...targets, ...scan().filter((r) => !known.has(`${r.pid}/${r.startTime}`))];
  const survivors = running(all);
  send(survivors, 'SIGKILL');
  await waitGone(all, startedAt + timeoutMs);
  const remaining = running(all).map((r) => r.pid);
  const durationMs = Math.round((clock.now() - startedAt) * 10) / 10;
  const pids = all.map((r) => r.pid);
  if (remaining.length > 0) return { kind: 'incomplete', signal, pids, remaining, refused, durationMs };
  return {
    kind: 'stopped',
    signal,
    pids,
    killed: signal === 'SIGKILL' ? pids : survivors.map((r) => r.pid),
    durationMs,
  };
}

function runFenceCommand(command: string, timeoutMs: number, clock: Clock): Promise<FenceResult> {
  const startedAt = clock.now();
  const took = () => Math.round((clock.now() - startedAt) * 10) / 10;
  return new Promise((resolve) => {
    const { spawn } = createRequire(import.meta.url)(
      'node:child_process',
    ) as typeof import('node:child_process');
    const child = spawn('/bin/sh', ['-c', command], { stdio: 'inherit', detached: true });
    const timer = setTimeout(() => {
      killGroup(child.pid);
      resolve({ kind: 'command-timed-out', durationMs: took() });
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      resolve({ kind: 'command-failed', error: err.message });
    });
    child.once('exit', (exitCode, signal) => {
      clearTimeout(timer);
      resolve({ kind: 'command-finished', exitCode, signal, durationMs: took() });
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
