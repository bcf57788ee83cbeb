/**
 * The failover benchmark's judgement of one crash sample (stats.ts): a serving that
 * began before the crash is rejected, never reported as a negative crash-to-serving
 * (bench/results/failover-adc-1m-grace-40s-hb-10s-longhorn+leasehold-oos+stock.json,
 * longhorn run 4: -38.22 s, the share had moved during the pause before the crash); the
 * victim is re-checked after the pause; Longhorn's emulated shift cannot produce a
 * figure earlier than its own verdict; the load average summary.
 *   node --import tsx --test test/unit/bench-failover-crash-sample.test.ts
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  clientFlowing,
  crashToServing,
  emulateLonghornVerdict,
  shiftByDetection,
  summarize,
  summarizeLoad,
  victimStillServing,
} from '../../bench/failover/stats.ts';

const CRASH = Date.parse('2026-12-01T11:20:00Z');

test('crashToServing: a serving window that began 38.22 s before the crash is rejected, not -38.22 s', () => {
  const judged = crashToServing(CRASH, CRASH - 38_220, 150_000);
  assert.equal(judged.kind, 'rejected');
  assert.ok(
    judged.kind === 'rejected' && /38\.22 s before the crash/.test(judged.reason),
    JSON.stringify(judged),
  );
  // exactly at the crash is not a failover of it either
  assert.equal(crashToServing(CRASH, CRASH, 150_000).kind, 'rejected');
});

test('crashToServing: after the crash it is measured in seconds; none or past the budget is not served', () => {
  assert.deepEqual(crashToServing(CRASH, CRASH + 7_456, 150_000), { kind: 'measured', s: 7.46 });
  assert.equal(crashToServing(CRASH, undefined, 150_000).kind, 'not-served');
  assert.equal(crashToServing(CRASH, Number.NaN, 150_000).kind, 'not-served');
  assert.equal(crashToServing(CRASH, CRASH + 150_001, 150_000).kind, 'not-served');
});

test('crashToServing: a run of samples with one that moved early summarizes only the failovers of their crashes', () => {
  const starts = [10_800, 14_550, -38_220, 12_560];
  const s = starts.map((d) => crashToServing(CRASH, CRASH + d, 150_000));
  const values = s.map((j) => (j.kind === 'measured' ? j.s : Number.NaN));
  const summary = summarize(values);
  assert.equal(summary.n, 3);
  assert.ok((summary.p50 ?? -1) > 0 && (summary.max ?? -1) === 14.55, JSON.stringify(summary));
});

test('victimStillServing: the node chosen before the pause must still serve right before the crash', () => {
  const chosen = { pod: 'bench-abc', node: 'sim-1' };
  assert.equal(victimStillServing(chosen, { pod: 'bench-abc', node: 'sim-1' }), true);
  // the share moved during the pause (the -38.22 s sample): crash the new server instead
  assert.equal(victimStillServing(chosen, { pod: 'bench-def', node: 'sim-2' }), false);
  assert.equal(victimStillServing(chosen, undefined), false);
});

test('shiftByDetection: moves a figure by the emulated minus the measured detection, never before the verdict', () => {
  assert.equal(shiftByDetection(10.8, 5.23, 6.4), 11.97);
  assert.equal(shiftByDetection(12.0, 7.0, 6.0), 11);
  // a measured detection far later than the emulated one cannot shift serving before the verdict
  assert.equal(shiftByDetection(9.0, 40.0, 7.2), undefined);
  assert.equal(shiftByDetection(undefined, 5, 6), undefined);
  assert.equal(shiftByDetection(9, undefined, 6), undefined);
});

test('emulateLonghornVerdict: detection becomes the 1 s tick after renewTime + lease; figures move with it', () => {
  const crash = 100_000;
  // renewTime 2.5 s before the crash, lease 7 s: due at crash + 4.5 s; ticks at crash + 0.3 + k s -> 5.3 s
  const sample: { detectS?: number; writesResumedS?: number; serverServingS?: number; note?: string } = {
    detectS: 5.0,
    writesResumedS: 9.0,
    serverServingS: 8.5,
  };
  emulateLonghornVerdict(
    sample,
    ['writesResumedS', 'serverServingS'] as const,
    crash - 2_500,
    7_000,
    crash,
    crash + 300,
  );
  assert.deepEqual(sample, { detectS: 5.3, writesResumedS: 9.3, serverServingS: 8.8 });
  const unread: { detectS?: number; writesResumedS?: number; note?: string } = {
    detectS: 5,
    writesResumedS: 9,
  };
  emulateLonghornVerdict(unread, ['writesResumedS'] as const, undefined, 7_000, crash, crash);
  assert.equal(unread.writesResumedS, undefined, 'no renewTime: the figure is dropped, not kept unshifted');
  assert.match(unread.note ?? '', /no renewTime/);
  const undetected: { detectS?: number; writesResumedS?: number } = { writesResumedS: 9 };
  emulateLonghornVerdict(undetected, ['writesResumedS'] as const, crash - 1_000, 7_000, crash, crash);
  assert.deepEqual(undetected, { writesResumedS: 9 }, 'no measured detection: left alone');
});

test('summarizeLoad: start, end, mean and max of the 1-minute load samples', () => {
  assert.deepEqual(summarizeLoad([]), { samples: 0 });
  assert.deepEqual(summarizeLoad([1.5, Number.NaN, 2.5, 4]), {
    samples: 3,
    start: 1.5,
    end: 4,
    mean: 2.67,
    max: 4,
  });
});

test('clientFlowing: a crash is measured only from a client acknowledged within the tolerance', () => {
  assert.equal(clientFlowing(10_000, 10_020), true);
  assert.equal(clientFlowing(10_000, 12_000), true);
  assert.equal(clientFlowing(10_000, 12_001), false);
  assert.equal(clientFlowing(undefined, 12_000), false);
});
