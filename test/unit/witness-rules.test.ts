/**
 * The witness's rules and the holder's deadline, case by case (the randomized schedules are
 * in witness-schedule-checker.test.ts).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  clearanceQuorum,
  promiseQuorumEndMs,
  quorumOf,
  servingDeadlineMs,
  witnessesOnNodes,
} from '../../lib/witness-protocol.ts';
import {
  apiAnswered,
  applyWitnessChange,
  decideClearance,
  decidePromise,
  type PromiseRequest,
  startWitness,
  type WitnessSettings,
  type WitnessState,
} from '../../manager/witness/witness-rules.ts';

const SETTINGS: WitnessSettings = { maxHoldMs: 20_000, apiLostAfterMs: 1_000 };
const ASK = { lease: 'ns/share', holder: 'pod-a', validForMs: 4_000, marginMs: 2_000 };
const held = (holder = 'pod-a', delinquent = false) => new Map([['ns/share', { holder, delinquent }]]);

/** A witness started at `startMs` that read the leases at `readAtMs` and has heard nothing since. */
function witness(startMs: number, readAtMs: number, leases = held()): WitnessState {
  const state = startWitness(startMs);
  apiAnswered(state, readAtMs, leases);
  return state;
}
const cutOff = () => witness(0, 30_000);

/** Decides a promise and applies its change, as the server does; the answer. */
function promise(state: WitnessState, ask: PromiseRequest, nowMs: number) {
  const decided = decidePromise(state, ask, nowMs, SETTINGS);
  applyWitnessChange(state, decided.change);
  return decided.answer;
}

function clearance(state: WitnessState, previousHolder: string, nowMs: number) {
  const decided = decideClearance(state, { lease: 'ns/share', previousHolder }, nowMs, SETTINGS);
  applyWitnessChange(state, decided.change);
  return decided.answer;
}

describe('witness: promises', () => {
  it('promised while the API is unreachable for the witness, held for P + margin', () => {
    const state = cutOff();
    assert.deepEqual(promise(state, ASK, 31_500), { kind: 'promised', validForMs: 4_000 });
    assert.deepEqual(clearance(state, 'pod-a', 37_000), { kind: 'wait', retryInMs: 500, reason: 'promised' });
    assert.equal(clearance(state, 'pod-a', 37_500).kind, 'cleared');
  });

  it('a decision changes nothing by itself: only its change, applied', () => {
    const state = cutOff();
    const decided = decidePromise(state, ASK, 31_500, SETTINGS);
    assert.equal(decided.answer.kind, 'promised');
    assert.equal(state.promisedUntilMs.size, 0);
    applyWitnessChange(state, decided.change);
    assert.equal(state.promisedUntilMs.get('ns/share\u0000pod-a'), 37_500);
  });

  it('refused while the witness reaches the API: a node cut off alone fences as before', () => {
    assert.deepEqual(promise(cutOff(), ASK, 30_900), { kind: 'refused', reason: 'api-reachable' });
  });

  it('refused without a read since the start, for another holder, for a delinquent one', () => {
    assert.equal(promise(startWitness(0), ASK, 30_000).kind, 'refused');
    assert.deepEqual(promise(witness(0, 30_000, held('pod-b')), ASK, 32_000), {
      kind: 'refused',
      reason: 'not-holder',
    });
    assert.deepEqual(promise(witness(0, 30_000, held('pod-a', true)), ASK, 32_000), {
      kind: 'refused',
      reason: 'delinquent',
    });
  });

  it('refused when P + margin exceeds the longest hold, or P is not positive', () => {
    assert.deepEqual(promise(cutOff(), { ...ASK, validForMs: 19_000 }, 32_000), {
      kind: 'refused',
      reason: 'too-long',
    });
    assert.equal(promise(cutOff(), { ...ASK, validForMs: 0 }, 32_000).kind, 'refused');
  });

  it('after a clearance: that holder gets no promise any more, the next one can', () => {
    const state = cutOff();
    assert.equal(clearance(state, 'pod-a', 32_000).kind, 'cleared');
    assert.deepEqual(promise(state, ASK, 32_100), { kind: 'refused', reason: 'cleared' });
    apiAnswered(state, 32_200, held('pod-b'));
    assert.equal(promise(state, { ...ASK, holder: 'pod-b' }, 34_000).kind, 'promised');
  });

  it('no clearance for the longest hold after a start', () => {
    const fresh = witness(100_000, 100_100);
    assert.deepEqual(clearance(fresh, 'pod-a', 110_000), {
      kind: 'wait',
      retryInMs: 10_000,
      reason: 'starting',
    });
    assert.equal(clearance(fresh, 'pod-a', 120_000).kind, 'cleared');
  });
});

