import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  acquiredRecord,
  decideAcquire,
  decideAfterConflict,
  MAX_TRANSITIONS,
  nextRenewalAt,
  nextRetryAt,
  type Observation,
  observe,
  releasedRecord,
  renewDeadlineAt,
  renewedRecord,
  requestBudgetMs,
} from '../../agent/lease-decision.ts';
import { ManualClock } from '../../lib/clock.ts';
import { type LeaseRecord, newLeaseRecord } from '../../lib/lease-record.ts';

const ME = { podName: 'sm-vol-1-abcde', nodeName: 'node-a' };
const D = 6000;

function lease(fields: Partial<LeaseRecord>): LeaseRecord {
  return { ...newLeaseRecord('ns', 'vol-1', 6), resourceVersion: '100', ...fields };
}

describe('observe', () => {
  it('keeps the first observation time while the resourceVersion stays the same', () => {
    const first = observe(undefined, lease({ resourceVersion: '1' }), 10);
    assert.deepEqual(observe(first, lease({ resourceVersion: '1' }), 5000), {
      resourceVersion: '1',
      observedAtMs: 10,
    });
    assert.deepEqual(observe(first, lease({ resourceVersion: '2' }), 5000), {
      resourceVersion: '2',
      observedAtMs: 5000,
    });
  });
});

describe('decideAcquire', () => {
  const clock = new ManualClock(1_000);
  const decide = (l: LeaseRecord | undefined, o?: Observation) => decideAcquire(l, o, ME, D, clock.now());

  it('creates a missing lease', () => {
    assert.deepEqual(decide(undefined), { kind: 'create' });
  });
  it('takes a free lease', () => {
    assert.deepEqual(decide(lease({ holder: '' })), { kind: 'take', reason: 'free' });
  });
  it('resumes its own lease (restart in place)', () => {
    assert.deepEqual(decide(lease({ holder: ME.podName })), { kind: 'take', reason: 'self' });
  });
  it('refuses its own lease when a manager marked it delinquent', () => {
    assert.deepEqual(decide(lease({ holder: ME.podName, delinquentSince: '2026-01-01T00:00:00Z' })), {
      kind: 'refuse',
      reason: 'self-delinquent',
    });
  });
  it('takes over a delinquent lease of another pod', () => {
    assert.deepEqual(decide(lease({ holder: 'old-pod', delinquentSince: '2026-01-01T00:00:00Z' })), {
      kind: 'take',
      reason: 'delinquent',
    });
  });
  it('waits while another holder is alive, and takes over after D of silence by its own observation', () => {
    const held = lease({ holder: 'old-pod', resourceVersion: '7' });
    let observation = observe(undefined, held, clock.now());
    assert.deepEqual(decide(held, observation), { kind: 'wait', holder: 'old-pod', expiresAtMs: 1_000 + D });
    clock.advance(D - 1);
    observation = observe(observation, held, clock.now());
    assert.equal(decide(held, observation).kind, 'wait');
    clock.advance(1);
    observation = observe(observation, held, clock.now());
    assert.deepEqual(decide(held, observation), { kind: 'take', reason: 'expired' });
  });
  it('restarts the silence count whenever the holder renews', () => {
    const c = new ManualClock(0);
    let observation = observe(undefined, lease({ holder: 'old-pod', resourceVersion: '1' }), c.now());
    c.advance(5_000);
    const renewed = lease({ holder: 'old-pod', resourceVersion: '2' });
    observation = observe(observation, renewed, c.now());
    c.advance(5_000);
    assert.deepEqual(decideAcquire(renewed, observation, ME, D, c.now()), {
      kind: 'wait',
      holder: 'old-pod',
      expiresAtMs: 11_000,
    });
  });
  it('never judges from the remote renewTime, however old it looks', () => {
    const ancient = lease({ holder: 'old-pod', renewTime: new Date(0), resourceVersion: '3' });
    const observation = observe(undefined, ancient, clock.now());
    assert.equal(decide(ancient, observation).kind, 'wait');
  });
  it("waits the holder's own longer duration when it wrote one", () => {
    const c = new ManualClock(0);
    const long = lease({ holder: 'old-pod', durationSeconds: 20, resourceVersion: '4' });
    const observation = observe(undefined, long, c.now());
    c.advance(D + 1);
    assert.deepEqual(decideAcquire(long, observation, ME, D, c.now()), {
      kind: 'wait',
      holder: 'old-pod',
      expiresAtMs: 20_000,
    });
  });
  it('without takeExpired a silent holder is never taken, however long; free and delinquent leases still are (issue 27 item 1)', () => {
    const c = new ManualClock(0);
    const held = lease({ holder: 'old-pod', resourceVersion: '7' });
    const observation = observe(undefined, held, c.now());
    c.advance(100 * D);
    assert.equal(decideAcquire(held, observation, ME, D, c.now(), false).kind, 'wait');
    assert.deepEqual(decideAcquire(held, observation, ME, D, c.now(), true), {
      kind: 'take',
      reason: 'expired',
    });
    assert.deepEqual(decideAcquire(lease({ holder: '' }), undefined, ME, D, c.now(), false), {
      kind: 'take',
      reason: 'free',
    });
    const marked = lease({ holder: 'old-pod', delinquentSince: '2026-01-01T00:00:00Z' });
    assert.deepEqual(decideAcquire(marked, undefined, ME, D, c.now(), false), {
      kind: 'take',
      reason: 'delinquent',
    });
    assert.deepEqual(decideAcquire(lease({ holder: ME.podName }), undefined, ME, D, c.now(), false), {
      kind: 'take',
      reason: 'self',
    });
  });
  it('an observation of another version does not count', () => {
    const held = lease({ holder: 'old-pod', resourceVersion: '9' });
    const stale: Observation = { resourceVersion: '8', observedAtMs: -100_000 };
    assert.equal(decide(held, stale).kind, 'wait');
  });
});

