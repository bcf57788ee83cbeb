/**
 * The no-two-ganesha check on real nodes (dev/system/real-share.ts ganeshaWindows +
 * overlappingWindows): windows from /proc samples must pass for a clean handover and
 * fail whenever two ganesha processes were seen alive at once or one's life reached
 * into another's; a window ends at the first sample without its process (never at the
 * last one that saw it), and starts at the process's own start, not when first seen.
 * A process held by the freezer is not running: its window ends at the first sample
 * that saw it frozen and a thawed one opens at the last sample that saw it frozen, so
 * a thawed old server that runs on next to its replacement is an overlap. And the
 * check that a writer pinned to the old server saw no ack once the replacement ran
 * (acksSince) finds such an ack, and only such; and one no window of a running
 * process accounts for (acksOutsideWindows) is found.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import {
  acksOutsideWindows,
  acksSince,
  type GaneshaSample,
  ganeshaWindows,
} from '../../dev/system/real-share.ts';

const names: Record<string, string> = { 'uid-a': 'share-a', 'uid-b': 'share-b' };
// The start as /proc gives it (ticks) and as mapped to CLOCK_MONOTONIC, which jitters by
// a few ms from sample to sample: a window follows the ticks, not the mapping.
let jitter = 0;
const p = (podUid: string, pid: number, startMonoMs: number, frozen = false) => ({
  podUid,
  pid,
  startTicks: startMonoMs / 10,
  startMonoMs: startMonoMs + (jitter++ % 3) * 0.3,
  node: 'real-1',
  frozen,
});
const windowsOf = (samples: GaneshaSample[]) =>
  ganeshaWindows(
    samples,
    (u) => names[u],
    (ms) => `wall-${ms}`,
  );

test('a clean handover: the old process gone before the new one started', () => {
  const w = windowsOf([
    { atMonoMs: 100, seen: [p('uid-a', 10, 50)] },
    { atMonoMs: 200, seen: [p('uid-a', 10, 50)] },
    { atMonoMs: 300, seen: [] },
    { atMonoMs: 400, seen: [p('uid-b', 20, 350)] },
  ]);
  assert.deepEqual(
    w.map((x) => [x.id, Math.floor(x.startMonoMs), x.stopMonoMs]),
    [
      ['share-a', 50, 300],
      ['share-b', 350, undefined],
    ],
    'starts at the process start, ends at the first sample without it; the live one open',
  );
  assert.deepEqual(overlappingWindows(w, 500), []);
});

test('two seen in one sample: an overlap', () => {
  const w = windowsOf([
    { atMonoMs: 100, seen: [p('uid-a', 10, 50)] },
    { atMonoMs: 200, seen: [p('uid-a', 10, 50), p('uid-b', 20, 150)] },
    { atMonoMs: 300, seen: [p('uid-b', 20, 150)] },
  ]);
  assert.equal(overlappingWindows(w, 400).length, 1);
});

test('the new process started before the old one was seen gone (never seen together): an overlap', () => {
  const w = windowsOf([
    { atMonoMs: 100, seen: [p('uid-a', 10, 50)] },
    // uid-b started at 180, before the sample at 200 that no longer saw uid-a.
    { atMonoMs: 200, seen: [] },
    { atMonoMs: 300, seen: [p('uid-b', 20, 180)] },
  ]);
  assert.equal(overlappingWindows(w, 400).length, 1, 'the old window reaches the first sample without it');
});

test('a restart in the same pod (new pid) is a second window; an unnamed pod keeps its uid as id', () => {
  const w = windowsOf([
    { atMonoMs: 100, seen: [p('uid-a', 10, 50)] },
    { atMonoMs: 200, seen: [] },
    { atMonoMs: 300, seen: [p('uid-a', 11, 250)] },
    { atMonoMs: 400, seen: [p('uid-x', 30, 350), p('uid-a', 11, 250)] },
  ]);
  assert.deepEqual(
    w.map((x) => [x.id, x.pid, x.stopMonoMs]),
    [
      ['share-a', 10, 200],
      ['share-a', 11, undefined],
      ['uid-x', 30, undefined],
    ],
  );
  assert.equal(overlappingWindows(w, 400).length, 1, 'pid 11 and the unnamed pod overlap');
});

test('frozen: the old process held by the freezer while the new one starts is no overlap; its window ends at the first frozen sample', () => {
  const w = windowsOf([
    { atMonoMs: 100, seen: [p('uid-a', 10, 50)] },
    { atMonoMs: 200, seen: [p('uid-a', 10, 50, true)] },
    { atMonoMs: 300, seen: [p('uid-a', 10, 50, true), p('uid-b', 20, 250)] },
    { atMonoMs: 400, seen: [p('uid-a', 10, 50, true), p('uid-b', 20, 250)] },
  ]);
  assert.deepEqual(
    w.map((x) => [x.id, x.stopMonoMs, x.reason]),
    [
      ['share-a', 200, 'frozen'],
      ['share-b', undefined, undefined],
    ],
  );
  assert.deepEqual(overlappingWindows(w, 500), []);
});

test('thawed: an old process that runs again next to its replacement is an overlap, from the last frozen sample', () => {
  const w = windowsOf([
    { atMonoMs: 100, seen: [p('uid-a', 10, 50)] },
    { atMonoMs: 200, seen: [p('uid-a', 10, 50, true)] },
    { atMonoMs: 300, seen: [p('uid-a', 10, 50, true), p('uid-b', 20, 250)] },
    { atMonoMs: 400, seen: [p('uid-a', 10, 50), p('uid-b', 20, 250)] },
    { atMonoMs: 500, seen: [p('uid-b', 20, 250)] },
  ]);
  const thawed = w.filter((x) => x.id === 'share-a')[1]; // its reason now says how it ended
  assert.deepEqual([thawed?.id, thawed?.startMonoMs, thawed?.stopMonoMs], ['share-a', 300, 500]);
  assert.equal(overlappingWindows(w, 600).length, 1, 'the thawed old process ran next to the new one');
});

test('frozen and gone (killed while frozen, reaped at the thaw): no window after the freeze', () => {
  const w = windowsOf([
    { atMonoMs: 100, seen: [p('uid-a', 10, 50)] },
    { atMonoMs: 200, seen: [p('uid-a', 10, 50, true)] },
    { atMonoMs: 300, seen: [p('uid-b', 20, 250)] },
  ]);
  assert.equal(w.length, 2);
  assert.deepEqual(overlappingWindows(w, 400), []);
});

test('acksSince: an ack at or after the replacement started is reported, earlier ones and other events are not', () => {
  const events = [
    { event: 'ack', ms: 100, seq: 1, sentMs: 90 },
    { event: 'error', ms: 250 },
    { event: 'connected', ms: 300 },
    { event: 'ack', ms: 300, seq: 2, sentMs: 120 },
    { event: 'ack', ms: 420, seq: 3, sentMs: 410 },
  ];
  assert.deepEqual(acksSince(events, 300), [
    { ms: 300, seq: 2 },
    { ms: 420, seq: 3 },
  ]);
  assert.deepEqual(acksSince(events.slice(0, 3), 200), [], 'none after: the check passes');
});

test('acksOutsideWindows: an ack outside every window is found; inside one, or an open one, is not', () => {
  const acks = [
    { ms: 100, seq: 1 },
    { ms: 250, seq: 2 },
    { ms: 400, seq: 3 },
  ];
  assert.deepEqual(acksOutsideWindows(acks, [{ startMonoMs: 200, stopMonoMs: 300 }]), [
    { ms: 100, seq: 1 },
    { ms: 400, seq: 3 },
  ]);
  assert.deepEqual(
    acksOutsideWindows(acks, [
      { startMonoMs: 50, stopMonoMs: 120 },
      { startMonoMs: 240, stopMonoMs: undefined },
    ]),
    [],
  );
  assert.deepEqual(acksOutsideWindows(acks, []), acks, 'no window: every ack is outside');
  assert.deepEqual(
    acksOutsideWindows(acks, [{ startMonoMs: 200, stopMonoMs: 300 }], 100),
    [{ ms: 100, seq: 1 }],
    'the slack reaches past the end only, up to slackMs',
  );
});
