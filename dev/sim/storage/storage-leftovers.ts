/**
 * What the fencing storage puts on the host, found again: its views (FUSE mounts of type
 * `fuse.leasehold-fencefs`), the ext4 file systems of the block kind mounted through them
 * and their loop devices (backing file under a sim root), and leasehold-fencefs
 * processes. Used two ways:
 *  - the leftover check: after stop(), `findStorageLeftovers(snapshot, root)` must be
 *    `[]` (pure: a snapshot of the host in, what is left under `root` out; a test proves
 *    it finds what a killed run leaves: test/unit/sim-storage-block.test.ts);
 *  - the sweep of a killed run (SIGKILL gives no exit hook a chance; leasehold-fencefs
 *    has a parent-death signal and detaches its mounts, but a SIGKILLed process group
 *    takes it along first): `sweepDeadStorage()` at each storage start lazily unmounts
 *    the file systems and views, and detaches the loop devices, of every sim root whose
 *    owner (`<root>/storage/owner`: pid and start time) no longer runs. A root whose
 *    owner runs is never touched, so concurrent test files are safe.
 *
 * Not guaranteed: finding a loop device whose view was already detached (the kernel
 * then names its backing file relative to the detached mount): it has autoclear and
 * goes when its file system is released; sweeping a root whose owner file was never
 * written (a storage that died in its first milliseconds).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type Owner, ownerText, parseOwner, processStart } from '../../node/stale-nodes.ts';

export const VIEW_FSTYPE = 'fuse.leasehold-fencefs';
export const STORAGE_DIR = 'storage';

export interface HostMount {
  mountpoint: string;
  fstype: string;
  source: string;
}

export interface LoopDevice {
  device: string;
  backingFile: string;
}

export interface StorageSnapshot {
  mounts: HostMount[];
  loops: LoopDevice[];
  /** Processes whose argv[0] ends in leasehold-fencefs, with their argv. */
  fencefs: { pid: number; argv: string[] }[];
}

export type StorageLeftover =
  | { kind: 'mount'; mountpoint: string; fstype: string }
  | { kind: 'loop'; device: string; backingFile: string }
  | { kind: 'process'; pid: number; argv: string[] };

const under = (path: string, root: string) => path === root || path.startsWith(`${root}/`);

/** Pure: what of the storage under `simRoot` is still on the host. */
export function findStorageLeftovers(snapshot: StorageSnapshot, simRoot: string): StorageLeftover[] {
  const out: StorageLeftover[] = [];
  for (const m of snapshot.mounts)
    if (under(m.mountpoint, simRoot)) out.push({ kind: 'mount', mountpoint: m.mountpoint, fstype: m.fstype });
  for (const l of snapshot.loops)
    if (under(l.backingFile, simRoot))
      out.push({ kind: 'loop', device: l.device, backingFile: l.backingFile });
  for (const p of snapshot.fencefs)
    if (p.argv.some((a) => under(a, simRoot))) out.push({ kind: 'process', pid: p.pid, argv: p.argv });
  return out;
}

export function describeStorageLeftovers(simRoot: string, left: readonly StorageLeftover[]): string {
  const lines = left.map((l) =>
    l.kind === 'mount'
      ? `mount ${l.mountpoint} (${l.fstype})`
      : l.kind === 'loop'
        ? `loop device ${l.device} on ${l.backingFile}`
        : `process ${l.pid}: ${l.argv.join(' ')}`,
  );
  return `the storage of ${simRoot} left ${left.length} thing(s) behind:\n  - ${lines.join('\n  - ')}`;
}

/** Pure: the sim roots the storage's mounts and loop devices belong to (path before /storage/). */
export function storageRoots(snapshot: StorageSnapshot): string[] {
  const roots = new Set<string>();
  const rootOf = (path: string) => {
    const i = path.indexOf(`/${STORAGE_DIR}/`);
    if (i > 0) roots.add(path.slice(0, i));
  };
  for (const m of snapshot.mounts) if (m.fstype === VIEW_FSTYPE) rootOf(m.mountpoint);
  for (const l of snapshot.loops) rootOf(l.backingFile);
  return [...roots].sort();
}

