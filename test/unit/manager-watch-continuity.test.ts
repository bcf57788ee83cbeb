/**
 * manager/detection/watch-continuity.ts: a routine re-watch keeps the observations; any
 * other break still blinds. Each check also runs against a rule that breaks it (the old
 * reset-on-every-connect rule, one that ignores the break's reason, one that hears only
 * the first break, one that ignores the gap), so a check that could not fail would show here.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { newLeaseRecord } from '../../lib/lease-record.ts';
import { judge, type Observation } from '../../manager/detection/staleness.ts';
import {
  DEFAULT_WATCH_CONTINUITY,
  decideWatch,
  INITIAL_WATCH_STATE,
  type WatchContinuityPolicy,
  type WatchDecision,
  type WatchReport,
  type WatchState,
  watchContinuityProblems,
  watchHealth,
} from '../../manager/detection/watch-continuity.ts';

type Decide = (
  state: WatchState,
  report: WatchReport,
  now: number,
  policy: WatchContinuityPolicy,
) => WatchDecision;

const D = 6000;
const LAST_RENEWAL = 20_000;

/** The rule before this one: every connect resets. */
const resetOnEveryConnect: Decide = (state, report, now, policy) => {
  const decision = decideWatch(state, report, now, policy);
  if (report.type === 'disconnected') return decision;
  return { state: { kind: 'healthy', healthySince: now }, observations: 'reset' };
};
/** Treats every break as a clean end. */
const ignoresReason: Decide = (state, report, now, policy) =>
  decideWatch(
    state,
    report.type === 'disconnected' ? { type: 'disconnected', reason: 'ended' } : report,
    now,
    policy,
  );
/** Hears only the first break (a failed attempt after a clean end goes unnoticed). */
const ignoresFailedAttempts: Decide = (state, report, now, policy) =>
  state.kind === 'blind' && report.type === 'disconnected'
    ? { state, observations: 'keep' }
    : decideWatch(state, report, now, policy);
/** Trusts any gap. */
const ignoresGap: Decide = (state, report, now) =>
  decideWatch(state, report, now, { maxGapMs: Number.POSITIVE_INFINITY });

const connect = (kind: 'relisted' | 'resumed'): WatchReport => ({ type: 'connected', kind });
const broke = (reason: 'ended' | 'gone' | 'quiet' | 'error'): WatchReport => ({
  type: 'disconnected',
  reason,
});

/**
 * When one lease is judged stale: it is listed at 0, renewed every second until
 * LAST_RENEWAL, then silent; `reports` are the watch's reports by time. Millisecond
 * steps, the real staleness judge.
 */
function verdictAt(decide: Decide, reports: [number, WatchReport][], renewals = true): number {
  const byTime = new Map(reports);
  let state: WatchState = INITIAL_WATCH_STATE;
  const lease = { ...newLeaseRecord('ns', 'a', D / 1000), holder: 'pod-a', resourceVersion: '1' };
  let observation: Observation | undefined;
  for (let t = 0; t < 120_000; t++) {
    const report = byTime.get(t);
    if (report) {
      const d = decide(state, report, t, DEFAULT_WATCH_CONTINUITY);
      state = d.state;
      if (d.observations === 'reset' && observation) observation = { ...observation, observedAt: t };
    }
    if (state.kind === 'healthy' && (t === 0 || (renewals && t <= LAST_RENEWAL && t % 1000 === 0)))
      observation = { signature: String(t), observedAt: t, durationMs: D, floorMs: D, lease };
    if (observation && judge(observation, watchHealth(state), t).kind === 'stale') return t;
  }
  throw new Error('no verdict within 120 s');
}

const start: [number, WatchReport] = [0, connect('relisted')];

describe('a routine re-watch (one clean end, resumed at once)', () => {
  const routine: [number, WatchReport][] = [start, [21_000, broke('ended')], [21_150, connect('resumed')]];

  /** The check: the verdict lands D after the last renewal, not D after the re-watch. */
  function lateness(decide: Decide): number {
    return verdictAt(decide, routine) - (LAST_RENEWAL + D);
  }

  it('keeps the observations: the verdict is D after the last renewal', () => {
    assert.equal(lateness(decideWatch), 1); // stale is strictly after the deadline
  });

  it('the old reset-on-every-connect rule fails that check (late by the re-watch offset)', () => {
    assert.equal(lateness(resetOnEveryConnect), 1150 + 1);
  });

  it('a verdict whose deadline falls in the gap is late by at most the gap', () => {
    const inGap: [number, WatchReport][] = [start, [25_900, broke('ended')], [26_050, connect('resumed')]];
    assert.equal(verdictAt(decideWatch, inGap), 26_050);
  });

  it('keeps the blindness of a manager still in its first D', () => {
    // Listed at 0, never renewed; the watch ends at 1 s and resumes: still D from 0, not earlier.
    const early: [number, WatchReport][] = [start, [1000, broke('ended')], [1100, connect('resumed')]];
    assert.equal(verdictAt(decideWatch, early, false), D + 1);
    // After an error at 1 s and a resume at 1.1 s, the D counts from 1.1 s ...
    const afterError: [number, WatchReport][] = [start, [1000, broke('error')], [1100, connect('resumed')]];
    assert.equal(verdictAt(decideWatch, afterError, false), 1100 + D + 1);
    // ... and a routine re-watch at 3 s does not shorten it.
    assert.equal(
      verdictAt(decideWatch, [...afterError, [3000, broke('ended')], [3100, connect('resumed')]], false),
      1100 + D + 1,
    );
  });
});

