/**
 * One renewal round with hedged requests, pure: a state, the answers that arrive, and
 * `nextRoundAction(state, now)` saying what to send, how long to wait, or how the round
 * ended. No I/O, no clock reads: renew-loop.ts sends, receives and passes the time.
 *
 * A round renews the cached Lease `base` (CAS on its resourceVersion) before the renew
 * deadline (last proof + T). Its requests, each cut at min(request timeout, deadline):
 *  - write step: the first update at once (pooled keep-alive connection); when it has not
 *    answered after the hedge delay, a second one, the hedge, on its own fresh
 *    connection, so it cannot queue behind a stuck socket. At most two writes in flight;
 *    after a failure with none in flight, the next one a retry period after the last send.
 *  - read step, entered on the first 409: the base version is gone, so no more writes
 *    (each would 409); the Lease is read (at once, hedged the same way) to learn who wrote.
 *
 * Both writes carry the same resourceVersion, so at most one can commit; each writes its
 * own renewTime (unique within the round and unlike the base's, renewTimeFor), which
 * signs it: a renewTime is chosen only by the agent that writes it (other writers keep
 * the one they read, so finding ours means our write committed, at some point). NB: it
 * is compared for equality with what this agent wrote, never with a clock.
 *
 * When is a 409 a loss? Never by itself: it says only that the version moved, and our
 * own other write may have moved it (the hedge's 409 while the first attempt committed
 * with its answer lost or still on the way). The round ends on a 409 only through a read:
 *  - holder another pod, delinquent, or deleted: `lost` (as before hedging);
 *  - ours, with the renewTime of one of this round's writes: that write committed:
 *    `renewed`, proven by that write's send time;
 *  - ours with another renewTime: `changed` (another writer; a new round on that version
 *    at once, same deadline; nothing of ours is credited).
 * A write's own 200 ends the round at once (`renewed`), also while a read is in flight.
 * 404 on a write is `lost` (deleted). Deadline reached: `deadline-passed`.
 *
 * The proof time, and why it is safe (docs/design.md, "Why it is safe"): a renewal that
 * succeeded proves the lease from the moment it was SENT, since it committed after that
 * and every manager observed the commit later still. With two writes, the proof is the
 * send time of the write that committed, which is known exactly: from its own answer (an
 * HTTP answer belongs to its request), or from its renewTime read back (if two matched,
 * the earlier send; renewTimeFor makes that impossible). Not the earlier send of the
 * round: that is safe too, but throws away up to one hedge delay of T in the very rounds
 * where the first attempt is stuck. Never the time of the 409, of the read, or of the
 * hedge when the first write committed: those are later than the committing send, so a
 * manager could declare the lease dead before the agent fenced (unit-tested as
 * violations in test/unit/agent-renew-round.test.ts and -sim.test.ts).
 *
 * Not guaranteed: that a request we abandoned (round over) did not reach the server; it
 * cannot commit (its version is gone), or it commits after the deadline, when the agent
 * fences anyway (a late commit only delays a manager's verdict). Two requests stuck at
 * once (both paths dead) get no third before one of them is cut at the request timeout.
 * Hedging off (hedge delay 0): one request at a time, as before hedging.
 */
import type { LeaseRecord } from '../lib/lease-record.ts';
import {
  decideAfterConflict,
  type Identity,
  type LossReason,
  nextRetryAt,
  requestBudgetMs,
} from './lease-decision.ts';

export type RoundStep = 'write' | 'read';

export interface RoundAttempt {
  id: number;
  step: RoundStep;
  sentAtMs: number;
  /** Sent while another request of its step was in flight. */
  hedge: boolean;
  /** Writes only: the renewTime it wrote (wall ms), its signature in a later read. */
  renewTimeMs: number | undefined;
  state: 'in-flight' | 'failed' | 'conflict' | 'answered';
}

export interface RoundSettings {
  /** 0 = off: at most one request of a step in flight. */
  hedgeDelayMs: number;
  retryPeriodMs: number;
  requestTimeoutMs: number;
}

export type RoundEnd =
  | {
      kind: 'renewed';
      lease: LeaseRecord;
      proofSentAtMs: number;
      winner: RoundAttempt;
      via: 'answer' | 'read';
    }
  | { kind: 'lost'; reason: LossReason }
  /** Still ours, but written by someone else: renew that version at once, same deadline. */
  | { kind: 'changed'; lease: LeaseRecord }
  | { kind: 'deadline-passed' };

export interface RoundState {
  readonly base: LeaseRecord;
  readonly deadlineAtMs: number;
  readonly attempts: readonly RoundAttempt[];
  /** A 409 came back: the base version is gone, only reads from now on. */
  readonly conflicted: boolean;
  readonly end: RoundEnd | undefined;
}

export type RoundAction =
  /** `fresh`: on a new connection of its own, never a pooled one. */
  | { kind: 'send'; step: RoundStep; hedge: boolean; fresh: boolean; budgetMs: number }
  /** Nothing to send before `untilMs` (never past the deadline); an answer may come sooner. */
  | { kind: 'wait'; untilMs: number }
  | { kind: 'end'; end: RoundEnd };

export type RoundAnswer =
  | { kind: 'written'; lease: LeaseRecord }
  | { kind: 'conflict' }
  /** 404 on a write. */
  | { kind: 'deleted' }
  /** No usable answer: timeout, reset, 5xx, ... */
  | { kind: 'failed' }
  | { kind: 'read'; lease: LeaseRecord | undefined };

