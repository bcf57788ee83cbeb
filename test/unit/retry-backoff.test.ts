import assert from 'node:assert/strict';
import { test } from 'node:test';
import { retryAfterMsOf, retryPauseMs } from '../../lib/retry-backoff.ts';

const policy = { initialMs: 500, maxMs: 10_000 };

test('the pause doubles per failure up to the cap, jittered in [delay/2, delay)', () => {
  assert.equal(retryPauseMs(1, policy, 0), 250);
  assert.equal(retryPauseMs(1, policy, 0.999999) < 500, true);
  assert.equal(retryPauseMs(2, policy, 0), 500);
  assert.equal(retryPauseMs(3, policy, 0), 1000);
  assert.equal(retryPauseMs(6, policy, 0), 5000, '500 * 2^5 = 16 s is capped at 10 s, halved by the jitter');
  assert.equal(retryPauseMs(5000, policy, 0.5), 7500, 'no overflow for a huge count');
  assert.equal(retryPauseMs(0, policy, 0), 250, 'an attempt below 1 counts as the first');
  // A step failing for a minute asks at most 16 times even at the shortest jitter, not 120 (2 Hz).
  let total = 0;
  let asks = 0;
  for (let n = 1; total < 60_000; n += 1) {
    total += retryPauseMs(n, policy, 0);
    asks += 1;
  }
  assert.ok(asks <= 16, `${asks} asks in a minute`);
});

test("never sooner than the server's Retry-After, itself capped", () => {
  assert.equal(retryPauseMs(1, policy, 0, 3000), 3000);
  assert.equal(retryPauseMs(6, policy, 0.5, 3000), 7500, 'a longer backoff wins');
  assert.equal(retryPauseMs(1, policy, 0, 3_600_000), 10_000, 'an hour is capped at the policy maximum');
  assert.equal(retryPauseMs(1, policy, 0, Number.NaN), 250);
  assert.equal(retryPauseMs(1, policy, 0, -5), 250);
});

test('Retry-After is read from the error or its causes; only delay-seconds', () => {
  const api = (headers: Record<string, string>) =>
    Object.assign(new Error('HTTP 429'), { code: 429, headers });
  assert.equal(retryAfterMsOf(api({ 'retry-after': '2' })), 2000);
  assert.equal(retryAfterMsOf(new Error('wrapped', { cause: api({ 'retry-after': ' 1 ' }) })), 1000);
  assert.equal(retryAfterMsOf(api({ 'retry-after': 'Wed, 21 Oct 2015 07:28:00 GMT' })), undefined);
  assert.equal(retryAfterMsOf(api({})), undefined);
  assert.equal(retryAfterMsOf(new Error('no headers')), undefined);
  assert.equal(retryAfterMsOf(undefined), undefined);
});