describe('every other break still blinds (D of healthy watch from the reconnect)', () => {
  const reconnectAt = 21_150;
  const unsafe: { name: string; reports: [number, WatchReport][]; breaks: Decide[] }[] = [
    {
      name: 'an error',
      reports: [start, [21_000, broke('error')], [reconnectAt, connect('resumed')]],
      breaks: [ignoresReason],
    },
    {
      name: 'a quiet timeout',
      reports: [start, [21_000, broke('quiet')], [reconnectAt, connect('resumed')]],
      breaks: [ignoresReason],
    },
    {
      name: 'a 410 Gone in the stream, then a re-list',
      reports: [start, [21_000, broke('gone')], [reconnectAt, connect('relisted')]],
      breaks: [],
    },
    {
      name: 'a clean end, then a 410 on the resume (re-listed without another break)',
      reports: [start, [21_000, broke('ended')], [reconnectAt, connect('relisted')]],
      breaks: [],
    },
    {
      name: 'a clean end, then a failed attempt before the resume',
      reports: [start, [21_000, broke('ended')], [21_050, broke('error')], [reconnectAt, connect('resumed')]],
      breaks: [ignoresFailedAttempts],
    },
    {
      name: 'a clean end and a gap of the bound',
      reports: [start, [19_150, broke('ended')], [reconnectAt, connect('resumed')]],
      breaks: [ignoresGap],
    },
    {
      name: 'a second connect while healthy',
      reports: [start, [reconnectAt, connect('resumed')]],
      breaks: [],
    },
  ];

  /** The check: no verdict before D of healthy watch after the reconnect. */
  function blinds(decide: Decide, reports: [number, WatchReport][]): boolean {
    return verdictAt(decide, reports) > reconnectAt + D;
  }

  for (const { name, reports, breaks } of unsafe) {
    it(`${name}: resets`, () => {
      assert.ok(blinds(decideWatch, reports));
      assert.ok(blinds(resetOnEveryConnect, reports), 'the old rule resets too');
      for (const rule of breaks) assert.equal(blinds(rule, reports), false, `${rule.name} fails the check`);
    });
  }

  it('a gap just under the bound keeps, one at the bound resets', () => {
    const gapOf = (ms: number): [number, WatchReport][] => [
      start,
      [reconnectAt - ms, broke('ended')],
      [reconnectAt, connect('resumed')],
    ];
    assert.equal(blinds(decideWatch, gapOf(DEFAULT_WATCH_CONTINUITY.maxGapMs - 1)), false);
    assert.equal(blinds(decideWatch, gapOf(DEFAULT_WATCH_CONTINUITY.maxGapMs)), true);
  });
});

describe('the decision itself', () => {
  it('is blind while disconnected and healthy after, carrying the first healthy time', () => {
    const p = DEFAULT_WATCH_CONTINUITY;
    let d = decideWatch(INITIAL_WATCH_STATE, connect('relisted'), 10, p);
    assert.deepEqual(d, { state: { kind: 'healthy', healthySince: 10 }, observations: 'reset' });
    d = decideWatch(d.state, broke('ended'), 500, p);
    assert.deepEqual(watchHealth(d.state), { healthy: false, healthySince: 0 });
    d = decideWatch(d.state, connect('resumed'), 700, p);
    assert.deepEqual(d, { state: { kind: 'healthy', healthySince: 10 }, observations: 'keep' });
  });

  it('maxGapMs 0 is the old rule: every re-watch resets', () => {
    const p = { maxGapMs: 0 };
    const ended = decideWatch({ kind: 'healthy', healthySince: 0 }, broke('ended'), 100, p);
    assert.equal(decideWatch(ended.state, connect('resumed'), 100, p).observations, 'reset');
  });

  it('rejects a bad bound, naming the field and the rule', () => {
    assert.deepEqual(watchContinuityProblems(DEFAULT_WATCH_CONTINUITY), []);
    for (const maxGapMs of [-1, Number.NaN, Number.POSITIVE_INFINITY])
      assert.match(watchContinuityProblems({ maxGapMs }).join(), /maxGapMs: .* must be a finite number/);
  });
});
