/**
 * Freezing a real node: every process of its pid namespace (pause as PID 1, containerd,
 * the shims, the kubelet, kube-proxy, every container) stopped by the cgroup v1
 * freezer, and thawed again. This machine mounts the v1 `freezer` controller (cgroup v1
 * hybrid); the node's cgroupRoot exists in that hierarchy (cgroups.ts) and the kubelet
 * puts its pods under it. The node's daemons start in the test process's freezer
 * cgroup, so freezing moves them, in the freezer hierarchy only (their cpu, memory and
 * other cgroups do not change), into `<cgroupRoot>/node` first, then freezes the root,
 * which freezes everything below it (v1 freezing is hierarchical).
 *
 * Guarantees: only cgroups under the node's root are made or written; the host's
 * cgroups are read, never changed. A process the node forks while it is being frozen
 * is caught by moving again until every process of the pid namespace is under the
 * root. Not guaranteed: that the state reads FROZEN at once (the kernel reports
 * FREEZING until every task stopped; a task in uninterruptible sleep delays it).
 * NB: a frozen v1 task ignores SIGKILL until thawed: thaw before killing.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { LeaseholdError } from '../../lib/errors.ts';

/** The freezer hierarchy's mount point in a mountinfo text (the v1 cgroup mount whose options name `freezer`). */
export function freezerMountIn(mountinfo: string): string | undefined {
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    const [fstype, , superOptions] = (right ?? '').split(' ');
    if (fstype === 'cgroup' && superOptions?.split(',').includes('freezer')) return left?.split(' ')[4];
  }
  return undefined;
}

export function freezerMount(): string {
  const mount = freezerMountIn(readFileSync('/proc/self/mountinfo', 'utf8'));
  if (!mount)
    throw new LeaseholdError(
      'E_NODE_FREEZER',
      'no cgroup v1 freezer hierarchy is mounted (/proc/self/mountinfo); freezing a real node needs one',
    );
  return mount;
}

/** Host pids of every process in the pid namespace `pidNs` (as /proc/PID/ns/pid reads). */
export function processesInPidNs(pidNs: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (readlinkSync(`/proc/${name}/ns/pid`) === pidNs) pids.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** The process's freezer cgroup path (from /proc/PID/cgroup), or undefined if gone. */
export function freezerCgroupOf(pid: number): string | undefined {
  try {
    const line = readFileSync(`/proc/${pid}/cgroup`, 'utf8')
      .split('\n')
      .find((l) => l.split(':')[1]?.split(',').includes('freezer'));
    return line?.slice(line.indexOf(':', line.indexOf(':') + 1) + 1);
  } catch {
    return undefined;
  }
}

const under = (path: string | undefined, root: string) =>
  path !== undefined && (path === root || path.startsWith(`${root}/`));

/**
 * Freezes every process of the node's pid namespace, and the host processes `also`
 * names (those run in the node's network namespace only: node.ts spawnInNetwork).
 */
export function freezeNode(
  pidNs: string,
  cgroupRoot: string,
  also: () => readonly number[] = () => [],
): void {
  const mount = freezerMount();
  const daemons = join(mount, cgroupRoot, 'node');
  if (!existsSync(daemons)) mkdirSync(daemons);
  const moveStrays = () => {
    let moved = 0;
    for (const pid of [...processesInPidNs(pidNs), ...also()]) {
      if (under(freezerCgroupOf(pid), cgroupRoot)) continue;
      try {
        writeFileSync(join(daemons, 'cgroup.procs'), `${pid}\n`);
        moved++;
      } catch {
        // exited meanwhile
      }
    }
    return moved;
  };
  moveStrays();
  writeFileSync(join(mount, cgroupRoot, 'freezer.state'), 'FROZEN\n');
  for (let round = 0; round < 20 && moveStrays() > 0; round++);
}

/** Thaws the node; a no-op when the cgroup or the freezer hierarchy does not exist (nothing is frozen then). */
export function thawNode(cgroupRoot: string): void {
  const mount = freezerMountIn(readFileSync('/proc/self/mountinfo', 'utf8'));
  const state = mount && join(mount, cgroupRoot, 'freezer.state');
  if (state && existsSync(state)) writeFileSync(state, 'THAWED\n');
}

/** The root's freezer state: THAWED, FREEZING or FROZEN (undefined if the cgroup is gone). */
export function freezerState(cgroupRoot: string): string | undefined {
  try {
    return readFileSync(join(freezerMount(), cgroupRoot, 'freezer.state'), 'utf8').trim();
  } catch {
    return undefined;
  }
}

/**
 * The freezer cgroup of pod `podUid` (the kubelet's `.../pod<uid>` directory, relative to
 * the freezer mount), from the freezer cgroups of `pids` (its processes); undefined when
 * none of them is under such a directory.
 */
export function podFreezerCgroup(podUid: string, pids: readonly number[]): string | undefined {
  const dir = new RegExp(`^(.*/pod${podUid.replace(/[^0-9a-f-]/g, '')})(/|$)`);
  for (const pid of pids) {
    const m = dir.exec(freezerCgroupOf(pid) ?? '');
    if (m?.[1]) return m[1];
  }
  return undefined;
}

/**
 * Freezes one cgroup (e.g. a pod's, podFreezerCgroup) and everything below it, nothing
 * else: its processes stop, the node's daemons and other pods run on. Throws naming the
 * cgroup when it is not in the freezer hierarchy. Thaw with thawNode(path) (any cgroup).
 */
export function freezeCgroup(path: string): void {
  const state = join(freezerMount(), path, 'freezer.state');
  if (!existsSync(state))
    throw new LeaseholdError('E_NODE_FREEZER', `cgroup ${path}: no freezer.state in the freezer hierarchy`);
  writeFileSync(state, 'FROZEN\n');
}
