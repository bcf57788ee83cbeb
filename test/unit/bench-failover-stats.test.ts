/**
 * The pure parts of the failover benchmark and the demo timeline: percentiles, the
 * emulated Longhorn verdict (first 1 s tick strictly after renewTime + lease), and the
 * timeline built from a failover's facts.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { longhornVerdictMs, percentile, summarize } from '../../bench/failover/stats.ts';
import { timelineOf } from '../../dev/system/failover-facts.ts';

test('percentile: nearest rank over the finite values', () => {
  assert.equal(percentile([], 50), undefined);
  assert.equal(percentile([Number.NaN], 50), undefined);
  assert.equal(percentile([3, 1, 2], 50), 2);
  assert.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95), 10);
  assert.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 50), 5);
  assert.equal(percentile([5, Number.NaN, 1], 100), 5);
});

test('longhornVerdictMs: the first tick strictly after renewTime + lease', () => {
  // renew at 10_000, lease 7 s: due 17_000; ticks at ...,16_500, 17_500 (phase 500)
  assert.equal(longhornVerdictMs(10_000, 7_000, 500), 17_500);
  // a tick exactly at the due time does not count (elapsed > lease, not >=)
  assert.equal(longhornVerdictMs(10_000, 7_000, 0), 18_000);
  // the phase may lie far in the future or past: only its position in the cycle matters
  assert.equal(longhornVerdictMs(10_000, 7_000, 99_250), 17_250);
  assert.equal(longhornVerdictMs(10_000, 7_000, -750), 17_250);
});

test('summarize', () => {
  assert.deepEqual(summarize([1, Number.NaN, 3, 2]), { n: 3, p50: 2, p95: 3, max: 3 });
  assert.deepEqual(summarize([]), { n: 0 });
});

test('timelineOf: seconds since the crash from every source, unknown steps left open', () => {
  const crashAt = new Date('2026-01-01T00:00:00.000Z');
  const plus = (s: number) => new Date(crashAt.getTime() + s * 1000);
  const steps = timelineOf({
    share: 's',
    crashedNode: 'real-1',
    faultSource: 'RealNode crash',
    crashAt,
    oldPod: 's-old',
    newPod: 's-new',
    newNode: 'real-2',
    status: { lastFailover: { detectedAt: plus(5).toISOString(), completedAt: plus(7.5).toISOString() } },
    scheduledAt: plus(5.3),
    attachedAt: plus(6.25),
    servingAt: plus(8),
    servingSource: 'NFS server log',
  });
  const at = (prefix: string) => steps.find((s) => s.step.startsWith(prefix));
  assert.deepEqual(at('node real-1 crashed'), {
    step: 'node real-1 crashed',
    seconds: 0,
    source: 'RealNode crash',
  });
  assert.equal(at('stale lease detected')?.seconds, 5);
  assert.equal(at('lease marked delinquent')?.seconds, undefined);
  assert.equal(at('scheduled on real-2')?.seconds, 5.3);
  assert.deepEqual(at('volume attached to real-2'), {
    step: 'volume attached to real-2',
    seconds: 6.25,
    source: 'CSI controller record',
  });
  assert.equal(at('new agent acquired')?.seconds, 7.5);
  assert.deepEqual(at('share served from real-2'), {
    step: 'share served from real-2',
    seconds: 8,
    source: 'NFS server log',
  });
});
