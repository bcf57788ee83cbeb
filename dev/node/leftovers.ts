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
 *
 * NB: the kernel reuses a namespace's id (its nsfs inode number) as soon as the
 * namespace is freed, and hands out the lowest free one: a node that starts right
 * after another stops (in this process or another test process) gets the stopped
 * node's ids, and its processes would look like the stopped node's leftovers. So a
 * node's namespace ids are only valid while a `NamespaceHold` keeps an fd open on each
 * namespace (from boot until the leftover check is done): a held namespace is not
 * freed, so no other namespace can carry its id. The hold itself is not a leftover
 * (it is this process, which the snapshot leaves out, and not a mount); a process in
 * the held namespaces still is. Not guarded the same way: the node's pids (the kernel
 * hands pids out in a cycle, so one is reused only after pid_max others).
 *
 * The fabric (fabric.ts, the node network of a cluster's real nodes) has its own
 * check, `findFabricLeftovers`: after its stop no process may be in its network
 * namespace or be its holder, no mount may be of that namespace, and no node's port
 * may still be on its bridge when the last node detached (read before the holder is
 * killed). Its namespace id is valid under the same kind of hold (net only).
 */

import { closeSync, fstatSync, openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { existingCgroups } from './cgroups.ts';

export interface NodeIdentity {
  dir: string;
  cgroupRoot: string;
  /**
   * `net:[4026532…]`-style ids of the node's namespaces, as /proc/PID/ns/* links read;
   * only those a NamespaceHold keeps (an id of a freed namespace names a stranger's).
   */
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
  | { kind: 'mount'; line: string }
  | { kind: 'link'; name: string };

/** The fabric as its leftover check knows it. */
export interface FabricIdentity {
  /** The held `net:[…]` id of the fabric's namespace (empty once released: then nothing is judged by it). */
  namespaces: readonly string[];
  /** The holder's pid. */
  pids: readonly number[];
}

/** What is left of a stopped fabric: `ports` are the links on its bridge other than the bridge and lo. */
export function findFabricLeftovers(
  fabric: FabricIdentity,
  snap: Pick<HostSnapshot, 'processes' | 'mountinfo'> & { ports: readonly string[] },
): Leftover[] {
  const found: Leftover[] = [];
  for (const p of snap.processes) {
    const why = fabric.pids.includes(p.pid)
      ? 'the fabric holder'
      : p.namespaces.some((ns) => fabric.namespaces.includes(ns))
        ? "in the fabric's network namespace"
        : undefined;
    if (why) found.push({ kind: 'process', pid: p.pid, cmdline: p.cmdline, why });
  }
  for (const line of snap.mountinfo.split('\n'))
    if (line !== '' && fabric.namespaces.some((ns) => line.includes(ns))) found.push({ kind: 'mount', line });
  for (const name of snap.ports) found.push({ kind: 'link', name });
  return found;
}

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

/** `owner` names what left them: "real node real-1", "the fabric of <dir>". */
export function describeLeftovers(owner: string, leftovers: readonly Leftover[]): string {
  const lines = leftovers.map((l) =>
    l.kind === 'process'
      ? `process ${l.pid} (${l.why}): ${l.cmdline.slice(0, 160)}`
      : l.kind === 'cgroup'
        ? `cgroup ${l.path}`
        : l.kind === 'mount'
          ? `mount ${l.line}`
          : `link ${l.name}`,
  );
  return `${owner} left ${leftovers.length} thing(s) behind:\n  - ${lines.join('\n  - ')}`;
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

/**
 * Open fds on a process's pid, net and mnt namespaces (or the `kinds` given: the
 * fabric holds only its net namespace, its pid and mnt are the host's): while held,
 * those namespaces live on (empty, once their processes are gone) and their ids
 * cannot be given to another. `ids` are read from the fds (fstat), so they name the namespaces held, even
 * if the process exited meanwhile. Node opens with O_CLOEXEC: no child inherits them.
 * `release()` closes them (idempotent); the process's exit closes them too.
 */
export interface NamespaceHold {
  readonly ids: readonly string[];
  release(): void;
}

export function holdNamespaces(
  pid: number,
  kinds: readonly (typeof NS_KINDS)[number][] = NS_KINDS,
): NamespaceHold {
  const fds: number[] = [];
  const release = () => {
    for (const fd of fds.splice(0)) closeSync(fd);
  };
  try {
    for (const k of kinds) fds.push(openSync(`/proc/${pid}/ns/${k}`, 'r'));
  } catch (err) {
    release();
    throw err;
  }
  const ids = kinds.map((k, i) => `${k}:[${fstatSync(fds[i] as number).ino}]`);
  return { ids, release };
}
