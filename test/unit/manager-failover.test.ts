import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  inheritedRecord,
  lastFailover,
  lastFailoverPatch,
  type ReportContext,
  withStorageFencing,
} from '../../manager/failover/failover-report.ts';
import {
  EVENTS,
  type FailoverEvent,
  isOwning,
  PHASES,
  type Phase,
  stepOf,
  TRANSITIONS,
  transition,
} from '../../manager/failover/failover-transitions.ts';
import type { LastFailover } from '../../manager/share-model/share-manager-spec.ts';

const OWNING: Phase[] = ['deletingPod', 'detaching', 'replacing', 'awaitingAcquire'];

test('the table is total: every phase reacts to every event with a known phase', () => {
  for (const phase of PHASES) {
    assert.deepEqual(Object.keys(TRANSITIONS[phase]).sort(), [...EVENTS].sort(), phase);
    for (const event of EVENTS)
      assert.ok(PHASES.includes(transition(phase, event).next), `${phase}/${event}`);
  }
});

test('the happy path runs steps 1-6 in order', () => {
  const path: [FailoverEvent, Phase, string[]][] = [
    ['stale', 'checkingStorage', ['checkStorage']],
    ['gateProceed', 'marking', ['writeMark']],
    ['markWon', 'deletingPod', ['announce', 'deletePod']],
    ['podGone', 'detaching', ['handOffVolume']],
    ['detached', 'replacing', ['createReplacement']],
    ['replacementCreated', 'awaitingAcquire', []],
    ['acquired', 'idle', ['complete']],
  ];
  let phase: Phase = 'idle';
  for (const [event, next, actions] of path) {
    const t = transition(phase, event);
    assert.equal(t.next, next, `${phase}/${event}`);
    assert.deepEqual([...t.actions], actions, `${phase}/${event}`);
    phase = t.next;
  }
});

test('a conflict on the mark re-observes and never retries the write blindly', () => {
  const t = transition('marking', 'markConflict');
  assert.equal(t.next, 'idle');
  assert.deepEqual([...t.actions], ['reobserve']);
  for (const phase of PHASES) {
    for (const event of EVENTS) {
      const { actions } = transition(phase, event);
      if (actions.includes('writeMark')) assert.deepEqual([phase, event], ['checkingStorage', 'gateProceed']);
    }
  }
});

test('seeing another manager own the failover always stands down (never acts)', () => {
  for (const phase of PHASES) {
    const t = transition(phase, 'markedByOther');
    if (phase === 'takingOver') {
      assert.equal(t.next, 'takingOver', 'our takeover CAS decides');
      continue;
    }
    if (phase === 'followingAcquire') {
      assert.deepEqual(t, { next: 'followingAcquire', actions: [] }, 'the replacement still exists');
      continue;
    }
    assert.equal(t.next, 'following', phase);
    assert.deepEqual([...t.actions], ['startTakeoverTimer'], phase);
  }
});

test('only a won CAS (mark or takeover) or our own mark leads into the owning steps', () => {
  for (const phase of PHASES) {
    for (const event of EVENTS) {
      const t = transition(phase, event);
      const entersOwning = OWNING.includes(t.next) && !OWNING.includes(phase);
      if (entersOwning) {
        assert.ok(['markWon', 'takeoverWon', 'markedByMe'].includes(event), `${phase}/${event} -> ${t.next}`);
      }
    }
  }
});

test('takeover: following waits for the timer, then takes over by CAS', () => {
  assert.deepEqual(transition('following', 'takeoverDue'), {
    next: 'takingOver',
    actions: ['writeTakeover'],
  });
  assert.deepEqual(transition('takingOver', 'takeoverWon'), {
    next: 'deletingPod',
    actions: ['announceTakeover', 'deletePod'],
  });
  assert.deepEqual(transition('takingOver', 'takeoverConflict'), {
    next: 'following',
    actions: ['reobserve', 'startTakeoverTimer'],
  });
  for (const phase of PHASES) {
    if (phase !== 'following') assert.equal(transition(phase, 'takeoverDue').actions.length, 0, phase);
  }
});

test('an acquisition by a new holder ends every failover; only the owner completes it', () => {
  for (const phase of PHASES) {
    const t = transition(phase, 'acquired');
    assert.equal(t.next, 'idle', phase);
    assert.equal(t.actions.includes('complete'), OWNING.includes(phase), phase);
  }
});

test('our mark seen on the watch while its request is out: the failover goes on (its answer may be lost)', () => {
  assert.deepEqual(transition('marking', 'markedByMe'), {
    next: 'deletingPod',
    actions: ['announce', 'deletePod'],
  });
  // Then the lost answer (stepFailed), or a late one, changes nothing but a retried step.
  assert.deepEqual(transition('deletingPod', 'stepFailed'), {
    next: 'deletingPod',
    actions: ['retryStepLater'],
  });
  assert.deepEqual(transition('deletingPod', 'markWon'), { next: 'deletingPod', actions: [] });
  // The other order: the failed answer first, our mark on the watch after it: resumed.
  assert.deepEqual(transition('marking', 'stepFailed'), { next: 'idle', actions: ['rejudgeLater'] });
  assert.deepEqual(transition('idle', 'markedByMe'), { next: 'deletingPod', actions: ['deletePod'] });
});

