/**
 * The hedged renewal round (agent/renew-round.ts) against a simulated CAS server, over
 * 2,000 seeded schedules per setting: each request reaches the server after a random
 * delay (or never: a dead connection), a write commits there if its resourceVersion is
 * current and gets 409 otherwise, and its answer comes back after another delay, never,
 * or is cut at the request's budget. The invariants: never lost (nobody else writes),
 * the credited write is the one that committed, the proof is no later than its send, the
 * round ends by T, at most two requests of a step in flight (one with hedging off). The
 * naive rules ("409 = lost", "date a read-proven renewal by the last send") are shown to
 * break them, so the checker can fail.
 * Not modelled: other writers (the cases in agent-renew-round.test.ts cover them).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  nextRoundAction,
  type RoundAnswer,
  type RoundSettings,
  type RoundState,
  recordSend,
  renewTimeFor,
  startRound,
} from '../../agent/renew-round.ts';
import { answer, base, OFF, SETTINGS, WALL0 } from '../support/renew-round-fixtures.ts';
import { seededRandom } from '../support/seeded-random.ts';

describe('renewal round: simulated CAS server', () => {
  interface Outcome {
    state: RoundState;
    committedBy: number | undefined;
    maxInFlight: number;
    endAtMs: number;
  }

  type Apply = (state: RoundState, id: number, a: RoundAnswer) => RoundState;

  /**
   * One round against a server that applies each request when it arrives (a write commits
   * if its version is current, else 409) and answers after a return delay, or never (a
   * dead connection), or is cut at the request's budget. Time runs in whole ms. Nobody else
   * writes the Lease, so the lease is never lost. `apply` is the rule under test.
   */
  function simulate(seed: number, settings: RoundSettings, apply: Apply = answer): Outcome {
    const rand = seededRandom(seed);
    const deadlineAtMs = 2_000;
    let state = startRound(base(), deadlineAtMs);
    const server = { lease: base(), committedBy: undefined as number | undefined };
    const events: Array<{ atMs: number; run: () => void }> = [];
    const later = (atMs: number, run: () => void) => events.push({ atMs, run });
    const delay = () =>
      rand() < 0.15 ? Number.POSITIVE_INFINITY : Math.floor(rand() * (rand() < 0.5 ? 100 : 2_500));
    let nowMs = 0;
    let maxInFlight = 0;
    for (let guard = 0; guard < 1_000; guard++) {
      const action = nextRoundAction(state, nowMs, settings);
      if (action.kind === 'end')
        return { state, committedBy: server.committedBy, maxInFlight, endAtMs: nowMs };
      if (action.kind === 'send') {
        assert.ok(
          action.budgetMs > 0 && nowMs + action.budgetMs <= deadlineAtMs,
          `seed ${seed}: budget past T`,
        );
        assert.ok(!(action.step === 'write' && state.conflicted), `seed ${seed}: a write after a 409`);
        const renewTimeMs = action.step === 'write' ? renewTimeFor(state, WALL0 + nowMs) : undefined;
        const sent = recordSend(state, {
          step: action.step,
          hedge: action.hedge,
          sentAtMs: nowMs,
          renewTimeMs,
        });
        state = sent.state;
        const { id } = sent;
        const inFlight = state.attempts.filter(
          (a) => a.step === action.step && a.state === 'in-flight',
        ).length;
        maxInFlight = Math.max(maxInFlight, inFlight);
        const arriveAtMs = nowMs + delay();
        const answerAtMs = arriveAtMs + delay();
        const cutAtMs = nowMs + action.budgetMs;
        let reply: RoundAnswer | undefined;
        if (Number.isFinite(arriveAtMs)) {
          later(arriveAtMs, () => {
            if (action.step === 'read') {
              reply = { kind: 'read', lease: server.lease };
            } else if (server.lease.resourceVersion === state.base.resourceVersion) {
              server.lease = {
                ...server.lease,
                resourceVersion: '101',
                renewTime: new Date(renewTimeMs as number),
              };
              server.committedBy = id;
              reply = { kind: 'written', lease: server.lease };
            } else {
              reply = { kind: 'conflict' };
            }
          });
        }
        if (answerAtMs < cutAtMs) later(answerAtMs, () => (state = apply(state, id, reply as RoundAnswer)));
        later(cutAtMs, () => (state = apply(state, id, { kind: 'failed' })));
        continue;
      }
      const due = events.filter((e) => e.atMs <= action.untilMs).map((e) => e.atMs);
      nowMs = Math.min(action.untilMs, ...due);
      for (const e of events.filter((x) => x.atMs <= nowMs).sort((x, y) => x.atMs - y.atMs)) {
        events.splice(events.indexOf(e), 1);
        e.run();
      }
    }
    throw new Error(`seed ${seed}: the round did not end`);
  }

  /** The safety and liveness rules a round must keep; the broken one, or undefined. */
  function violation(o: Outcome, settings: RoundSettings): string | undefined {
    const end = o.state.end ?? { kind: 'deadline-passed' as const };
    if (o.maxInFlight > (settings.hedgeDelayMs > 0 ? 2 : 1)) return `${o.maxInFlight} in flight`;
    if (end.kind === 'lost' || end.kind === 'changed') return `${end.kind} although nobody else wrote`;
    if (end.kind === 'deadline-passed')
      return o.endAtMs >= o.state.deadlineAtMs ? undefined : 'ended before T';
    if (end.winner.id !== o.committedBy) return 'credited a write that did not commit';
    const committingSend = o.state.attempts[o.committedBy]?.sentAtMs as number;
    if (end.proofSentAtMs > committingSend) return 'proof later than the committing send';
    return o.endAtMs <= o.state.deadlineAtMs ? undefined : 'renewed after T';
  }

  for (const [name, settings] of [
    ['hedging on', SETTINGS],
    ['hedging off', OFF],
  ] as const) {
    it(`${name}: never lost, proof = the committing send, at most ${settings.hedgeDelayMs > 0 ? 'two' : 'one'} in flight (2,000 schedules)`, (t) => {
      const ends = { renewed: 0, deadline: 0, hedgeWins: 0, viaRead: 0 };
      for (let seed = 1; seed <= 2_000; seed++) {
        const o = simulate(seed, settings);
        assert.equal(violation(o, settings), undefined, `seed ${seed}`);
        const end = o.state.end;
        if (end?.kind !== 'renewed') ends.deadline++;
        else {
          ends.renewed++;
          if (end.winner.hedge) ends.hedgeWins++;
          if (end.via === 'read') ends.viaRead++;
        }
      }
      // The schedules cover every path.
      t.diagnostic(`${name}: ${JSON.stringify(ends)}`);
      assert.ok(ends.renewed > 500 && ends.deadline > 50, JSON.stringify(ends));
      if (settings.hedgeDelayMs > 0)
        assert.ok(ends.hedgeWins > 50 && ends.viaRead > 20, JSON.stringify(ends));
    });
  }

  it('the checker catches the naive rules: "409 = lost", and dating a read-proven renewal by the last send', () => {
    const naive409: Apply = (s, id, a) =>
      a.kind === 'conflict' ? { ...s, end: { kind: 'lost', reason: 'holder-changed' } } : answer(s, id, a);
    const naiveLateProof: Apply = (s, id, a) => {
      const next = answer(s, id, a);
      if (next.end?.kind !== 'renewed' || next.end.via !== 'read') return next;
      const lastSend = Math.max(...next.attempts.map((x) => x.sentAtMs));
      return { ...next, end: { ...next.end, proofSentAtMs: lastSend } };
    };
    const count = (apply: Apply, broken: string) => {
      let n = 0;
      for (let seed = 1; seed <= 2_000; seed++)
        if (violation(simulate(seed, SETTINGS, apply), SETTINGS)?.startsWith(broken)) n++;
      return n;
    };
    assert.ok(count(naive409, 'lost although') > 50);
    assert.ok(count(naiveLateProof, 'proof later') > 20);
  });

  it('hedging renews in runs where one request at a time (same cap) fences', () => {
    let renewedOn = 0;
    let renewedOff = 0;
    for (let seed = 1; seed <= 2_000; seed++) {
      if (simulate(seed, SETTINGS).state.end?.kind === 'renewed') renewedOn++;
      if (simulate(seed, { ...OFF, requestTimeoutMs: 2_000 }).state.end?.kind === 'renewed') renewedOff++;
    }
    assert.ok(renewedOn > renewedOff * 1.2, `renewed: ${renewedOn} hedged, ${renewedOff} one at a time`);
  });
});
