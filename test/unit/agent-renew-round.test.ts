/**
 * The hedged renewal round (agent/renew-round.ts), pure, case by case: when it hedges,
 * which answer wins, what a 409 means, and the time that proves the renewal. The safety
 * property is the one of docs/design.md: the agent fences at most T after the SEND of the
 * write that committed, so a proof time later than that send is a violation. The same
 * rules over many random schedules: agent-renew-round-sim.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  judgeRead,
  nextRoundAction,
  type RoundAction,
  type RoundState,
  recordSend,
  renewTimeFor,
  startRound,
} from '../../agent/renew-round.ts';
import { fromWire, type LeaseRecord, toWire } from '../../lib/lease-record.ts';
import { answer, base, ME, OFF, SETTINGS, WALL0 } from '../support/renew-round-fixtures.ts';

const D = 6_000;
const T = 4_000;
const FENCE_TIMEOUT = 1_500;

/** Sends what the action says at `nowMs` (wall = WALL0 + now); returns the state and the id. */
function send(
  state: RoundState,
  nowMs: number,
  settings = SETTINGS,
): { state: RoundState; id: number; action: RoundAction } {
  const action = nextRoundAction(state, nowMs, settings);
  assert.equal(action.kind, 'send', `expected a send at ${nowMs}, got ${JSON.stringify(action)}`);
  if (action.kind !== 'send') throw new Error('unreachable');
  const renewTimeMs = action.step === 'write' ? renewTimeFor(state, WALL0 + nowMs) : undefined;
  const sent = recordSend(state, { step: action.step, hedge: action.hedge, sentAtMs: nowMs, renewTimeMs });
  return { ...sent, action };
}

/** What the server holds after write `id` of `state` committed. */
const committed = (state: RoundState, id: number, rv = '101'): LeaseRecord => ({
  ...state.base,
  resourceVersion: rv,
  renewTime: new Date(state.attempts[id]?.renewTimeMs as number),
});

/** The manager's earliest verdict is D after the committing send; the fence must end before it. */
function fenceEndsBeforeVerdict(proofSentAtMs: number, committingSendMs: number): boolean {
  return proofSentAtMs + T + FENCE_TIMEOUT < committingSendMs + D;
}

describe('renewal round: sending', () => {
  it('happy path: one write at once on the pooled connection, proof = its send', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    assert.deepEqual(a.action, { kind: 'send', step: 'write', hedge: false, fresh: false, budgetMs: 2_000 });
    s = a.state;
    assert.deepEqual(nextRoundAction(s, 10, SETTINGS), { kind: 'wait', untilMs: 500 });
    s = answer(s, a.id, { kind: 'written', lease: committed(s, a.id) });
    const end = nextRoundAction(s, 12, SETTINGS);
    assert.equal(end.kind, 'end');
    assert.equal(end.kind === 'end' && end.end.kind === 'renewed' && end.end.proofSentAtMs, 0);
  });

  it('hedges after the hedge delay, on a fresh connection, and never a third while two are in flight', () => {
    let s = startRound(base(), 2_000);
    s = send(s, 0).state;
    assert.equal(nextRoundAction(s, 499, SETTINGS).kind, 'wait');
    const h = send(s, 500);
    assert.deepEqual(h.action, { kind: 'send', step: 'write', hedge: true, fresh: true, budgetMs: 1_500 });
    s = h.state;
    assert.deepEqual(nextRoundAction(s, 900, SETTINGS), { kind: 'wait', untilMs: 2_000 });
  });

  it('a hedge that fails fast is replaced one hedge delay after it was sent, not at once', () => {
    let s = startRound(base(), 2_000);
    s = send(s, 0).state;
    const h = send(s, 500);
    s = answer(h.state, h.id, { kind: 'failed' }); // e.g. a reset on the new connection
    assert.deepEqual(nextRoundAction(s, 520, SETTINGS), { kind: 'wait', untilMs: 1_000 });
    assert.equal(send(s, 1_000).action.kind, 'send');
  });

  it('after a failure with nothing in flight: a retry a retry period after the last send, pooled', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    s = answer(a.state, a.id, { kind: 'failed' });
    assert.deepEqual(nextRoundAction(s, 40, SETTINGS), { kind: 'wait', untilMs: 500 });
    const r = send(s, 500);
    assert.deepEqual(r.action, { kind: 'send', step: 'write', hedge: false, fresh: false, budgetMs: 1_500 });
  });

  it('no budget ever reaches past the deadline; at the deadline the round ends', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 1_700);
    assert.equal(a.action.kind === 'send' && a.action.budgetMs, 300);
    s = a.state;
    assert.deepEqual(nextRoundAction(s, 1_999, SETTINGS), { kind: 'wait', untilMs: 2_000 });
    assert.deepEqual(nextRoundAction(s, 2_000, SETTINGS), { kind: 'end', end: { kind: 'deadline-passed' } });
    // A sub-millisecond budget rounds down to 0: fence, do not send.
    assert.deepEqual(nextRoundAction(startRound(base(), 2_000), 1_999.5, SETTINGS), {
      kind: 'end',
      end: { kind: 'deadline-passed' },
    });
  });

  it('hedging off: one request at a time, each capped at the request timeout (the old agent)', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0, OFF);
    assert.equal(a.action.kind === 'send' && a.action.budgetMs, 1_000);
    s = a.state;
    assert.deepEqual(nextRoundAction(s, 900, OFF), { kind: 'wait', untilMs: 2_000 });
    s = answer(s, a.id, { kind: 'failed' });
    const r = send(s, 1_000, OFF);
    assert.deepEqual(r.action, { kind: 'send', step: 'write', hedge: false, fresh: false, budgetMs: 1_000 });
  });

  it('a renewTime survives the wire to the millisecond (MicroTime), so a read can match it', () => {
    const written = new Date(WALL0 + 123);
    const wire = JSON.parse(JSON.stringify(toWire(base({ renewTime: written }))));
    assert.match(wire.spec.renewTime, /\.123000Z$/);
    assert.equal(fromWire(wire).renewTime?.getTime(), written.getTime());
  });

  it('renewTimeFor signs every write: unlike the base and every write of the round', () => {
    let s = startRound(base({ renewTime: new Date(WALL0) }), 2_000);
    assert.equal(renewTimeFor(s, WALL0), WALL0 + 1); // wall clock stepped back onto the base's
    s = recordSend(s, { step: 'write', hedge: false, sentAtMs: 0, renewTimeMs: WALL0 + 1 }).state;
    s = recordSend(s, { step: 'write', hedge: true, sentAtMs: 500, renewTimeMs: WALL0 + 2 }).state;
    assert.equal(renewTimeFor(s, WALL0 + 1.7), WALL0 + 3);
    assert.equal(renewTimeFor(s, WALL0 + 500), WALL0 + 500);
  });
});

