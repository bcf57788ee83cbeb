/**
 * The no-two-servers check for servers without a window log (dev/system/server-process-windows.ts
 * + overlappingWindows): it must pass for a clean handover and fail for every way two
 * server processes can be alive at once, including a run whose start was never sampled.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { overlappingWindows } from '../../dev/share-server/serving-window-log.ts';
import {
  type ObservedExit,
  type ObservedStart,
  processWindows,
} from '../../dev/system/server-process-windows.ts';

const IMAGE = 'leasehold.dev/nfs-ganesha:dev';
const start = (pod: string, ms: number, node = 'sim-1'): ObservedStart => ({
  pod,
  container: 'server',
  node,
  image: IMAGE,
  startMonoMs: ms,
  startWall: `wall-${ms}`,
});
const exit = (pod: string, ms: number, extra: Partial<ObservedExit> = {}): ObservedExit => ({
  pod,
  container: 'server',
  node: 'sim-1',
  image: IMAGE,
  monoMs: ms,
  code: null,
  signal: 'SIGKILL',
  reason: 'killed',
  ...extra,
});
const windows = (starts: ObservedStart[], exits: ObservedExit[]) =>
  processWindows({
    starts,
    exits,
    imagePrefix: 'leasehold.dev/nfs-ganesha:',
    observedSinceMonoMs: 100,
    wallOf: (ms) => `wall-${ms}`,
  });
const overlaps = (starts: ObservedStart[], exits: ObservedExit[], now = 100_000) =>
  overlappingWindows(windows(starts, exits), now).map(([a, b]) => `${a.id}x${b.id}`);

test('a crash then a replacement: no overlap; each window ends at its observed exit', () => {
  const w = windows([start('s-a', 1_000), start('s-b', 9_000, 'sim-2')], [exit('s-a', 5_000)]);
  assert.deepEqual(
    w.map((x) => [x.id, x.startMonoMs, x.stopMonoMs]),
    [
      ['s-a', 1_000, 5_000],
      ['s-b', 9_000, undefined],
    ],
  );
  assert.deepEqual(overlaps([start('s-a', 1_000), start('s-b', 9_000)], [exit('s-a', 5_000)]), []);
});

test('violation: the old server still runs when the new one starts', () => {
  assert.deepEqual(overlaps([start('s-a', 1_000), start('s-b', 4_000)], [exit('s-a', 5_000)]), ['s-axs-b']);
});

test('violation: the old server never exited (open window) while the new one runs', () => {
  assert.deepEqual(overlaps([start('s-a', 1_000), start('s-b', 9_000)], []), ['s-axs-b']);
});

test('violation: an exit whose start was never sampled counts from the start of observation', () => {
  // s-x lived between samples: only its exit at 9_500 is known; it overlaps s-b.
  assert.deepEqual(overlaps([start('s-b', 9_000)], [exit('s-x', 9_500)]), ['s-xxs-b']);
  const w = windows([], [exit('s-x', 9_500)]);
  assert.equal(w[0]?.startMonoMs, 100);
  assert.match(w[0]?.reason ?? '', /start not observed/);
});

test('a restarted container: each run gets its own exit, in order', () => {
  const w = windows([start('s-a', 1_000), start('s-a', 3_000)], [exit('s-a', 2_000), exit('s-a', 4_000)]);
  assert.deepEqual(
    w.map((x) => [x.startMonoMs, x.stopMonoMs]),
    [
      [1_000, 2_000],
      [3_000, 4_000],
    ],
  );
  assert.deepEqual(overlappingWindows(w, 100_000), []);
});

test('exits of other images (the agent sidecar) and exits before the start are not the server', () => {
  const w = windows(
    [start('s-a', 1_000)],
    [exit('s-a', 500), exit('s-a', 2_000, { image: 'leasehold.dev/leasehold:dev', container: 'agent' })],
  );
  // The exit at 500 precedes the start: it is an unobserved earlier run, the observed one stays open.
  const a = w.filter((x) => x.startMonoMs === 1_000);
  assert.equal(a.length, 1);
  assert.equal(a[0]?.stopMonoMs, undefined);
  assert.equal(w.length, 2);
});
