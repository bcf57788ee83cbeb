import assert from 'node:assert/strict';
import { test } from 'node:test';
import { fromWire, type LeaseRecord } from '../../lib/lease-record.ts';
import { judge, observe, refloor, resetObservation } from '../../manager/detection/staleness.ts';

function lease(
  over: { holder?: string; renew?: string; rv?: string; delinquent?: string; duration?: number } = {},
): LeaseRecord {
  return fromWire({
    metadata: {
      namespace: 'ns',
      name: 'sm',
      resourceVersion: over.rv ?? '1',
      annotations: over.delinquent ? { 'leasehold.dev/delinquent': over.delinquent } : {},
    },
    spec: {
      holderIdentity: over.holder ?? 'sm-abc',
      leaseDurationSeconds: over.duration ?? 6,
      renewTime: (over.renew ?? '2026-01-01T00:00:00.000000Z') as unknown as Date,
      leaseTransitions: 1,
    },
  });
}

const healthy = { healthy: true, healthySince: 0 };

test('a lease is stale only after D has passed since the renewal was observed', () => {
  const { observation } = observe(undefined, lease(), 1000, 6000);
  assert.deepEqual(judge(observation, healthy, 7000), { kind: 'fresh', deadline: 7000 });
  const stale = judge(observation, healthy, 7001);
  assert.equal(stale.kind, 'stale');
  assert.equal(stale.kind === 'stale' && stale.lagMs, 1);
});

test('a renewal moves observedAt; a change of metadata alone does not', () => {
  const first = observe(undefined, lease({ rv: '1' }), 0, 6000).observation;
  const relabelled = observe(first, lease({ rv: '2' }), 3000, 6000);
  assert.equal(relabelled.renewed, false);
  assert.equal(relabelled.observation.observedAt, 0);
  assert.equal(relabelled.observation.lease.resourceVersion, '2', 'keeps the latest version for the CAS');
  const renewed = observe(first, lease({ rv: '3', renew: '2026-01-01T00:00:02.000000Z' }), 3000, 6000);
  assert.equal(renewed.renewed, true);
  assert.equal(renewed.observation.observedAt, 3000);
});

test('clock skew: a renewTime far in the past or future never matters, only its change', () => {
  let obs = observe(undefined, lease({ renew: '2025-12-31T23:50:00.000000Z' }), 0, 6000).observation;
  for (let t = 2000; t <= 60_000; t += 2000) {
    const skewed = new Date(Date.UTC(2025, 11, 31, 23, 50) + t).toISOString();
    obs = observe(obs, lease({ renew: skewed, rv: String(t) }), t, 6000).observation;
    assert.equal(judge(obs, healthy, t + 1999).kind, 'fresh');
  }
  let future = observe(undefined, lease({ renew: '2026-01-01T00:10:00.000000Z' }), 0, 6000).observation;
  future = observe(future, lease({ renew: '2026-01-01T00:10:02.000000Z' }), 2000, 6000).observation;
  assert.equal(judge(future, healthy, 7999).kind, 'fresh');
});

test('blindness: no verdict while the watch is down, and D of healthy watch needed after', () => {
  const obs = observe(undefined, lease(), 0, 6000).observation;
  assert.deepEqual(judge(obs, { healthy: false, healthySince: 0 }, 100_000), { kind: 'blind' });
  // Watch came back at 50 s: fresh until 56 s even though observedAt is 0.
  assert.equal(judge(obs, { healthy: true, healthySince: 50_000 }, 55_999).kind, 'fresh');
  assert.equal(judge(obs, { healthy: true, healthySince: 50_000 }, 56_001).kind, 'stale');
  const reset = resetObservation(obs, 50_000);
  assert.equal(reset.observedAt, 50_000);
  assert.deepEqual(judge(reset, healthy, 56_000), { kind: 'fresh', deadline: 56_000 });
});

test('free and delinquent leases have no deadline', () => {
  assert.deepEqual(judge(observe(undefined, lease({ holder: '' }), 0, 6000).observation, healthy, 1e6), {
    kind: 'free',
  });
  const delinquent = observe(undefined, lease({ delinquent: '2026-01-01T00:00:00Z' }), 0, 6000).observation;
  assert.deepEqual(judge(delinquent, healthy, 1e6), { kind: 'delinquent' });
});

test("the lease duration is the Lease's when longer than the floor, else the floor", () => {
  assert.equal(observe(undefined, lease({ duration: 10 }), 0, 6000).observation.durationMs, 10_000);
  assert.equal(observe(undefined, lease({ duration: 0 }), 0, 6000).observation.durationMs, 6000);
  assert.equal(observe(undefined, lease({ duration: 1 }), 0, 6000).observation.durationMs, 6000);
  assert.equal(observe(undefined, lease({ duration: 1 }), 0, 20_000).observation.durationMs, 20_000);
});

test('the floor is sticky while the same holder holds, and starts afresh for a new holder', () => {
  let obs = observe(undefined, lease({ duration: 1 }), 0, 20_000).observation;
  obs = observe(
    obs,
    lease({ duration: 1, rv: '2', renew: '2026-01-01T00:00:02.000000Z' }),
    2000,
    6000,
  ).observation;
  assert.equal(obs.durationMs, 20_000, 'a lower floor (spec shortened, ShareManager gone) does not apply');
  assert.equal(refloor(obs, 6000).durationMs, 20_000);
  assert.equal(refloor(obs, 30_000).durationMs, 30_000, 'a higher one does at once');
  obs = observe(obs, lease({ duration: 1, rv: '3', holder: 'sm-new' }), 3000, 6000).observation;
  assert.equal(obs.durationMs, 6000);
});

test('a change of a raw value the record could not take still counts as a renewal', () => {
  const odd = (renew: string, rv: string) => {
    const l = lease({ rv });
    return {
      ...l,
      renewTime: undefined,
      wire: { ...l.wire, spec: { ...l.wire.spec, renewTime: renew as unknown as Date } },
    };
  };
  const first = observe(undefined, odd('garbage-1', '1'), 0, 6000).observation;
  assert.equal(observe(first, odd('garbage-1', '2'), 1000, 6000).renewed, false);
  assert.equal(observe(first, odd('garbage-2', '3'), 1000, 6000).renewed, true);
});