describe('records written', () => {
  const wall = new Date('2026-01-01T00:00:10Z');
  it('acquiring from another holder bumps transitions, sets identity and times, clears delinquent', () => {
    const old = lease({
      holder: 'old-pod',
      holderNode: 'node-b',
      transitions: 4,
      delinquentSince: '2026-01-01T00:00:00Z',
      failoverBy: 'manager-1',
      acquireTime: new Date(0),
    });
    const next = acquiredRecord(old, ME, D, wall);
    assert.equal(next.holder, ME.podName);
    assert.equal(next.holderNode, 'node-a');
    assert.equal(next.transitions, 5);
    assert.equal(next.delinquentSince, undefined);
    assert.equal(next.failoverBy, 'manager-1');
    assert.deepEqual(next.acquireTime, wall);
    assert.deepEqual(next.renewTime, wall);
    assert.equal(next.durationSeconds, 6);
    assert.equal(next.resourceVersion, '100');
  });
  it('resuming its own lease keeps transitions and acquireTime', () => {
    const own = lease({ holder: ME.podName, transitions: 2, acquireTime: new Date(5) });
    const next = acquiredRecord(own, ME, D, wall);
    assert.equal(next.transitions, 2);
    assert.deepEqual(next.acquireTime, new Date(5));
  });
  it("writes its own witness set and cap; a new holder clears the previous one's served-on-promises period (issue 28)", () => {
    const old = lease({
      holder: 'old-pod',
      witnesses: ['x', 'y', 'z'],
      serveWithoutApiMs: 60_000,
      servedOnPromises: '2026-12-07T10:00:00.000Z/2026-12-07T10:01:00.000Z',
    });
    const next = acquiredRecord(old, ME, D, wall, { names: ['a', 'b', 'c'], serveWithoutApiMs: undefined });
    assert.deepEqual(next.witnesses, ['a', 'b', 'c']);
    assert.equal(next.serveWithoutApiMs, undefined);
    assert.equal(next.servedOnPromises, '');
    const none = acquiredRecord(old, ME, D, wall);
    assert.deepEqual(none.witnesses, [], 'no witnesses: none written, so no replacement asks for clearances');
    const own = acquiredRecord({ ...old, holder: ME.podName }, ME, D, wall);
    assert.equal(own.servedOnPromises, old.servedOnPromises, 'its own period is kept on a restart in place');
  });
  it('taking a free lease is a change of holder', () => {
    assert.equal(acquiredRecord(lease({ holder: '', transitions: 3 }), ME, D, wall).transitions, 4);
  });
  it('transitions at the int32 maximum wrap to 1 (the API server refuses 2^31: no acquisition would ever succeed)', () => {
    const full = acquiredRecord(lease({ holder: 'old-pod', transitions: MAX_TRANSITIONS }), ME, D, wall);
    assert.equal(full.transitions, 1);
    assert.notEqual(full.transitions, MAX_TRANSITIONS, 'still a visible change for a manager comparing them');
    assert.equal(
      acquiredRecord(lease({ holder: 'old-pod', transitions: MAX_TRANSITIONS - 1 }), ME, D, wall).transitions,
      MAX_TRANSITIONS,
    );
    assert.equal(acquiredRecord(lease({ holder: 'old-pod', transitions: -5 }), ME, D, wall).transitions, 1);
  });
  it('renewal changes only renewTime and keeps the resourceVersion for the CAS', () => {
    const own = lease({ holder: ME.podName, transitions: 2 });
    assert.deepEqual(renewedRecord(own, wall), { ...own, renewTime: wall });
  });
  it('release empties the holder and keeps transitions', () => {
    const own = lease({ holder: ME.podName, holderNode: 'node-a', transitions: 2 });
    const released = releasedRecord(own);
    assert.equal(released.holder, '');
    assert.equal(released.holderNode, '');
    assert.equal(released.transitions, 2);
    assert.equal(released.resourceVersion, own.resourceVersion);
  });
});

