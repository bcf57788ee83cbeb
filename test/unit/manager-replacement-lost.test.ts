import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Node } from '@kubernetes/client-node';
import { ManualClock } from '../../lib/clock.ts';
import type { Informer } from '../../lib/informer.ts';
import { NodeObserver } from '../../manager/detection/node-observer.ts';
import { EVENTS, PHASES, transition } from '../../manager/failover/failover-transitions.ts';
import { judgeOwner, type OwnerInput } from '../../manager/failover/owner-lost.ts';
import {
  judgeReplacement,
  lostNodeThreshold,
  type ReplacementInput,
} from '../../manager/failover/replacement-lost.ts';

// D = 6 s, the testbed nodes' 2 s heartbeat: lost after 8 s of silence by our clock.
const base: ReplacementInput = {
  now: 100_000,
  durationMs: 6_000,
  graceMs: 40_000,
  leaseUnacquired: true,
  node: 'sim-2',
  heartbeat: { observedAt: 92_000, periodMs: 2_000 },
};

test('a replacement whose node was silent for D + its heartbeat period, lease still marked, is lost', () => {
  assert.deepEqual(judgeReplacement(base), {
    kind: 'lost',
    node: 'sim-2',
    silentMs: 8_000,
    thresholdMs: 8_000,
  });
});

test('the rule does not fire while the node heartbeats (silence below D + P), and says when to look again', () => {
  const v = judgeReplacement({ ...base, heartbeat: { observedAt: 92_001, periodMs: 2_000 } });
  assert.equal(v.kind, 'waiting');
  assert.equal(v.kind === 'waiting' && v.recheckAt, 100_001);
  // A kubelet with the real 10 s period: 8 s of silence is between two beats, not a loss.
  assert.equal(
    judgeReplacement({ ...base, heartbeat: { observedAt: 92_000, periodMs: 10_000 } }).kind,
    'waiting',
  );
  assert.equal(
    judgeReplacement({ ...base, heartbeat: { observedAt: 84_000, periodMs: 10_000 } }).kind,
    'lost',
  );
});

test('the rule does not fire once the lease was acquired, however silent the node', () => {
  const v = judgeReplacement({
    ...base,
    leaseUnacquired: false,
    heartbeat: { observedAt: 0, periodMs: 2_000 },
  });
  assert.deepEqual(v, {
    kind: 'waiting',
    reason: 'the lease was acquired since the mark',
    recheckAt: undefined,
  });
});

test('no evidence, no verdict: an unscheduled replacement or a node whose heartbeat we never saw', () => {
  assert.equal(judgeReplacement({ ...base, node: '' }).kind, 'waiting');
  assert.equal(judgeReplacement({ ...base, heartbeat: undefined }).kind, 'waiting');
});

test('the threshold: D + P, P unknown counts as the grace, capped at max(D, grace)', () => {
  assert.equal(lostNodeThreshold(6_000, 40_000, 2_000), 8_000);
  assert.equal(lostNodeThreshold(6_000, 40_000, 10_000), 16_000);
  assert.equal(lostNodeThreshold(6_000, 40_000, undefined), 40_000);
  // A long interval (a watch gap) never makes it slower than the grace.
  assert.equal(lostNodeThreshold(6_000, 40_000, 120_000), 40_000);
  // Never below D.
  assert.equal(lostNodeThreshold(60_000, 40_000, 2_000), 60_000);
});

test('replacementLost sends only the owner waiting for the acquisition round again, without the storage gate', () => {
  assert.deepEqual(transition('awaitingAcquire', 'replacementLost'), {
    next: 'deletingPod',
    actions: ['retarget', 'announceReplacementLost', 'deletePod'],
  });
  assert.deepEqual(transition('followingAcquire', 'replacementLost'), {
    next: 'following',
    actions: ['startTakeoverTimer'],
  });
  for (const phase of PHASES) {
    if (phase === 'awaitingAcquire' || phase === 'followingAcquire') continue;
    assert.deepEqual(transition(phase, 'replacementLost'), { next: phase, actions: [] }, phase);
  }
  // The retarget happens only there (the driver re-targets the machine's lost pod and node).
  for (const phase of PHASES)
    for (const event of EVENTS)
      if (transition(phase, event).actions.includes('retarget'))
        assert.deepEqual([phase, event], ['awaitingAcquire', 'replacementLost']);
});