export function startRound(base: LeaseRecord, deadlineAtMs: number): RoundState {
  return { base, deadlineAtMs, attempts: [], conflicted: false, end: undefined };
}

/** What to do at `nowMs`. */
export function nextRoundAction(state: RoundState, nowMs: number, settings: RoundSettings): RoundAction {
  if (state.end) return { kind: 'end', end: state.end };
  if (nowMs >= state.deadlineAtMs) return { kind: 'end', end: { kind: 'deadline-passed' } };
  const step: RoundStep = state.conflicted ? 'read' : 'write';
  const ofStep = state.attempts.filter((a) => a.step === step);
  const inFlight = ofStep.filter((a) => a.state === 'in-flight').length;
  const last = ofStep.at(-1);
  let sendAtMs: number;
  if (last === undefined) sendAtMs = nowMs;
  else if (inFlight === 0)
    sendAtMs = nextRetryAt(last.sentAtMs, nowMs, settings.retryPeriodMs, state.deadlineAtMs);
  else if (inFlight === 1 && settings.hedgeDelayMs > 0) sendAtMs = last.sentAtMs + settings.hedgeDelayMs;
  else sendAtMs = Number.POSITIVE_INFINITY;
  if (sendAtMs > nowMs) return { kind: 'wait', untilMs: Math.min(sendAtMs, state.deadlineAtMs) };
  const budgetMs = requestBudgetMs(nowMs, state.deadlineAtMs, settings.requestTimeoutMs);
  if (budgetMs <= 0) return { kind: 'end', end: { kind: 'deadline-passed' } };
  const hedge = inFlight > 0;
  // A read goes fresh while a write is in flight: that write's socket may be the stuck one.
  const writeInFlight = state.attempts.some((a) => a.step === 'write' && a.state === 'in-flight');
  const fresh = hedge || (step === 'read' && writeInFlight);
  return { kind: 'send', step, hedge, fresh, budgetMs };
}

/**
 * The renewTime for the next write: the wall clock, moved on by whole milliseconds until
 * it differs from the base's and from every write of this round (so it signs the write).
 */
export function renewTimeFor(state: RoundState, wallNowMs: number): number {
  const used = new Set<number | undefined>([
    state.base.renewTime?.getTime(),
    ...state.attempts.map((a) => a.renewTimeMs),
  ]);
  let ms = Math.floor(wallNowMs);
  while (used.has(ms)) ms += 1;
  return ms;
}

/** Records a request just sent; returns the new state and its id. */
export function recordSend(
  state: RoundState,
  send: { step: RoundStep; hedge: boolean; sentAtMs: number; renewTimeMs?: number },
): { state: RoundState; id: number } {
  const id = state.attempts.length;
  const attempt: RoundAttempt = {
    id,
    step: send.step,
    sentAtMs: send.sentAtMs,
    hedge: send.hedge,
    renewTimeMs: send.step === 'write' ? send.renewTimeMs : undefined,
    state: 'in-flight',
  };
  return { state: { ...state, attempts: [...state.attempts, attempt] }, id };
}

/** Applies the answer to request `id`. Answers after the round ended, or twice, change nothing. */
export function recordAnswer(state: RoundState, id: number, answer: RoundAnswer, me: Identity): RoundState {
  const attempt = state.attempts[id];
  if (state.end || attempt === undefined || attempt.state !== 'in-flight') return state;
  const settled = (s: RoundAttempt['state']): RoundState => ({
    ...state,
    attempts: state.attempts.map((a) => (a.id === id ? { ...a, state: s } : a)),
  });
  switch (answer.kind) {
    case 'written': {
      const next = settled('answered');
      const winner = next.attempts[id] as RoundAttempt;
      return {
        ...next,
        end: { kind: 'renewed', lease: answer.lease, proofSentAtMs: winner.sentAtMs, winner, via: 'answer' },
      };
    }
    case 'conflict':
      return { ...settled('conflict'), conflicted: true };
    case 'deleted':
      return { ...settled('failed'), end: { kind: 'lost', reason: 'deleted' } };
    case 'failed':
      return settled('failed');
    case 'read': {
      const next = settled('answered');
      return { ...next, end: judgeRead(next, answer.lease, me) };
    }
  }
}

/** After a 409: what the Lease read back says about this round (see the header). */
export function judgeRead(state: RoundState, reread: LeaseRecord | undefined, me: Identity): RoundEnd {
  const verdict = decideAfterConflict(reread, me);
  if (verdict.kind === 'lost' || reread === undefined)
    return { kind: 'lost', reason: verdict.kind === 'lost' ? verdict.reason : 'deleted' };
  const written = reread.renewTime?.getTime();
  const moved =
    reread.resourceVersion !== state.base.resourceVersion && written !== state.base.renewTime?.getTime();
  const committed = moved
    ? state.attempts.filter((a) => a.step === 'write' && a.renewTimeMs === written)
    : [];
  // NB: if several matched (renewTimeFor prevents it), the earliest send: the safe side.
  const winner = committed.reduce<RoundAttempt | undefined>(
    (best, a) => (best === undefined || a.sentAtMs < best.sentAtMs ? a : best),
    undefined,
  );
  if (winner === undefined) return { kind: 'changed', lease: reread };
  return { kind: 'renewed', lease: reread, proofSentAtMs: winner.sentAtMs, winner, via: 'read' };
}
