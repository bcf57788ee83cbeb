/**
 * The leftover check of a real node: after stop, nothing the node made may remain on
 * the host. `findLeftovers` is pure (a snapshot in, the leftovers out);
 * `hostSnapshot` reads the snapshot from /proc and the cgroup file systems.
 *
 * What counts as a leftover:
 *  - a process that is in one of the node's namespaces (pid, net, mnt), in a cgroup
 *    under the node's cgroupRoot, one the node started itself (by pid), or whose
 *    command line names the node's directory (e.g. a containerd shim that escaped);
 *  - a cgroup directory under the node's cgroupRoot in any hierarchy;
 *  - a mount in the host's mount table under the node's directory, or of one of the
 *    node's namespaces (nsfs).
 * Interfaces, routes and nftables rules live only in the node's network namespace:
 * they are gone when no process and no mount holds that namespace any more, which the
 * rules above check. Not checked: files under the node's directory (stop removes it).
 */

import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { existingCgroups } from './cgroups.ts';

export interface NodeIdentity {
  dir: string;
  cgroupRoot: string;
  /** `net:[4026532…]`-style ids of the node's namespaces, as /proc/PID/ns/* links read. */
  namespaces: readonly string[];
  /** Pids of the processes the node started (holder, relay, containerd, kubelet). */
  pids: readonly number[];
}

export interface ProcessInfo {
  pid: number;
  cmdline: string;
  /** /proc/PID/cgroup text. */
  cgroup: string;
  namespaces: readonly string[];
}

export interface HostSnapshot {
  processes: readonly ProcessInfo[];
  mountinfo: string;
  /** Existing cgroup directories under the node's cgroupRoot (any hierarchy). */
  cgroups: readonly string[];
}

export type Leftover =
  | { kind: 'process'; pid: number; cmdline: string; why: string }
  | { kind: 'cgroup'; path: string }
  | { kind: 'mount'; line: string };

export function findLeftovers(node: NodeIdentity, snap: HostSnapshot): Leftover[] {
  const found: Leftover[] = [];
  const cgroupMark = `${node.cgroupRoot}/`;
  for (const p of snap.processes) {
    const why = node.pids.includes(p.pid)
      ? 'started by the node'
      : p.namespaces.some((ns) => node.namespaces.includes(ns))
        ? 'in a namespace of the node'
        : p.cgroup.split('\n').some((l) => l.endsWith(node.cgroupRoot) || l.includes(cgroupMark))
          ? `in a cgroup under ${node.cgroupRoot}`
          : p.cmdline.includes(node.dir)
            ? `its command line names ${node.dir}`
            : undefined;
    if (why) found.push({ kind: 'process', pid: p.pid, cmdline: p.cmdline, why });
  }
  for (const path of snap.cgroups) found.push({ kind: 'cgroup', path });
  for (const line of snap.mountinfo.split('\n')) {
    if (line === '') continue;
    const fields = line.split(' ');
    const [root, mountPoint] = [fields[3] ?? '', fields[4] ?? ''];
    const underDir = (p: string) => p === node.dir || p.startsWith(`${node.dir}/`);
    if (underDir(mountPoint) || underDir(root) || node.namespaces.some((ns) => line.includes(ns)))
      found.push({ kind: 'mount', line });
  }
  return found;
}

export function describeLeftovers(nodeName: string, leftovers: readonly Leftover[]): string {
  const lines = leftovers.map((l) =>
    l.kind === 'process'
      ? `process ${l.pid} (${l.why}): ${l.cmdline.slice(0, 160)}`
      : l.kind === 'cgroup'
        ? `cgroup ${l.path}`
        : `mount ${l.line}`,
  );
  return `real node ${nodeName} left ${leftovers.length} thing(s) behind:\n  - ${lines.join('\n  - ')}`;
}

const NS_KINDS = ['pid', 'net', 'mnt'] as const;

/** Every process on the host, best effort (a process may exit while it is read). */
export function hostProcesses(): ProcessInfo[] {
  const out: ProcessInfo[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    if (pid === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      const cgroup = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
      const namespaces = NS_KINDS.map((k) => readlinkSync(`/proc/${pid}/ns/${k}`));
      out.push({ pid, cmdline, cgroup, namespaces });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

export function hostSnapshot(node: NodeIdentity): HostSnapshot {
  return {
    processes: hostProcesses(),
    mountinfo: readFileSync('/proc/self/mountinfo', 'utf8'),
    cgroups: existingCgroups(node.cgroupRoot),
  };
}

/** The namespaces of a running process, as /proc/PID/ns/{pid,net,mnt} read. */
export function namespacesOf(pid: number): string[] {
  return NS_KINDS.map((k) => readlinkSync(`/proc/${pid}/ns/${k}`));
}
