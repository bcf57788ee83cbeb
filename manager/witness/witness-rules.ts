/**
 * The witness: the promises and clearances one manager gives (lib/witness-protocol.ts says
 * what they mean). Pure: a state, a request, this manager's monotonic time. The shell keeps
 * the state in memory only, so a restart forgets it; two rules make that safe:
 *  - no clearance for the longest hold it grants (`maxHoldMs`) after the start: every
 *    promise given before the restart has run out by then;
 *  - no promise for a lease before this process has read it from the API (a quorum read
 *    after its start), holder still the one asking and not delinquent: a clearance given
 *    before the restart followed the replacement's acquisition, so the read shows the
 *    new holder and the old one is refused.
 * A promise is given only while this witness itself cannot reach the API: when it can,
 * a holder that cannot is cut off alone and must fence as before (its peers would fail it
 * over on time). That rule is for liveness; the invariant does not rest on it.
 *
 * The holder says how long it counts a promise (P, from its send) and its margin (D − T of
 * its share: its fence and clock rates); the witness holds it for P + margin from the
 * grant, and refuses a hold longer than `maxHoldMs`.
 *
 * Guarantees: after a clearance of (lease, holder), no promise to that holder from this
 * process; a clearance only after every promise this process gave that holder ran out
 * (its clock, P + margin after the grant).
 * Not guaranteed: anything across a restart beyond the two rules above.
 */

export interface WitnessSettings {
  /** The longest P + margin granted; also how long a started witness gives no clearance. */
  maxHoldMs: number;
  /** The API counts as unreachable for this witness after this long without an answer. */
  apiLostAfterMs: number;
}

export interface PromiseRequest {
  lease: string;
  holder: string;
  /** P: how long the holder counts the promise, from its request's send. */
  validForMs: number;
  /** D − T of the holder's share: covers its fence and clock-rate differences. */
  marginMs: number;
}

/** The lease as this witness last read it from the API (since its start). */
export interface LeaseView {
  holder: string;
  delinquent: boolean;
}

/**
 * One witness's state, owned and changed by its shell only through `apiAnswered`,
 * `leaseGone` and `applyWitnessChange` (in place: a copy per lease event cost O(shares)
 * each, O(shares^2) per renewal period).
 */
export interface WitnessState {
  startedAtMs: number;
  /** Last successful API answer; undefined: none since the start. */
  apiAnsweredAtMs: number | undefined;
  views: Map<string, LeaseView>;
  /** `${lease}\u0000${holder}` → the end of the latest promise (this clock). */
  promisedUntilMs: Map<string, number>;
  cleared: Set<string>;
}

/** What a decision changes in the state; applyWitnessChange makes it so. */
export type WitnessChange =
  | { kind: 'none' }
  | { kind: 'promised'; key: string; untilMs: number }
  | { kind: 'cleared'; key: string };

export type PromiseAnswer =
  | { kind: 'promised'; validForMs: number }
  | {
      kind: 'refused';
      reason: 'too-long' | 'api-reachable' | 'unknown-lease' | 'not-holder' | 'delinquent' | 'cleared';
    };

export type ClearanceAnswer =
  | { kind: 'cleared' }
  /** Ask again at this witness's `retryInMs` from now: a promise or the restart wait. */
  | { kind: 'wait'; retryInMs: number; reason: 'starting' | 'promised' };

const key = (lease: string, holder: string) => `${lease}\u0000${holder}`;

export function startWitness(nowMs: number): WitnessState {
  return {
    startedAtMs: nowMs,
    apiAnsweredAtMs: undefined,
    views: new Map(),
    promisedUntilMs: new Map(),
    cleared: new Set(),
  };
}

/** The API answered (`leases`: what a read or a watch event said of them): recorded in place. */
export function apiAnswered(
  state: WitnessState,
  nowMs: number,
  leases: ReadonlyMap<string, LeaseView> = new Map(),
): void {
  state.apiAnsweredAtMs = nowMs;
  for (const [name, view] of leases) state.views.set(name, view);
}

/** The lease was deleted (or a read found none): no promise for it. */
export function leaseGone(state: WitnessState, lease: string): void {
  state.views.delete(lease);
}

/** Makes a decision's change so, in place. */
export function applyWitnessChange(state: WitnessState, change: WitnessChange): void {
  if (change.kind === 'promised')
    state.promisedUntilMs.set(
      change.key,
      Math.max(change.untilMs, state.promisedUntilMs.get(change.key) ?? Number.NEGATIVE_INFINITY),
    );
  if (change.kind === 'cleared') {
    state.cleared.add(change.key);
    state.promisedUntilMs.delete(change.key);
  }
}

export function apiReachable(state: WitnessState, nowMs: number, settings: WitnessSettings): boolean {
  return state.apiAnsweredAtMs !== undefined && nowMs - state.apiAnsweredAtMs < settings.apiLostAfterMs;
}

/** Pure: reads `state`, changes nothing (applyWitnessChange applies `change`). */
export function decidePromise(
  state: Readonly<WitnessState>,
  request: PromiseRequest,
  nowMs: number,
  settings: WitnessSettings,
): { answer: PromiseAnswer; change: WitnessChange } {
  const refuse = (reason: Extract<PromiseAnswer, { kind: 'refused' }>['reason']) => ({
    answer: { kind: 'refused', reason } as PromiseAnswer,
    change: { kind: 'none' } as WitnessChange,
  });
  const holdMs = request.validForMs + request.marginMs;
  if (!(request.validForMs > 0 && request.marginMs >= 0 && holdMs <= settings.maxHoldMs))
    return refuse('too-long');
  const k = key(request.lease, request.holder);
  if (state.cleared.has(k)) return refuse('cleared');
  const view = state.views.get(request.lease);
  if (view === undefined) return refuse('unknown-lease');
  if (view.holder !== request.holder) return refuse('not-holder');
  if (view.delinquent) return refuse('delinquent');
  if (apiReachable(state, nowMs, settings)) return refuse('api-reachable');
  return {
    answer: { kind: 'promised', validForMs: request.validForMs },
    change: { kind: 'promised', key: k, untilMs: nowMs + holdMs },
  };
}

/** Pure: reads `state`, changes nothing (applyWitnessChange applies `change`). */
export function decideClearance(
  state: Readonly<WitnessState>,
  request: { lease: string; previousHolder: string },
  nowMs: number,
  settings: WitnessSettings,
): { answer: ClearanceAnswer; change: WitnessChange } {
  const none: WitnessChange = { kind: 'none' };
  const k = key(request.lease, request.previousHolder);
  if (state.cleared.has(k)) return { answer: { kind: 'cleared' }, change: none };
  const startWaitEnd = state.startedAtMs + settings.maxHoldMs;
  if (nowMs < startWaitEnd) {
    return { answer: { kind: 'wait', retryInMs: startWaitEnd - nowMs, reason: 'starting' }, change: none };
  }
  const promisedUntil = state.promisedUntilMs.get(k);
  if (promisedUntil !== undefined && nowMs < promisedUntil) {
    return { answer: { kind: 'wait', retryInMs: promisedUntil - nowMs, reason: 'promised' }, change: none };
  }
  return { answer: { kind: 'cleared' }, change: { kind: 'cleared', key: k } };
}
