/**
 * The serving-window overlap check, the safety check of every end-to-end scenario. It
 * must fail on a violation: these tests feed it overlapping windows (closed and open)
 * and the "now" an e2e check really passes, and a "now" from the wrong clock.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  appendWindowEvent,
  overlappingWindows,
  readServingWindows,
  type ServingWindow,
} from '../../dev/share-server/serving-window-log.ts';
import { monotonicMs } from '../../lib/clock.ts';

const w = (id: string, start: number, stop: number | undefined): ServingWindow => ({
  id,
  pid: 1,
  startMonoMs: start,
  startWall: '',
  firstSeq: 1,
  stopMonoMs: stop,
  stopWall: undefined,
  lastSeq: undefined,
  reason: undefined,
});

test('closed windows: touching ones do not overlap, intersecting ones do', () => {
  assert.equal(overlappingWindows([w('a', 0, 10), w('b', 10, 20)]).length, 0);
  assert.equal(overlappingWindows([w('a', 0, 10), w('b', 9, 20)]).length, 1);
  assert.equal(overlappingWindows([w('a', 0, 30), w('b', 10, 20)]).length, 1, 'one inside the other');
});

test('an open window overlaps every later window, also when checked "now"', () => {
  assert.equal(overlappingWindows([w('a', 0, undefined), w('b', 100, 200)]).length, 1);
  assert.equal(overlappingWindows([w('a', 0, undefined), w('b', 100, undefined)], 150).length, 1);
  assert.equal(overlappingWindows([w('a', 0, undefined), w('b', 100, 200)], 150).length, 1);
});

test('windows stamped by a server process and checked with monotonicMs(): an old server that never stopped is caught', () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-windows-'));
  try {
    const log = join(dir, 'serving-windows.jsonl');
    const wall = new Date().toISOString();
    // The old server started and never wrote `stop` (still running, or SIGKILLed unseen).
    appendWindowEvent(log, { event: 'start', id: 'old', pid: 10, monoMs: monotonicMs(), wall, firstSeq: 1 });
    appendWindowEvent(log, {
      event: 'start',
      id: 'new',
      pid: 11,
      monoMs: monotonicMs() + 1,
      wall,
      firstSeq: 5,
    });
    appendWindowEvent(log, {
      event: 'stop',
      id: 'new',
      pid: 11,
      monoMs: monotonicMs() + 2,
      wall,
      lastSeq: 9,
      reason: 'SIGTERM',
    });
    const overlaps = overlappingWindows(readServingWindows(log), monotonicMs() + 3);
    assert.deepEqual(
      overlaps.map(([a, b]) => `${a.id} x ${b.id}`),
      ['old x new'],
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a "now" from another clock (earlier than an open window began) is refused, not a silent pass', () => {
  // performance.now() counts from this process's start; CLOCK_MONOTONIC from the boot.
  const start = monotonicMs() + 60_000;
  assert.throws(() => overlappingWindows([w('a', start, undefined), w('b', start + 1, start + 2)], 5), {
    message: /not CLOCK_MONOTONIC/,
  });
});
