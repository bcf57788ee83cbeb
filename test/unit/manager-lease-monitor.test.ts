import assert from 'node:assert/strict';
import { afterEach, beforeEach, mock, test } from 'node:test';
import type { V1Lease } from '@kubernetes/client-node';
import { ManualClock } from '../../lib/clock.ts';
import { LeaseMonitor, type StaleVerdict } from '../../manager/lease-monitor.ts';

// Test seam: node:test's mocked setTimeout moves with the ManualClock.
let clock: ManualClock;
function advance(ms: number): void {
  clock.advance(ms);
  mock.timers.tick(ms);
}

beforeEach(() => {
  clock = new ManualClock();
  mock.timers.enable({ apis: ['setTimeout'] });
});
afterEach(() => mock.timers.reset());

function wire(name: string, rv: number, renew: string, holder = 'pod-a'): V1Lease {
  return {
    metadata: { namespace: 'ns', name, resourceVersion: String(rv) },
    spec: {
      holderIdentity: holder,
      leaseDurationSeconds: 6,
      renewTime: renew as unknown as Date,
      leaseTransitions: 1,
    },
  };
}

function monitor() {
  const stale: StaleVerdict[] = [];
  const m = new LeaseMonitor(clock, 6000, {
    onStale: (v) => stale.push(v),
    onLeaseChange: () => {},
    onLeaseGone: () => {},
  });
  return { m, stale };
}

test('the per-lease timer fires just after D with no renewal, and renewals push it back', () => {
  const { m, stale } = monitor();
  m.watchConnected();
  m.leaseSeen(wire('a', 1, '2026-01-01T00:00:00.000000Z'));
  advance(5000);
  m.leaseSeen(wire('a', 2, '2026-01-01T00:00:05.000000Z'));
  advance(5999);
  assert.equal(stale.length, 0);
  advance(2);
  assert.equal(stale.length, 1);
  assert.equal(stale[0]?.key, 'ns/a');
  assert.ok((stale[0]?.lagMs ?? 99) <= 1);
});

test('blind while the watch is broken; after it reopens, D of healthy watch is needed', () => {
  const { m, stale } = monitor();
  m.watchConnected();
  m.leaseSeen(wire('a', 1, 't1'));
  advance(3000);
  m.watchDisconnected();
  advance(60_000);
  assert.equal(stale.length, 0, 'no verdict while blind');
  m.watchConnected();
  advance(5999);
  assert.equal(stale.length, 0, 'observedAt was reset at reconnect');
  advance(2);
  assert.equal(stale.length, 1);
});

test('an older resourceVersion delivered late does not undo a newer observation', () => {
  const { m, stale } = monitor();
  m.watchConnected();
  m.leaseSeen(wire('a', 5, '2026-01-01T00:00:05.000000Z'));
  advance(4000);
  m.leaseSeen(wire('a', 6, '2026-01-01T00:00:06.000000Z'));
  m.leaseSeen(wire('a', 4, '2026-01-01T00:00:04.000000Z'));
  assert.equal(m.observation('ns/a')?.lease.resourceVersion, '6');
  advance(5000);
  assert.equal(stale.length, 0);
});

test('deleted and free leases have no timer', () => {
  const { m, stale } = monitor();
  m.watchConnected();
  m.leaseSeen(wire('a', 1, 't1'));
  m.leaseSeen(wire('b', 1, 't1', ''));
  m.leaseDeleted('ns', 'a');
  advance(60_000);
  assert.equal(stale.length, 0);
  assert.equal(m.tracked, 1);
});

test('100 leases, one timer each: each fires once, in deadline order', () => {
  const { m, stale } = monitor();
  m.watchConnected();
  for (let i = 0; i < 100; i++) {
    m.leaseSeen(wire(`l${i}`, 1, 't'));
    advance(10);
  }
  advance(6000);
  assert.equal(stale.length, 100);
  assert.deepEqual(
    stale.map((s) => s.key),
    Array.from({ length: 100 }, (_, i) => `ns/l${i}`),
  );
});

test('a held lease freed before its deadline (holder pod ended) is never judged stale', () => {
  const { m, stale } = monitor();
  m.watchConnected();
  m.leaseSeen(wire('a', 1, 't1'));
  advance(4000);
  m.leaseSeen(wire('a', 2, 't1', '')); // freed: holder emptied, renewTime kept
  advance(60_000);
  m.watchDisconnected();
  m.watchConnected(); // re-list after an outage: still free, still no timer
  advance(60_000);
  assert.equal(stale.length, 0);
  m.leaseSeen(wire('a', 3, 't2', 'pod-b')); // the replacement acquires: a deadline again
  advance(6001);
  assert.equal(stale.length, 1);
});