describe('decideAfterConflict (409 on renewal)', () => {
  it('continues with the new version while still holder and not delinquent', () => {
    const reread = lease({ holder: ME.podName, resourceVersion: '101' });
    assert.deepEqual(decideAfterConflict(reread, ME), { kind: 'continue', lease: reread });
  });
  it('is lost when another pod holds it', () => {
    assert.deepEqual(decideAfterConflict(lease({ holder: 'new-pod' }), ME), {
      kind: 'lost',
      reason: 'holder-changed',
    });
  });
  it('is lost when released by someone else', () => {
    assert.deepEqual(decideAfterConflict(lease({ holder: '' }), ME), {
      kind: 'lost',
      reason: 'holder-changed',
    });
  });
  it('is lost when a manager marked it delinquent', () => {
    const marked = lease({ holder: ME.podName, delinquentSince: '2026-01-01T00:00:00Z' });
    assert.deepEqual(decideAfterConflict(marked, ME), { kind: 'lost', reason: 'delinquent' });
  });
  it('is lost when the lease was deleted', () => {
    assert.deepEqual(decideAfterConflict(undefined, ME), { kind: 'lost', reason: 'deleted' });
  });
});

describe('renew deadline arithmetic', () => {
  const R = 2000;
  const T = 4000;
  const RETRY = 500;
  const CAP = 1000;
  it('counts the deadline from when the last success was sent', () => {
    assert.equal(renewDeadlineAt(10_000, T), 14_000);
    assert.equal(nextRenewalAt(10_000, R), 12_000);
  });
  it('caps each request at the request timeout and at the time left until the deadline', () => {
    const deadline = renewDeadlineAt(10_000, T);
    assert.equal(requestBudgetMs(12_000, deadline, CAP), 1000);
    assert.equal(requestBudgetMs(13_600, deadline, CAP), 400);
    assert.equal(requestBudgetMs(14_000, deadline, CAP), 0);
    assert.equal(requestBudgetMs(13_100.6, deadline, CAP), 899, 'whole ms, rounded down');
    assert.ok(requestBudgetMs(14_001, deadline, CAP) < 0);
  });
  it('no request started before the deadline can outlive it', () => {
    const clock = new ManualClock(10_000);
    const deadline = renewDeadlineAt(clock.now(), T);
    for (let sentAt = 12_000; sentAt < deadline; sentAt += 37) {
      assert.ok(sentAt + requestBudgetMs(sentAt, deadline, CAP) <= deadline);
    }
  });
  it('retries one retry period after the failed attempt started, at once after a slow one, never past the deadline', () => {
    assert.equal(nextRetryAt(12_000, 12_010, RETRY, 14_000), 12_500);
    assert.equal(nextRetryAt(12_000, 13_000, RETRY, 14_000), 13_000);
    assert.equal(nextRetryAt(13_800, 13_810, RETRY, 14_000), 14_000);
  });
});