describe('holder: serving deadline and quorums', () => {
  const W = ['a', 'b', 'c'];

  it('a majority: 2 of 3, 3 of 5, 3 of 4', () => {
    assert.deepEqual([quorumOf(3), quorumOf(5), quorumOf(4)], [2, 3, 3]);
  });

  it('the q-th latest promise of distinct members, counted from its send', () => {
    const promises = [
      { witness: 'a', sentAtMs: 1_000, validForMs: 4_000 },
      { witness: 'a', sentAtMs: 9_000, validForMs: 4_000 },
      { witness: 'b', sentAtMs: 2_000, validForMs: 4_000 },
      { witness: 'x', sentAtMs: 9_000, validForMs: 4_000 },
    ];
    // a: 13 s, b: 6 s, x is not a member: the 2nd latest is b's.
    assert.equal(promiseQuorumEndMs(promises, W), 6_000);
    assert.equal(promiseQuorumEndMs(promises.slice(0, 2), W), Number.NEGATIVE_INFINITY);
  });

  it('the later of the API proof + T and the promise quorum', () => {
    const promises = [
      { witness: 'a', sentAtMs: 5_000, validForMs: 4_000 },
      { witness: 'c', sentAtMs: 6_000, validForMs: 4_000 },
    ];
    assert.equal(
      servingDeadlineMs({ apiProofSentAtMs: 3_000, renewDeadlineMs: 4_000, promises, witnesses: W }),
      9_000,
    );
    assert.equal(
      servingDeadlineMs({ apiProofSentAtMs: 8_000, renewDeadlineMs: 4_000, promises, witnesses: W }),
      12_000,
    );
    assert.equal(
      servingDeadlineMs({ apiProofSentAtMs: 8_000, renewDeadlineMs: 4_000, promises, witnesses: [] }),
      12_000,
    );
  });

  it('clearances: a majority of distinct members; none for an empty set', () => {
    assert.equal(clearanceQuorum(new Set(['a', 'x']), W), false);
    assert.equal(clearanceQuorum(new Set(['a', 'c']), W), true);
    assert.equal(clearanceQuorum(new Set(), []), false);
  });
});

describe('witness set by node names', () => {
  const node = (name: string, ip?: string) => ({
    name,
    addresses:
      ip === undefined ? [{ type: 'Hostname', address: name }] : [{ type: 'InternalIP', address: ip }],
  });

  it("each node's manager at its InternalIP and the manager's port; IPv6 in brackets", () => {
    const nodes = new Map([
      ['a', node('a', '10.0.0.1')],
      ['b', node('b', 'fd00::2')],
      ['c', node('c', '10.0.0.3')],
    ]);
    assert.deepEqual(witnessesOnNodes(['a', 'b', 'c'], nodes, 8090), {
      endpoints: [
        { name: 'a', url: 'http://10.0.0.1:8090' },
        { name: 'b', url: 'http://[fd00::2]:8090' },
        { name: 'c', url: 'http://10.0.0.3:8090' },
      ],
    });
  });

  it('all or nothing: an unknown node or one without an InternalIP gives no set, naming them', () => {
    const nodes = new Map([
      ['a', node('a', '10.0.0.1')],
      ['b', node('b')],
    ]);
    assert.deepEqual(witnessesOnNodes(['a', 'b', 'c'], nodes, 8090), { missing: ['b', 'c'] });
  });
});
