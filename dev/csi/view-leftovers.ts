/**
 * What the fencing driver's views (plugin/driver/fencing.go) may leave on the host: a
 * leasehold-fencefs process serving a volume of `backingDir`, or its FUSE mount in any
 * mount namespace (a node's, where the views are mounted; the host's never holds one).
 * Pure parts: `viewMountsIn` reads one mountinfo text; `isViewProcess` one argv.
 * `nodeStorageLeftovers` is one node's share of that, for its crash and stop: its
 * views' fencefs processes and the loop devices over its views' images (the block kind,
 * plugin/driver/block.go), which must go with the node's mount namespace.
 * Not guaranteed: a mount namespace no process is in (pinned only by a bind-mounted
 * ns file) is not seen; the testbed makes none.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * Where the controller part mounts views for the nodes (`<state dir>/views`), from its
 * backing dir: controller.ts makes both in one directory (`backing`, `state`).
 */
export const viewsDirOf = (backingDir: string): string => join(dirname(backingDir), 'state', 'views');

/** Pure: the mount points in `mountinfo` of a fencefs view of a volume under `backingDir`. */
export function viewMountsIn(mountinfo: string, backingDir: string): string[] {
  const out: string[] = [];
  for (const line of mountinfo.split('\n')) {
    const [left, right] = line.split(' - ');
    const [fstype, source] = (right ?? '').split(' ');
    if (fstype?.startsWith('fuse') && source?.startsWith(`${backingDir}/`))
      out.push(left?.split(' ')[4] ?? '');
  }
  return out;
}

/** Pure: whether `argv` is a leasehold-fencefs serving a volume under `backingDir`. */
export const isViewProcess = (argv: readonly string[], backingDir: string): boolean =>
  (argv[0] ?? '').endsWith('leasehold-fencefs') &&
  argv.some((a, i) => argv[i - 1] === '--backing' && a.startsWith(`${backingDir}/`));

/** Every view process and view mount of `backingDir` on the host, as messages. */
export function viewLeftovers(backingDir: string): string[] {
  const out = new Set<string>();
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (isViewProcess(argv, backingDir)) out.add(`leasehold-fencefs process ${pid} (${argv.join(' ')})`);
      for (const m of viewMountsIn(readFileSync(`/proc/${pid}/mountinfo`, 'utf8'), backingDir))
        out.add(`a view mounted at ${m} (seen by process ${pid})`);
    } catch {
      // gone meanwhile
    }
  }
  return [...out];
}

/** Pure: the view a fencefs argv serves for `node` (its --mountpoint `.../views/<volume>/<node>.<n>`). */
export const isNodeViewProcess = (argv: readonly string[], backingDir: string, node: string): boolean =>
  isViewProcess(argv, backingDir) &&
  argv.some((a, i) => argv[i - 1] === '--mountpoint' && isNodeViewPath(a, node));

const isNodeViewPath = (path: string, node: string): boolean => {
  const base = path.split('/').at(-1) ?? '';
  return (
    path.split('/').at(-3) === 'views' &&
    base.startsWith(`${node}.`) &&
    /^\d+$/.test(base.slice(node.length + 1))
  );
};

/**
 * Pure: the loop devices (name -> backing file, as /sys/block/loopN/loop/backing_file
 * reads) over an image in one of `node`'s views of the testbed whose backing dir is
 * `backingDir`. NB: only that testbed's: another testbed on the host (another test
 * file's) may have a node of the same name.
 */
export function nodeLoopsIn(
  backingFiles: ReadonlyMap<string, string>,
  node: string,
  backingDir: string,
): string[] {
  const out: string[] = [];
  const views = `${viewsDirOf(backingDir)}/`;
  for (const [loop, file] of backingFiles) {
    // NB: a backing file unlinked since reads with " (deleted)": still the node's.
    const path = file.trim().replace(/ \(deleted\)$/, '');
    const parts = path.split('/');
    if (
      path.startsWith(views) &&
      parts.at(-1) === 'disk.img' &&
      isNodeViewPath(parts.slice(0, -1).join('/'), node)
    )
      out.push(`loop device /dev/${loop} over ${file.trim()}`);
  }
  return out;
}

/** The host's loop devices with a backing file. */
export function hostLoopBackingFiles(): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of readdirSync('/sys/block').filter((n) => n.startsWith('loop'))) {
    try {
      out.set(name, readFileSync(`/sys/block/${name}/loop/backing_file`, 'utf8'));
    } catch {
      // not bound
    }
  }
  return out;
}

/** `node`'s storage access still on the host: its views' fencefs processes and loop devices. */
export function nodeStorageLeftovers(backingDir: string, node: string): string[] {
  const out: string[] = [];
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (isNodeViewProcess(argv, backingDir, node))
        out.push(`leasehold-fencefs process ${pid} serving ${node}'s view (${argv.join(' ')})`);
    } catch {
      // gone meanwhile
    }
  }
  return [...out, ...nodeLoopsIn(hostLoopBackingFiles(), node, backingDir)];
}