describe('renewal round: which answer wins, and the proof time', () => {
  it('the hedge wins: proof = the hedge send, not the first send and not the answer time', () => {
    let s = startRound(base(), 2_000);
    s = send(s, 0).state; // stuck on a dead connection
    const h = send(s, 500);
    s = answer(h.state, h.id, { kind: 'written', lease: committed(h.state, h.id) });
    const end = s.end;
    assert.ok(end?.kind === 'renewed');
    assert.equal(end.proofSentAtMs, 500);
    assert.equal(end.winner.hedge, true);
    assert.equal(end.via, 'answer');
    assert.ok(fenceEndsBeforeVerdict(end.proofSentAtMs, 500));
  });

  it('a late 200 of the first write while the read after the hedge 409 is in flight: renewed by the first', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    const h = send(a.state, 500);
    s = answer(h.state, h.id, { kind: 'conflict' });
    assert.equal(s.end, undefined, 'a 409 alone is no verdict');
    const read = send(s, 700);
    assert.deepEqual(read.action, { kind: 'send', step: 'read', hedge: false, fresh: true, budgetMs: 1_300 });
    s = answer(read.state, a.id, { kind: 'written', lease: committed(read.state, a.id) });
    assert.ok(s.end?.kind === 'renewed');
    assert.equal(s.end.proofSentAtMs, 0);
    // The read's answer comes later and changes nothing.
    assert.equal(answer(s, read.id, { kind: 'read', lease: committed(s, a.id) }), s);
  });

  it('first write committed, its answer lost; the hedge gets 409: the read finds our renewTime, proof = FIRST send', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    const h = send(a.state, 500);
    s = answer(h.state, h.id, { kind: 'conflict' });
    assert.equal(
      nextRoundAction(s, 900, SETTINGS).kind,
      'send',
      'the read goes at once, not after the stuck write',
    );
    const read = send(s, 900);
    s = answer(read.state, read.id, { kind: 'read', lease: committed(read.state, a.id) });
    assert.ok(s.end?.kind === 'renewed');
    assert.equal(s.end.proofSentAtMs, 0);
    assert.equal(s.end.via, 'read');
    assert.equal(s.end.winner.id, a.id);
    assert.ok(fenceEndsBeforeVerdict(s.end.proofSentAtMs, 0));

    // Violations: the naive datings of this success are later than the committing send,
    // so a manager may declare the lease dead before that fence ends.
    const hedgeSend = 500; // "the round succeeded with the hedge's 409 resolved: date it by the hedge"
    const readSend = 900; // "the read proved we hold it: date it by the read"
    assert.equal(fenceEndsBeforeVerdict(hedgeSend, 0), false);
    assert.equal(fenceEndsBeforeVerdict(readSend, 0), false);
  });

  it('the earlier send on a tie of renewTimes (the safe side)', () => {
    let s = startRound(base(), 2_000);
    s = recordSend(s, { step: 'write', hedge: false, sentAtMs: 0, renewTimeMs: WALL0 }).state;
    s = recordSend(s, { step: 'write', hedge: true, sentAtMs: 500, renewTimeMs: WALL0 }).state;
    const end = judgeRead(s, { ...s.base, resourceVersion: '101', renewTime: new Date(WALL0) }, ME);
    assert.ok(end.kind === 'renewed');
    assert.equal(end.proofSentAtMs, 0);
  });
});

