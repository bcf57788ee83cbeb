/**
 * Serving windows of a server that keeps no window log of its own (the shipped NFS
 * server: Debian's ganesha.nfsd), derived from what the simulated kubelet observed of
 * its container processes. Pure: observed starts and exits in, windows out, in the shape
 * of dev/share-server/serving-window-log.ts so `overlappingWindows` checks them.
 *
 * A window is the container process's whole life as the kubelet saw it: from the
 * moment the kubelet was about to spawn it (its `startedAt`, taken before the spawn,
 * so no earlier than the real start) to the exit the kubelet observed (after the real
 * death: a SIGKILLed process is reaped, then recorded). A server can only answer while
 * its process lives, so this over-approximates when it served, which is what the
 * no-two-servers check needs: non-overlapping windows prove no two servers ran at once.
 *
 * Guarantees: every observed exit belongs to a window. An exit whose start was never
 * observed (the sampler missed a short run) gets a window from `observedSinceMonoMs`
 * (the start of observation), never a shorter one; a start without an exit stays open
 * (overlappingWindows then counts it as open until "now"). Exits of other images are
 * ignored.
 * Not guaranteed: that the server actually served for the whole window (it is an upper
 * bound), nor anything about processes on a frozen node (a SIGSTOPped process is alive:
 * its window stays open across the freeze, as it should for the check).
 * Times are CLOCK_MONOTONIC ms (lib/clock.ts monotonicMs); a start observed on the wall
 * clock is converted by the caller with the offset between the two clocks at sampling.
 */
import type { ServingWindow } from '../share-server/serving-window-log.ts';

export interface ObservedStart {
  pod: string;
  container: string;
  node: string;
  image: string;
  /** The kubelet's startedAt, on the monotonic clock. */
  startMonoMs: number;
  startWall: string;
}

export interface ObservedExit {
  pod: string;
  container: string;
  node: string;
  image: string;
  monoMs: number;
  code: number | null;
  signal: string | null;
  reason: string;
}

export interface ProcessWindowInput {
  starts: readonly ObservedStart[];
  exits: readonly ObservedExit[];
  /** Only containers whose image starts with this (e.g. `leasehold.dev/nfs-ganesha:`). */
  imagePrefix: string;
  /** Containers of these pods only (a share's pods); all when undefined. */
  pods?: ReadonlySet<string>;
  /** When observation began: the window start of an exit whose start was not seen. */
  observedSinceMonoMs: number;
  /** Converts a monotonic moment to a wall-clock ISO string (for messages). */
  wallOf: (monoMs: number) => string;
}

export function processWindows(input: ProcessWindowInput): ServingWindow[] {
  const wanted = (x: { image: string; pod: string }) =>
    x.image.startsWith(input.imagePrefix) && (input.pods === undefined || input.pods.has(x.pod));
  const starts = input.starts.filter(wanted).sort((a, b) => a.startMonoMs - b.startMonoMs);
  const exits = input.exits.filter(wanted).sort((a, b) => a.monoMs - b.monoMs);
  const claimed = new Set<ObservedExit>();
  const windows: ServingWindow[] = [];
  for (const s of starts) {
    const exit = exits.find(
      (e) => !claimed.has(e) && e.pod === s.pod && e.container === s.container && e.monoMs >= s.startMonoMs,
    );
    if (exit) claimed.add(exit);
    windows.push(windowOf(s.pod, s.startMonoMs, s.startWall, exit, input.wallOf, 'observed start'));
  }
  for (const e of exits) {
    if (claimed.has(e)) continue;
    const since = input.observedSinceMonoMs;
    windows.push(
      windowOf(
        e.pod,
        since,
        input.wallOf(since),
        e,
        input.wallOf,
        'start not observed: window from the start of observation',
      ),
    );
  }
  return windows.sort((a, b) => a.startMonoMs - b.startMonoMs);
}

function windowOf(
  pod: string,
  startMonoMs: number,
  startWall: string,
  exit: ObservedExit | undefined,
  wallOf: (monoMs: number) => string,
  how: string,
): ServingWindow {
  return {
    id: pod,
    pid: 0,
    startMonoMs,
    startWall,
    firstSeq: 0,
    stopMonoMs: exit?.monoMs,
    stopWall: exit ? wallOf(exit.monoMs) : undefined,
    lastSeq: undefined,
    reason: exit
      ? `${how}; process exit observed by the kubelet on ${exit.node} (${exit.signal ?? exit.code}, ${exit.reason})`
      : `${how}; still running`,
  };
}
