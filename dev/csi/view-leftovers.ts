/**
 * What the fencing driver's views (plugin/driver/fencing.go) may leave on the host: a
 * leasehold-fencefs process serving a volume of `backingDir`, or its FUSE mount in any
 * mount namespace (a node's, where the views are mounted; the host's never holds one).
 * Pure parts: `viewMountsIn` reads one mountinfo text; `isViewProcess` one argv.
 * Not guaranteed: a mount namespace no process is in (pinned only by a bind-mounted
 * ns file) is not seen; the testbed makes none.
 */
import { readdirSync, readFileSync } from 'node:fs';

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