test('a failed step is retried in place by the owner; an unanswered mark is judged again', () => {
  for (const phase of OWNING)
    assert.deepEqual(transition(phase, 'stepFailed'), { next: phase, actions: ['retryStepLater'] });
  assert.deepEqual(transition('marking', 'stepFailed'), { next: 'idle', actions: ['rejudgeLater'] });
});

test('a lease that goes away ends the failover in every phase', () => {
  for (const phase of PHASES) assert.equal(transition(phase, 'leaseGone').next, 'idle');
});

test('observe-only records and changes nothing', () => {
  assert.deepEqual(transition('idle', 'staleObserveOnly'), {
    next: 'idle',
    actions: ['recordWouldFailover'],
  });
});

test('a replacement that ended without acquiring is replaced again', () => {
  assert.deepEqual(transition('awaitingAcquire', 'replacementFailed'), {
    next: 'replacing',
    actions: ['createReplacement'],
  });
});

test('isOwning marks the phases counted against the concurrency limit', () => {
  assert.deepEqual(PHASES.filter(isOwning), [
    'checkingStorage',
    'marking',
    'deletingPod',
    'detaching',
    'replacing',
    'awaitingAcquire',
    'takingOver',
  ]);
});

test('a follower whose owner made the replacement stops timing; waiting for its attach is no stall', () => {
  assert.deepEqual(transition('following', 'replacementLive'), {
    next: 'followingAcquire',
    actions: ['cancelTakeoverTimer'],
  });
  // However long the attach takes, a late timer or anything but the end of the replacement
  // changes nothing: no takeover from followingAcquire.
  for (const event of EVENTS) {
    const t = transition('followingAcquire', event);
    assert.ok(!t.actions.includes('writeTakeover'), event);
    if (t.next === 'takingOver') assert.fail(`followingAcquire/${event} takes over`);
  }
  assert.deepEqual(transition('followingAcquire', 'takeoverDue'), { next: 'followingAcquire', actions: [] });
  assert.deepEqual(transition('followingAcquire', 'acquired'), { next: 'idle', actions: [] });
  assert.equal(transition('followingAcquire', 'leaseGone').next, 'idle');
  assert.deepEqual(transition('followingAcquire', 'markedByMe'), {
    next: 'deletingPod',
    actions: ['deletePod'],
  });
});

test('a replacement that ended without acquiring restarts a full takeover timeout', () => {
  assert.deepEqual(transition('followingAcquire', 'replacementFailed'), {
    next: 'following',
    actions: ['startTakeoverTimer'],
  });
  // The owner replaces it again -> timing stops again; if it does not, the timer takes over.
  assert.equal(transition('following', 'replacementLive').next, 'followingAcquire');
  assert.deepEqual(transition('following', 'takeoverDue'), {
    next: 'takingOver',
    actions: ['writeTakeover'],
  });
});

test('replacementLive is only an observation of followers: no other phase acts on it', () => {
  for (const phase of PHASES) {
    const t = transition(phase, 'replacementLive');
    if (phase === 'following') continue;
    assert.deepEqual(t, { next: phase, actions: [] }, phase);
  }
});

test('storage-fencing gate: nothing is written to the lease before it says proceed', () => {
  // The only way into marking (the first write) is the gate's proceed.
  for (const phase of PHASES)
    for (const event of EVENTS) {
      const t = transition(phase, event);
      if (t.next === 'marking' && phase !== 'marking')
        assert.deepEqual([phase, event], ['checkingStorage', 'gateProceed']);
    }
  assert.deepEqual(transition('idle', 'stale'), { next: 'checkingStorage', actions: ['checkStorage'] });
  assert.deepEqual(transition('checkingStorage', 'gateWait'), {
    next: 'awaitingNodeDown',
    actions: ['startRecheckTimer'],
  });
  assert.deepEqual(transition('checkingStorage', 'stepFailed'), {
    next: 'checkingStorage',
    actions: ['retryStepLater'],
  });
  assert.equal(stepOf('checkingStorage'), 'checkStorage');
});

test('awaitingNodeDown writes nothing; a recheck reads again without leaving the machine; a returning holder ends it', () => {
  const writes = [
    'writeMark',
    'deletePod',
    'handOffVolume',
    'createReplacement',
    'writeTakeover',
    'complete',
  ];
  for (const event of EVENTS) {
    const t = transition('awaitingNodeDown', event);
    for (const a of t.actions) assert.ok(!writes.includes(a), `awaitingNodeDown/${event} does ${a}`);
  }
  // Not via idle: the reconciler must see a failover running for the whole wait.
  assert.deepEqual(transition('awaitingNodeDown', 'recheckGate'), {
    next: 'checkingStorage',
    actions: ['checkStorage'],
  });
  for (const event of EVENTS)
    if (!['renewed', 'acquired', 'leaseGone', 'markedByOther'].includes(event))
      assert.notEqual(transition('awaitingNodeDown', event).next, 'idle', event);
  assert.deepEqual(transition('awaitingNodeDown', 'renewed'), { next: 'idle', actions: ['reportWaitOver'] });
  assert.deepEqual(transition('awaitingNodeDown', 'acquired'), { next: 'idle', actions: ['reportWaitOver'] });
  // Another manager saw the node down first: follow it.
  assert.equal(transition('awaitingNodeDown', 'markedByOther').next, 'following');
  // The gate's events mean nothing outside the gate.
  for (const phase of PHASES)
    if (phase !== 'checkingStorage' && phase !== 'awaitingNodeDown')
      for (const event of ['gateProceed', 'gateWait', 'recheckGate'] as const)
        assert.deepEqual(transition(phase, event), { next: phase, actions: [] }, `${phase}/${event}`);
});

