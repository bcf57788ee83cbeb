import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sleep } from '../../lib/clock.ts';
import { WorkQueue } from '../../lib/work-queue.ts';

test('a key is queued once and never processed twice at the same time', async () => {
  const running = new Set<string>();
  const runs: string[] = [];
  let overlap = false;
  const q = new WorkQueue(
    async (key) => {
      if (running.has(key)) overlap = true;
      running.add(key);
      runs.push(key);
      await sleep(20);
      running.delete(key);
      return undefined;
    },
    () => {},
  );
  q.add('a');
  q.add('a');
  q.add('b');
  await sleep(5);
  q.add('a'); // in flight: runs once more afterwards
  q.add('a');
  await sleep(100);
  q.stop();
  assert.equal(overlap, false);
  assert.deepEqual(runs, ['a', 'b', 'a']);
});

test('failures are retried with backoff; a requested delay requeues', async () => {
  let calls = 0;
  const errors: unknown[] = [];
  const q = new WorkQueue(
    async () => {
      calls += 1;
      if (calls < 3) throw new Error(`attempt ${calls}`);
      return calls === 3 ? 30 : undefined;
    },
    (_key, err) => errors.push(err),
    { workers: 1, retryMs: 10, maxRetryMs: 40 },
  );
  q.add('x');
  await sleep(150);
  q.stop();
  assert.equal(errors.length, 2);
  assert.equal(calls, 4, 'two failures, one success asking for a requeue, one more run');
});

test("a failure's retry honours the server's Retry-After, and onError learns the count in a row", async () => {
  const calls: number[] = [];
  const counts: number[] = [];
  const q = new WorkQueue(
    async () => {
      calls.push(performance.now());
      if (calls.length === 1) {
        // As client-node's ApiException carries a 429's headers, inside our KubeApiError.
        throw Object.assign(new Error('HTTP 429'), {
          cause: Object.assign(new Error('Too Many Requests'), {
            code: 429,
            headers: { 'retry-after': '1' },
          }),
        });
      }
      return undefined;
    },
    (_key, _err, failures) => counts.push(failures),
    { workers: 1, retryMs: 10, maxRetryMs: 5_000 },
  );
  q.add('x');
  await sleep(1_300);
  q.stop();
  assert.equal(calls.length, 2);
  const waited = (calls[1] ?? 0) - (calls[0] ?? 0);
  assert.ok(waited >= 990, `retried after ${waited.toFixed(0)} ms, before the 1 s Retry-After`);
  assert.deepEqual(counts, [1]);
});
