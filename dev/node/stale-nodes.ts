/**
 * What a killed test leaves of its real nodes, swept at the next node start. SIGKILL
 * gives no exit hook a chance: the kernel still ends every process of the node (pid
 * namespace, pdeathsig) and with them its mounts, namespaces and interfaces, but the
 * node's (empty) cgroup directories and its directory under the temp dir stay.
 *
 * Each node's directory holds `owner` (pid and start time of the process that started
 * it). A node is stale when its directory is gone but its cgroups are not, or its owner
 * is no longer running (a pid reused by another process counts as gone: the start time
 * differs). A node whose owner runs is never touched, so concurrent test files are safe.
 * A node killed while frozen (freezer.ts) keeps its processes, frozen with their SIGKILL
 * pending: the sweep thaws its root first, so they die and its cgroups can go.
 * Not guaranteed: sweeping a node made by another user's temp dir ($TMPDIR differs).
 */
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hostCgroupHierarchies, removeCgroupRoot } from './cgroups.ts';
import { thawNode } from './freezer.ts';

export const NODE_DIR_PREFIX = 'leasehold-node-';
export const OWNER_FILE = 'owner';

export interface Owner {
  pid: number;
  start: string;
}

/** The start time (clock ticks since boot, field 22 of /proc/PID/stat) of a live pid. */
export function processStart(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

export function ownerText(owner: Owner): string {
  return `${owner.pid} ${owner.start}\n`;
}

export function parseOwner(text: string): Owner | undefined {
  const [pid, start] = text.trim().split(' ');
  return pid && start && /^\d+$/.test(pid) ? { pid: Number(pid), start } : undefined;
}

export type NodeState =
  | { dirExists: false; hasCgroups: boolean }
  | { dirExists: true; owner: Owner | undefined; ownerStartNow: string | undefined };

/** Pure: may the sweep remove this node's cgroups and directory? */
export function isStale(state: NodeState): boolean {
  if (!state.dirExists) return state.hasCgroups;
  // No owner file yet: a node being created right now.
  if (!state.owner) return false;
  return state.ownerStartNow !== state.owner.start;
}

/** Removes stale nodes; returns what it removed and what it could not (e.g. a busy cgroup). */
export function sweepStaleNodes(): { removed: string[]; problems: string[] } {
  const names = new Set<string>();
  for (const hierarchy of hostCgroupHierarchies())
    for (const entry of safeList(hierarchy)) if (entry.startsWith(NODE_DIR_PREFIX)) names.add(entry);
  for (const entry of safeList(tmpdir())) if (entry.startsWith(NODE_DIR_PREFIX)) names.add(entry);
  const removed: string[] = [];
  const problems: string[] = [];
  for (const name of names) {
    const dir = join(tmpdir(), name);
    const hasCgroups = hostCgroupHierarchies().some((h) => existsSync(join(h, name)));
    let state: NodeState;
    if (!existsSync(dir)) state = { dirExists: false, hasCgroups };
    else {
      let owner: Owner | undefined;
      try {
        owner = parseOwner(readFileSync(join(dir, OWNER_FILE), 'utf8'));
      } catch {
        owner = undefined;
      }
      state = { dirExists: true, owner, ownerStartNow: owner ? processStart(owner.pid) : undefined };
    }
    if (!isStale(state)) continue;
    thawNode(`/${name}`);
    let left = removeCgroupRoot(`/${name}`);
    // Thawed tasks take a moment to act on their pending SIGKILL.
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (let i = 0; i < 40 && left.length > 0; i++) {
      Atomics.wait(pause, 0, 0, 50);
      left = removeCgroupRoot(`/${name}`);
    }
    if (left.length > 0) {
      problems.push(...left);
      continue;
    }
    rmSync(dir, { recursive: true, force: true });
    removed.push(name);
  }
  return { removed, problems };
}

function safeList(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
