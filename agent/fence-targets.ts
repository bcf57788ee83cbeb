/**
 * Which processes a fence stops, and whether this agent can stop them at all (pure).
 *
 * Targets:
 *  - `pod`: every process of the pod other than the agent itself, its own children and
 *    PID 1 (the pod's pause process, which serves nothing). Orphans of the server,
 *    reparented to PID 1, are targets too.
 *  - `signal`: processes matching the configured name, never the agent. Rule, first hit
 *    wins: 1. /proc/PID/comm equals the name (comm is cut to 15 characters by the
 *    kernel, so the name's first 15 characters are compared), or 2. the basename of any
 *    argv element equals the name, with or without its extension: `share-server`
 *    matches `/usr/bin/share-server` and `/app/share-server.js`.
 *
 * Preflight (checked before the agent acquires, so a server that could not be fenced is
 * never started; the agent then stays unready and says why):
 *  - `pod` needs a pod's shared PID namespace: PID 1 must be neither the agent nor one of
 *    its ancestors. That holds in a pod with shareProcessNamespace (PID 1 is the pause
 *    process; the agent's parent is the runtime, outside the namespace) and fails in a
 *    pod without it (the agent, or its init wrapper, is PID 1) and on a host (PID 1 is
 *    init, everybody's ancestor) — where `pod` would otherwise signal the whole machine.
 *  - `pod` and `signal` need CAP_KILL in the agent's effective set: without it a process
 *    may signal only processes of its own user, and an NFS server typically runs as root.
 *    NB: on a real node a non-root container gets no effective capabilities even with
 *    `capabilities.add` (Kubernetes sets no ambient capabilities), so the agent runs as
 *    uid 0 with every capability dropped but KILL (manager/share-model/pod-spec.ts).
 *  - `command` and `none` need nothing.
 */
import { basename, extname } from 'node:path';
import type { ProcessInfo } from './process-table.ts';

export const CAP_KILL = 5;

export type FenceTargetRule = { action: 'pod' } | { action: 'signal'; process: string };

export function fenceTargets(
  rule: FenceTargetRule,
  processes: readonly ProcessInfo[],
  selfPid: number,
): ProcessInfo[] {
  if (rule.action === 'signal') {
    return processes.filter((p) => p.pid !== selfPid && processMatches(rule.process, p.comm, p.argv));
  }
  const own = descendantsOf(selfPid, processes);
  return processes.filter((p) => p.pid !== selfPid && p.pid !== 1 && !own.has(p.pid));
}

/** The matching rule of `signal` (see the header). */
export function processMatches(name: string, comm: string, argv: readonly string[]): boolean {
  if (comm !== '' && comm === name.slice(0, 15)) return true;
  return argv.some((arg) => {
    const base = basename(arg);
    return base === name || (extname(base) !== '' && base.slice(0, -extname(base).length) === name);
  });
}

function descendantsOf(pid: number, processes: readonly ProcessInfo[]): Set<number> {
  const found = new Set<number>();
  let frontier = [pid];
  while (frontier.length > 0) {
    const parents = new Set(frontier);
    frontier = processes.filter((p) => parents.has(p.ppid) && !found.has(p.pid)).map((p) => p.pid);
    for (const p of frontier) found.add(p);
  }
  return found;
}

/** PIDs from `pid`'s parent up to the last one visible in this PID namespace. */
export function ancestorsOf(pid: number, processes: readonly ProcessInfo[]): number[] {
  const byPid = new Map(processes.map((p) => [p.pid, p]));
  const chain: number[] = [];
  let current = byPid.get(pid)?.ppid ?? 0;
  while (current !== 0 && !chain.includes(current)) {
    chain.push(current);
    current = byPid.get(current)?.ppid ?? 0;
  }
  return chain;
}

export interface PreflightFacts {
  selfPid: number;
  processes: readonly ProcessInfo[];
  /** Undefined when /proc/self/status could not be read. */
  credentials: { uid: number; capEff: bigint } | undefined;
}

/** Why this agent could not carry out its fence, or undefined when it can. */
export function fencePreflightProblem(
  action: 'none' | 'command' | FenceTargetRule['action'],
  facts: PreflightFacts,
): string | undefined {
  if (action === 'none' || action === 'command') return undefined;
  const { selfPid, processes, credentials } = facts;
  if (action === 'pod') {
    if (selfPid === 1) {
      return 'cannot fence: LEASEHOLD_FENCE_ACTION=pod needs the pod to share its process namespace (shareProcessNamespace: true), but the agent is PID 1 of its own';
    }
    if (ancestorsOf(selfPid, processes).includes(1)) {
      return 'cannot fence: LEASEHOLD_FENCE_ACTION=pod needs a pod that shares its process namespace (shareProcessNamespace: true): PID 1 here is an ancestor of the agent (its own init, or a host), so "every process but the agent" is not the pod';
    }
  }
  if (!credentials) return 'cannot fence: /proc/self/status is unreadable, so CAP_KILL cannot be checked';
  if ((credentials.capEff & (1n << BigInt(CAP_KILL))) === 0n) {
    return `cannot fence: LEASEHOLD_FENCE_ACTION=${action} needs CAP_KILL, and the agent (uid ${credentials.uid}) has effective capabilities 0x${credentials.capEff.toString(16)}: it could not signal a server of another user. Run the agent as uid 0 with capabilities drop [ALL], add [KILL] (a non-root container gets no effective capabilities on Kubernetes)`;
  }
  return undefined;
}
