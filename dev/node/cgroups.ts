/**
 * A real node's cgroup root: one directory of the same name in every cgroup hierarchy
 * the host has mounted (this machine: cgroup v1 controllers, name=systemd and the
 * cgroup2 `unified` one), made before the kubelet starts (it refuses a cgroupRoot that
 * does not exist) and removed, deepest first, after every process in it is gone.
 *
 * Guarantees: only directories under the node's own root are made or removed; the
 * host's cgroup mounts and the settings of existing cgroups are never changed. The
 * cpuset root is seeded with its parent's cpus and mems (a v1 cpuset starts empty and
 * would take no task). Not guaranteed: removal while a task is still in a cgroup
 * (rmdir fails with EBUSY; the caller reports it as a leftover).
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Mount points of the cgroup (v1) and cgroup2 file systems in a mountinfo text. */
export function cgroupHierarchies(mountinfo: string): string[] {
  const points: string[] = [];
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    const fstype = right.split(' ')[0];
    const mountPoint = left.split(' ')[4];
    if ((fstype === 'cgroup' || fstype === 'cgroup2') && mountPoint) points.push(mountPoint);
  }
  return points;
}

export function hostCgroupHierarchies(): string[] {
  return cgroupHierarchies(readFileSync('/proc/self/mountinfo', 'utf8'));
}

/** `root` is absolute within a hierarchy, e.g. /leasehold-node-abc. */
export function createCgroupRoot(root: string): void {
  const levels = root.split('/').filter(Boolean);
  for (const hierarchy of hostCgroupHierarchies()) {
    let parent = hierarchy;
    for (const level of levels) {
      const dir = join(parent, level);
      if (!existsSync(dir)) mkdirSync(dir);
      for (const file of ['cpuset.cpus', 'cpuset.mems']) {
        const own = join(dir, file);
        if (existsSync(own) && readFileSync(own, 'utf8').trim() === '')
          writeFileSync(own, readFileSync(join(parent, file), 'utf8'));
      }
      parent = dir;
    }
  }
}

/** Directories of the root (and below) that still exist, in every hierarchy. */
export function existingCgroups(root: string): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    found.push(dir);
    for (const entry of readdirSync(dir, { withFileTypes: true }))
      if (entry.isDirectory()) walk(join(dir, entry.name));
  };
  for (const hierarchy of hostCgroupHierarchies()) {
    const dir = join(hierarchy, root);
    if (existsSync(dir)) walk(dir);
  }
  return found;
}

/** Removes the root's cgroups deepest first; returns the problems (empty when all went). */
export function removeCgroupRoot(root: string): string[] {
  const problems: string[] = [];
  const dirs = existingCgroups(root).sort((a, b) => b.length - a.length);
  for (const dir of dirs) {
    try {
      rmdirSync(dir);
    } catch (err) {
      problems.push(`${dir}: ${(err as Error).message}`);
    }
  }
  return problems;
}
