/**
 * The serving-window log: JSON lines written by each share server, `start` before it
 * begins appending and serving and `stop` after it has stopped both. A window is thus
 * an over-approximation of the time the server served, which is what a safety check
 * needs: two windows of one volume that do not overlap prove two servers never served
 * it at once.
 *
 * A server killed with SIGKILL writes no `stop`; its window stays open (`stopMonoMs`
 * undefined) and the caller closes it with the time it knows the process died (e.g. the
 * e2e tests: its agent's `fenced` line, logged once every target is gone).
 * Times are CLOCK_MONOTONIC milliseconds (shared by all processes of the machine).
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';

export type WindowEvent =
  | { event: 'start'; id: string; pid: number; monoMs: number; wall: string; firstSeq: number }
  | { event: 'stop'; id: string; pid: number; monoMs: number; wall: string; lastSeq: number; reason: string };

export interface ServingWindow {
  id: string;
  pid: number;
  startMonoMs: number;
  startWall: string;
  firstSeq: number;
  stopMonoMs: number | undefined;
  stopWall: string | undefined;
  lastSeq: number | undefined;
  reason: string | undefined;
}

export function appendWindowEvent(path: string, event: WindowEvent): void {
  appendFileSync(path, `${JSON.stringify(event)}\n`);
}

/** Pairs start and stop lines by (id, pid) into windows, in order of start. */
export function parseServingWindows(text: string): ServingWindow[] {
  const windows: ServingWindow[] = [];
  const open = new Map<string, ServingWindow>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    let event: WindowEvent;
    try {
      event = JSON.parse(line) as WindowEvent;
    } catch {
      continue; // a partial last line of a killed writer
    }
    const key = `${event.id}/${event.pid}`;
    if (event.event === 'start') {
      const window: ServingWindow = {
        id: event.id,
        pid: event.pid,
        startMonoMs: event.monoMs,
        startWall: event.wall,
        firstSeq: event.firstSeq,
        stopMonoMs: undefined,
        stopWall: undefined,
        lastSeq: undefined,
        reason: undefined,
      };
      windows.push(window);
      open.set(key, window);
    } else {
      const window = open.get(key);
      if (!window) continue;
      window.stopMonoMs = event.monoMs;
      window.stopWall = event.wall;
      window.lastSeq = event.lastSeq;
      window.reason = event.reason;
      open.delete(key);
    }
  }
  return windows;
}

export function readServingWindows(path: string): ServingWindow[] {
  return existsSync(path) ? parseServingWindows(readFileSync(path, 'utf8')) : [];
}

/**
 * Pairs of windows that overlap in time. An open window counts as open until
 * `openUntilMs` (default: forever), so an unexplained open window is never hidden.
 * `openUntilMs` must be on the windows' clock (`monotonicMs()` from lib/clock.ts, not
 * `performance.now()`, whose origin is this process's start): a "now" earlier than an
 * open window's start can only come from another clock, and would hide that window, so
 * it throws instead.
 */
export function overlappingWindows(
  windows: readonly ServingWindow[],
  openUntilMs = Number.POSITIVE_INFINITY,
): Array<[ServingWindow, ServingWindow]> {
  for (const w of windows) {
    if (w.stopMonoMs === undefined && openUntilMs < w.startMonoMs) {
      throw new Error(
        `serving window of ${w.id} (pid ${w.pid}) is open since ${w.startMonoMs} ms but "now" is ${openUntilMs} ms: not CLOCK_MONOTONIC (use monotonicMs() from lib/clock.ts)`,
      );
    }
  }
  const overlaps: Array<[ServingWindow, ServingWindow]> = [];
  const end = (w: ServingWindow) => w.stopMonoMs ?? openUntilMs;
  for (let i = 0; i < windows.length; i++) {
    for (let j = i + 1; j < windows.length; j++) {
      const a = windows[i] as ServingWindow;
      const b = windows[j] as ServingWindow;
      if (a.startMonoMs < end(b) && b.startMonoMs < end(a)) overlaps.push([a, b]);
    }
  }
  return overlaps;
}