const instant = (iso: string) => ({ mono: Date.parse(iso), wall: new Date(iso) });
function context(over: Partial<ReportContext>): ReportContext {
  return {
    sm: undefined,
    lostPod: 'vol-a',
    lostNode: 'n1',
    replacementPod: 'vol-b',
    times: {},
    durationMs: 6000,
    identity: 'm2',
    status: undefined as never,
    events: undefined as never,
    metrics: undefined as never,
    log: undefined as never,
    ...over,
  };
}

test('a takeover keeps the phase timestamps the first owner wrote to status.lastFailover', () => {
  const first: LastFailover = {
    reason: 'LeaseExpired',
    lostNode: 'n1',
    lostPod: 'vol-a',
    by: 'm1',
    detectedAt: '2026-01-01T00:00:00.000Z',
    markedAt: '2026-01-01T00:00:00.050Z',
  };
  assert.equal(inheritedRecord(first, 'vol-a'), first);
  assert.equal(inheritedRecord(first, 'vol-x'), undefined, 'another failover');
  assert.equal(
    inheritedRecord({ ...first, completedAt: '2026-01-01T00:00:09Z' }, 'vol-a'),
    undefined,
    'done',
  );
  assert.equal(inheritedRecord(undefined, 'vol-a'), undefined);

  const times = {
    detected: instant('2026-01-01T00:00:31.000Z'),
    marked: instant('2026-01-01T00:00:31.010Z'),
    podDeleted: instant('2026-01-01T00:00:31.100Z'),
    detached: instant('2026-01-01T00:00:31.200Z'),
    replacementCreated: instant('2026-01-01T00:00:31.300Z'),
    acquired: instant('2026-01-01T00:00:50.000Z'),
  };
  const record = lastFailover(context({ times, inherited: first }));
  assert.equal(record.detectedAt, first.detectedAt);
  assert.equal(record.markedAt, first.markedAt);
  assert.equal(record.podDeletedAt, '2026-01-01T00:00:31.100Z', 'phases the first owner never reported');
  assert.equal(record.completedAt, '2026-01-01T00:00:50.000Z');
  assert.equal(record.by, 'm2');
  // Without a takeover: our own instants.
  assert.equal(lastFailover(context({ times })).detectedAt, '2026-01-01T00:00:31.000Z');
});

test("lastFailoverPatch clears the previous failover's fields this one has not reached", () => {
  const times = { detected: { mono: 0, wall: new Date('2026-01-01T00:00:31.000Z') } };
  const patch = lastFailoverPatch(context({ times })) as unknown as Record<string, unknown>;
  assert.equal(patch.detectedAt, '2026-01-01T00:00:31.000Z');
  assert.equal(patch.replacementCreatedAt, null);
  assert.equal(patch.completedAt, null);
  assert.equal(patch.volumeHandoff, null);
  const later = lastFailoverPatch(context({ times, handoff: 'removed x' })) as unknown as Record<
    string,
    unknown
  >;
  assert.equal(later.volumeHandoff, 'removed x');
});

test('the StorageFencing condition replaces only itself, is written only when new, and keeps its transition time while the status holds', () => {
  const t0 = new Date('2026-01-01T00:00:00Z');
  const t1 = new Date('2026-01-01T00:01:00Z');
  const fencing = { type: 'Fencing', status: 'True', reason: 'FencePod', message: 'm' };
  const waiting = {
    type: 'StorageFencing' as const,
    status: 'False' as const,
    reason: 'AwaitingNodeDown' as const,
    message: 'w',
  };
  const first = withStorageFencing([fencing], waiting, t0);
  assert.deepEqual(first, [fencing, { ...waiting, lastTransitionTime: t0.toISOString() }]);
  assert.equal(
    withStorageFencing(first ?? [], waiting, t1),
    undefined,
    'a recheck with the same verdict writes nothing',
  );
  const down = withStorageFencing(first ?? [], { ...waiting, reason: 'NodeDown', message: 'd' }, t1);
  assert.equal(down?.[1]?.lastTransitionTime, t0.toISOString(), 'still False: the transition time stays');
  const fences = withStorageFencing(first ?? [], { ...waiting, status: 'True', reason: 'StorageFences' }, t1);
  assert.equal(fences?.[1]?.lastTransitionTime, t1.toISOString());
  assert.deepEqual(fences?.[0], fencing, 'the Fencing condition is kept');
});
