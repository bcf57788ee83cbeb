/**
 * inLanes (lanes.ts): at most N at once, in order, a rejection returned as its item's outcome.
 *   node --import tsx --test test/unit/bench-failover-lanes.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inLanes } from '../../bench/failover/lanes.ts';

test('inLanes: never more than the lanes at once, started in order, every item settles', async () => {
  let running = 0;
  let peak = 0;
  const started: number[] = [];
  const out = await inLanes([1, 2, 3, 4, 5], 2, async (n) => {
    started.push(n);
    running++;
    peak = Math.max(peak, running);
    await new Promise((r) => setTimeout(r, 5 * (6 - n)));
    running--;
    if (n === 3) throw new Error('mode 3 failed');
    return n * 10;
  });
  assert.equal(peak, 2);
  assert.deepEqual(started, [1, 2, 3, 4, 5]);
  assert.deepEqual(
    out.map((s) => (s.status === 'fulfilled' ? s.value : (s.reason as Error).message)),
    [10, 20, 'mode 3 failed', 40, 50],
  );
});