/** /proc/mounts' octal escapes (\040 for a space, ...). */
const unescapeMount = (s: string) =>
  s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));

export function hostStorageSnapshot(): StorageSnapshot {
  const mounts = readFileSync('/proc/mounts', 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const [source = '', mountpoint = '', fstype = ''] = l.split(' ');
      return { source: unescapeMount(source), mountpoint: unescapeMount(mountpoint), fstype };
    });
  const loops: LoopDevice[] = [];
  for (const name of safeList('/sys/block')) {
    if (!name.startsWith('loop')) continue;
    try {
      const backingFile = readFileSync(`/sys/block/${name}/loop/backing_file`, 'utf8').trim();
      loops.push({ device: `/dev/${name}`, backingFile });
    } catch {
      // not bound to a file
    }
  }
  const fencefs: StorageSnapshot['fencefs'] = [];
  for (const entry of safeList('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8')
        .split('\0')
        .filter((a) => a !== '');
      if (argv[0]?.endsWith('/leasehold-fencefs') || argv[0] === 'leasehold-fencefs')
        fencefs.push({ pid: Number(entry), argv });
    } catch {
      // gone meanwhile
    }
  }
  return { mounts, loops, fencefs };
}

export function ownerFile(simRoot: string): string {
  return join(simRoot, STORAGE_DIR, 'owner');
}

/** Marks `simRoot`'s storage as this process's (what the sweep of a later run reads). */
export function claimStorage(simRoot: string): void {
  mkdirSync(join(simRoot, STORAGE_DIR), { recursive: true, mode: 0o711 });
  const owner: Owner = { pid: process.pid, start: processStart(process.pid) ?? '' };
  writeFileSync(ownerFile(simRoot), ownerText(owner));
}

/** Pure: a root is dead when its owner file names a process that no longer runs. */
export function isDeadOwner(owner: Owner | undefined, ownerStartNow: string | undefined): boolean {
  return owner !== undefined && owner.start !== ownerStartNow;
}

/**
 * Cleans up after every dead owner's storage: file systems and views lazily unmounted
 * (deepest first), then loop devices detached. Returns what it did and what failed.
 */
export function sweepDeadStorage(snapshot: StorageSnapshot = hostStorageSnapshot()): {
  swept: string[];
  problems: string[];
} {
  const swept: string[] = [];
  const problems: string[] = [];
  for (const root of storageRoots(snapshot)) {
    let owner: Owner | undefined;
    try {
      owner = parseOwner(readFileSync(ownerFile(root), 'utf8'));
    } catch {
      owner = undefined;
    }
    if (!isDeadOwner(owner, owner ? processStart(owner.pid) : undefined)) continue;
    const left = findStorageLeftovers(snapshot, root);
    // File systems before the views they are mounted through; deeper paths first.
    const rank = (m: { fstype: string; mountpoint: string }) => (m.fstype === VIEW_FSTYPE ? 1 : 0);
    const mounts = left
      .filter((l) => l.kind === 'mount')
      .sort((a, b) => rank(a) - rank(b) || b.mountpoint.length - a.mountpoint.length);
    for (const m of mounts) {
      const r = spawnSync('umount', ['-l', m.mountpoint], { encoding: 'utf8' });
      if (r.status === 0) swept.push(`mount ${m.mountpoint}`);
      else problems.push(`umount -l ${m.mountpoint}: ${(r.stderr ?? '').trim()}`);
    }
    for (const l of left) {
      if (l.kind !== 'loop') continue;
      // NB: autoclear may have freed it once its file system went: ENXIO is done.
      const r = spawnSync('losetup', ['-d', l.device], { encoding: 'utf8' });
      if (r.status === 0) swept.push(`loop ${l.device}`);
      else if (!/No such device|ENXIO|not found/i.test(r.stderr ?? ''))
        problems.push(`losetup -d ${l.device}: ${(r.stderr ?? '').trim()}`);
    }
  }
  return { swept, problems };
}

function safeList(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
