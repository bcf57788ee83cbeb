import assert from 'node:assert/strict';
import { test } from 'node:test';
import { considerStale, emptyStormGuard, forgetLease, stormStatus } from '../../manager/storm-guard.ts';

const config = { threshold: 0.5, minLeases: 3, windowMs: 10_000 };

test('one stale lease among many is never a storm', () => {
  const v = considerStale(emptyStormGuard, { key: 'a', nodeHealthy: true, tracked: 20, now: 0 }, config);
  assert.equal(v.allow, true);
  assert.equal(v.active, false);
});

test('a single lease out of one is not a storm (minLeases)', () => {
  const v = considerStale(emptyStormGuard, { key: 'a', nodeHealthy: true, tracked: 1, now: 0 }, config);
  assert.equal(v.allow, true);
});

test('more than the threshold of leases stale with healthy nodes pauses failovers', () => {
  let state = emptyStormGuard;
  const verdicts = [];
  for (const [i, key] of ['a', 'b', 'c', 'd'].entries()) {
    const v = considerStale(state, { key, nodeHealthy: true, tracked: 6, now: i * 100 }, config);
    state = v.state;
    verdicts.push(v.allow);
  }
  assert.deepEqual(verdicts, [true, true, true, false]);
  assert.equal(stormStatus(state, 6, 1000, config).active, true);
  assert.equal(stormStatus(state, 6, 20_000, config).active, false, 'the window passes');
});

test('stale leases on unhealthy nodes never count', () => {
  let state = emptyStormGuard;
  for (const key of ['a', 'b', 'c', 'd', 'e']) {
    const v = considerStale(state, { key, nodeHealthy: false, tracked: 5, now: 0 }, config);
    assert.equal(v.allow, true);
    state = v.state;
  }
});

test('a lease that renews stops being a suspect; the same lease counts once', () => {
  let state = emptyStormGuard;
  for (const key of ['a', 'a', 'b', 'c'])
    state = considerStale(state, { key, nodeHealthy: true, tracked: 4, now: 0 }, config).state;
  assert.equal(stormStatus(state, 4, 0, config).suspects, 3);
  assert.equal(stormStatus(state, 4, 0, config).active, true);
  state = forgetLease(state, 'c');
  assert.equal(stormStatus(state, 4, 0, config).active, false);
});