test("the node observer's heartbeat period is the longest recent interval between changes; a reset moves only the observation", () => {
  const clock = new ManualClock();
  const nodes = { get: () => undefined } as unknown as Informer<V1Node>;
  const observer = new NodeObserver(clock, nodes, 40_000);
  const beat = (renewTime: string) =>
    observer.heartbeatSeen({
      metadata: { name: 'sim-2' },
      spec: { renewTime: renewTime as unknown as Date },
    });
  assert.equal(observer.heartbeat('sim-2'), undefined);
  observer.watchConnected('relisted');
  beat('t1');
  assert.equal(observer.heartbeat('sim-2')?.periodMs, undefined, 'one change: no period yet');
  clock.advance(2_000);
  beat('t2');
  clock.advance(3_000);
  beat('t2'); // the same renewal seen again: no change
  beat('t3');
  assert.deepEqual(observer.heartbeat('sim-2'), { observedAt: clock.now(), periodMs: 3_000 });
  for (let i = 0; i < 4; i++) {
    clock.advance(2_000);
    beat(`u${i}`);
  }
  assert.equal(observer.heartbeat('sim-2')?.periodMs, 2_000, 'only the last four intervals count');
  // A routine re-watch (clean end, resumed at once): the observation is kept.
  const seenAt = clock.now();
  clock.advance(9_000);
  observer.watchDisconnected('ended');
  assert.equal(observer.heartbeat('sim-2'), undefined, 'no evidence while the watch is broken');
  clock.advance(150);
  observer.watchConnected('resumed');
  assert.equal(observer.heartbeat('sim-2')?.observedAt, seenAt, 'kept across a routine re-watch');
  // Any other break: the blindness rule moves the observation to the reconnect.
  for (const [reason, kind] of [
    ['error', 'resumed'],
    ['ended', 'relisted'],
    ['quiet', 'resumed'],
  ] as const) {
    clock.advance(1_000);
    observer.watchDisconnected(reason);
    clock.advance(150);
    observer.watchConnected(kind);
    assert.equal(
      observer.heartbeat('sim-2')?.observedAt,
      clock.now(),
      `the blindness rule after ${reason}/${kind}`,
    );
  }
  clock.advance(1_000);
  observer.watchDisconnected('ended');
  clock.advance(5_000); // past the gap bound
  observer.watchConnected('resumed');
  assert.equal(observer.heartbeat('sim-2')?.observedAt, clock.now(), 'a long gap resets');
});

const owner: OwnerInput = {
  now: 100_000,
  durationMs: 6_000,
  graceMs: 40_000,
  ownerNode: 'sim-2',
  myNode: 'sim-3',
  heartbeat: { observedAt: 92_000, periodMs: 2_000 },
};

test("the owner is lost once its node's heartbeat was silent for D + P, by the replacement rule's threshold", () => {
  assert.deepEqual(judgeOwner(owner), { kind: 'lost', node: 'sim-2', silentMs: 8_000, thresholdMs: 8_000 });
  const v = judgeOwner({ ...owner, heartbeat: { observedAt: 92_001, periodMs: 2_000 } });
  assert.equal(v.kind, 'waiting');
  assert.equal(v.kind === 'waiting' && v.recheckAt, 100_001);
});

test('no owner node named, our own node, or no heartbeat seen: never lost, and no time to look again', () => {
  for (const input of [
    { ...owner, ownerNode: undefined },
    { ...owner, ownerNode: 'sim-3' },
    { ...owner, heartbeat: undefined },
  ]) {
    const v = judgeOwner({ ...input, now: 10_000_000 });
    assert.equal(v.kind, 'waiting', JSON.stringify(input));
    assert.equal(v.kind === 'waiting' && v.recheckAt, undefined);
  }
});

test('ownerLost takes over only from following (where the takeover timer runs), by CAS', () => {
  assert.deepEqual(transition('following', 'ownerLost'), {
    next: 'takingOver',
    actions: ['cancelTakeoverTimer', 'writeTakeover'],
  });
  for (const phase of PHASES) {
    if (phase === 'following') continue;
    assert.deepEqual(transition(phase, 'ownerLost'), { next: phase, actions: [] }, phase);
  }
});