describe('renewal round: what a 409 means', () => {
  /** A round whose only write got 409 and whose read returned `reread`. */
  function afterRead(reread: LeaseRecord | undefined): RoundState {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    s = answer(a.state, a.id, { kind: 'conflict' });
    const read = send(s, 50);
    assert.equal(read.action.kind === 'send' && read.action.fresh, false, 'no write in flight: pooled');
    return answer(read.state, read.id, { kind: 'read', lease: reread });
  }

  it('a 409 is not a loss while our other write is in flight; no more writes after it', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    const h = send(a.state, 500);
    s = answer(h.state, h.id, { kind: 'conflict' });
    assert.equal(s.end, undefined);
    const next = nextRoundAction(s, 600, SETTINGS);
    assert.ok(next.kind === 'send' && next.step === 'read');
    // The naive rule "409 = someone else took it" is shown to fence a holder whose own
    // write committed in agent-renew-round-sim.test.ts.
  });

  it('read: another holder, delinquent, deleted -> lost', () => {
    assert.deepEqual(afterRead(base({ resourceVersion: '101', holder: 'other' })).end, {
      kind: 'lost',
      reason: 'holder-changed',
    });
    assert.deepEqual(
      afterRead(base({ resourceVersion: '101', delinquentSince: '2026-01-01T00:00:00Z' })).end,
      {
        kind: 'lost',
        reason: 'delinquent',
      },
    );
    assert.deepEqual(afterRead(undefined).end, { kind: 'lost', reason: 'deleted' });
  });

  it('read: ours with a renewTime not of this round -> changed (nothing credited), also with the base renewTime', () => {
    const other = base({ resourceVersion: '101', renewTime: new Date(WALL0 - 777) });
    assert.deepEqual(afterRead(other).end, { kind: 'changed', lease: other });
    const annotated = base({ resourceVersion: '101', failoverBy: 'manager-b' });
    assert.deepEqual(afterRead(annotated).end, { kind: 'changed', lease: annotated });
  });

  it('the old rule (decideAfterConflict alone) credits nothing when our own write caused the 409', () => {
    // Safe but costly: the proof stays at the previous renewal, so two such rounds fence.
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    const h = send(a.state, 500);
    s = answer(h.state, h.id, { kind: 'conflict' });
    const read = send(s, 900);
    const reread = committed(read.state, a.id);
    assert.equal(judgeRead(read.state, reread, ME).kind, 'renewed');
    assert.notEqual(judgeRead({ ...read.state, attempts: [] }, reread, ME).kind, 'renewed');
  });

  it('404 on a write is lost at once; answers after the end change nothing', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    const h = send(a.state, 500);
    s = answer(h.state, a.id, { kind: 'deleted' });
    assert.deepEqual(s.end, { kind: 'lost', reason: 'deleted' });
    assert.equal(answer(s, h.id, { kind: 'written', lease: committed(s, h.id) }), s);
  });

  it('a failed read is retried a retry period after it was sent, hedged while it hangs', () => {
    let s = startRound(base(), 2_000);
    const a = send(s, 0);
    s = answer(a.state, a.id, { kind: 'conflict' });
    const r1 = send(s, 10);
    s = answer(r1.state, r1.id, { kind: 'failed' });
    assert.deepEqual(nextRoundAction(s, 20, SETTINGS), { kind: 'wait', untilMs: 510 });
    const r2 = send(s, 510);
    assert.deepEqual(nextRoundAction(r2.state, 600, SETTINGS), { kind: 'wait', untilMs: 1_010 });
    const r3 = send(r2.state, 1_010);
    assert.equal(r3.action.kind === 'send' && r3.action.hedge && r3.action.fresh, true);
  });
});
