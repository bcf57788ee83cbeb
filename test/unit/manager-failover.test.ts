import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  EVENTS,
  type FailoverEvent,
  isOwning,
  PHASES,
  type Phase,
  TRANSITIONS,
  transition,
} from '../../manager/failover.ts';

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
    ['stale', 'marking', ['writeMark']],
    ['markWon', 'deletingPod', ['announce', 'deletePod']],
    ['podGone', 'detaching', ['deleteAttachments']],
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
      if (actions.includes('writeMark')) assert.deepEqual([phase, event], ['idle', 'stale']);
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
    'marking',
    'deletingPod',
    'detaching',
    'replacing',
    'awaitingAcquire',
    'takingOver',
  ]);
});
