import assert from 'node:assert/strict';
import { afterEach, beforeEach, mock, test } from 'node:test';
import type { V1Lease } from '@kubernetes/client-node';
import { ManualClock } from '../../lib/clock.ts';
import type { Logger } from '../../lib/logger.ts';
import { LeaseMonitor, type StaleVerdict } from '../../manager/detection/lease-monitor.ts';

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

/** Log lines the monitor wrote, as [object, message]. */
type Line = [Record<string, unknown>, string];

function monitor(floor: (key: string) => number = () => 6000) {
  const stale: StaleVerdict[] = [];
  const lines: Line[] = [];
  const log = {
    warn: (o: Record<string, unknown>, msg: string) => lines.push([o, msg]),
  } as unknown as Logger;
  const m = new LeaseMonitor(
    clock,
    (key) => floor(key),
    {
      onStale: (v) => stale.push(v),
      onLeaseChange: () => {},
      onLeaseGone: () => {},
    },
    log,
  );
  return { m, stale, lines };
}

test('the per-lease timer fires just after D with no renewal, and renewals push it back', () => {
  const { m, stale } = monitor();
  m.watchConnected('relisted');
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
  m.watchConnected('relisted');
  m.leaseSeen(wire('a', 1, 't1'));
  advance(3000);
  m.watchDisconnected('error');
  advance(60_000);
  assert.equal(stale.length, 0, 'no verdict while blind');
  m.watchConnected('relisted');
  advance(5999);
  assert.equal(stale.length, 0, 'observedAt was reset at reconnect');
  advance(2);
  assert.equal(stale.length, 1);
});

test('a routine re-watch (clean end, resumed at once) keeps the deadline; an error break resets it', () => {
  const { m, stale } = monitor();
  m.watchConnected('relisted');
  m.leaseSeen(wire('a', 1, 't1'));
  m.leaseSeen(wire('b', 1, 't1'));
  advance(2000);
  m.watchDisconnected('ended');
  advance(150);
  m.watchConnected('resumed');
  advance(3851);
  assert.deepEqual(
    stale.map((s) => s.key),
    ['ns/a', 'ns/b'],
    'D after the last renewal, not after the re-watch',
  );
  assert.equal(stale[0]?.effectiveObservedAt, 0);

  const again = monitor();
  const t0 = clock.now();
  again.m.watchConnected('relisted');
  again.m.leaseSeen(wire('a', 1, 't1'));
  advance(2000);
  again.m.watchDisconnected('error');
  advance(150);
  again.m.watchConnected('resumed');
  advance(3851);
  assert.equal(again.stale.length, 0, 'after an error the watch needs D again');
  advance(2150);
  assert.equal(again.stale.length, 1);
  assert.equal(again.stale[0]?.effectiveObservedAt, t0 + 2150);
});

test('a bad re-watch gap bound is refused, naming it', () => {
  const log = {} as Logger;
  const hooks = { onStale: () => {}, onLeaseChange: () => {}, onLeaseGone: () => {} };
  assert.throws(
    () => new LeaseMonitor(clock, () => 6000, hooks, log, { maxGapMs: -1 }),
    /lease monitor: watch continuity maxGapMs: -1 must be a finite number/,
  );
});

test('an older resourceVersion delivered late does not undo a newer observation', () => {
  const { m, stale } = monitor();
  m.watchConnected('relisted');
  m.leaseSeen(wire('a', 5, '2026-01-01T00:00:05.000000Z'));
  advance(4000);
  m.leaseSeen(wire('a', 6, '2026-01-01T00:00:06.000000Z'));
  m.leaseSeen(wire('a', 4, '2026-01-01T00:00:04.000000Z'));
  assert.equal(m.observation('ns/a')?.lease.resourceVersion, '6');
  advance(5000);
  assert.equal(stale.length, 0);
});

test('etcd restored (a list or read older than known): observed afresh, later renewals count, a later silence is stale (issue 27 item 7)', () => {
  const { m, stale, lines } = monitor();
  m.watchConnected('relisted');
  m.leaseSeen(wire('a', 5000, '2026-01-01T00:00:50.000000Z'));
  advance(3000);
  // The re-list after the restore: the same lease at an older version, from the server's current state.
  m.leaseSeen(wire('a', 4010, '2026-01-01T00:00:40.000000Z'), true);
  assert.equal(m.observation('ns/a')?.lease.resourceVersion, '4010');
  assert.match(lines.at(-1)?.[1] ?? '', /older on the API server than we knew it/);
  advance(5000);
  assert.equal(stale.length, 0, 'judged from the re-list, not from the lost history');
  // Renewals after the restore (still below 5000) are seen as renewals.
  m.leaseSeen(wire('a', 4011, '2026-01-01T00:00:45.000000Z'));
  advance(5000);
  m.leaseSeen(wire('a', 4012, '2026-01-01T00:00:50.000000Z'));
  advance(5000);
  assert.equal(stale.length, 0, 'renewals after the restore keep it fresh');
  // The holder dies after the restore: stale D after its last renewal.
  advance(1001);
  assert.equal(stale.length, 1);
  assert.equal(stale[0]?.observation.lease.resourceVersion, '4012');
});

test('deleted and free leases have no timer', () => {
  const { m, stale } = monitor();
  m.watchConnected('relisted');
  m.leaseSeen(wire('a', 1, 't1'));
  m.leaseSeen(wire('b', 1, 't1', ''));
  m.leaseDeleted('ns', 'a');
  advance(60_000);
  assert.equal(stale.length, 0);
  assert.equal(m.tracked, 1);
});

test('100 leases, one timer each: each fires once, in deadline order', () => {
  const { m, stale } = monitor();
  m.watchConnected('relisted');
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
  m.watchConnected('relisted');
  m.leaseSeen(wire('a', 1, 't1'));
  advance(4000);
  m.leaseSeen(wire('a', 2, 't1', '')); // freed: holder emptied, renewTime kept
  advance(60_000);
  m.watchDisconnected('error');
  m.watchConnected('relisted'); // re-list after an outage: still free, still no timer
  advance(60_000);
  assert.equal(stale.length, 0);
  m.leaseSeen(wire('a', 3, 't2', 'pod-b')); // the replacement acquires: a deadline again
  advance(6001);
  assert.equal(stale.length, 1);
});

function withDuration(lease: V1Lease, seconds: unknown): V1Lease {
  return { ...lease, spec: { ...lease.spec, leaseDurationSeconds: seconds as number } };
}

test('a Lease edited to a duration shorter than the floor is judged by the floor, and said once', () => {
  const { m, stale, lines } = monitor(() => 6000);
  m.watchConnected('relisted');
  m.leaseSeen(withDuration(wire('a', 1, '2026-01-01T00:00:00.000000Z'), 1));
  m.leaseSeen(withDuration(wire('a', 2, '2026-01-01T00:00:00.000000Z'), 1)); // metadata-only change
  advance(5999);
  assert.equal(stale.length, 0, 'no verdict before the floor');
  advance(2);
  assert.equal(stale.length, 1);
  assert.equal(stale[0]?.observation.durationMs, 6000);
  const said = lines.filter(([o]) => o.field === 'spec.leaseDurationSeconds');
  assert.equal(said.length, 1, 'one line per lease and odd value, not per event');
  assert.equal(said[0]?.[0].lease, 'ns/a');
  assert.equal(said[0]?.[0].value, '1');
  assert.match(said[0]?.[1] ?? '', /ns\/a: spec\.leaseDurationSeconds = 1: shorter than .* 6s/);
});

test('a huge duration: no timer beyond 2^31-1 ms, a few wake-ups over 60 days, verdict only after it', () => {
  const { m, stale } = monitor(() => 6000);
  m.watchConnected('relisted');
  const seconds = 2 ** 31 - 1;
  m.leaseSeen(withDuration(wire('a', 1, 't1'), seconds));
  const spy = mock.method(globalThis, 'setTimeout');
  try {
    const day = 86_400_000;
    for (let d = 0; d < 60; d++) advance(day);
    assert.equal(stale.length, 0);
    const delays = spy.mock.calls.map((c) => Number(c.arguments[1]));
    assert.ok(
      delays.every((ms) => ms <= 2 ** 31 - 1 && ms >= 0),
      `delays ${delays.join(', ')}`,
    );
    assert.ok(delays.length <= 3, `re-armed ${delays.length} times in 60 days (bounded steps)`);
  } finally {
    spy.mock.restore();
  }
  assert.equal(m.observation('ns/a')?.durationMs, seconds * 1000, 'a longer duration is honoured');
});

test('hostile durations (0, negative, fractional, NaN, a string, missing, beyond int32) fall back to the floor', () => {
  for (const value of [0, -5, 2.5, Number.NaN, '10', undefined, 2 ** 31, Number.POSITIVE_INFINITY]) {
    const { m, stale, lines } = monitor(() => 4000);
    m.watchConnected('relisted');
    m.leaseSeen(withDuration(wire('a', 1, 't1'), value));
    advance(4001);
    assert.equal(stale.length, 1, `verdict after the floor for ${String(value)}`);
    assert.equal(stale[0]?.observation.durationMs, 4000);
    const said = lines.filter(([o]) => o.field === 'spec.leaseDurationSeconds');
    assert.equal(said.length, 1, `one line for ${String(value)}`);
    assert.match(said[0]?.[1] ?? '', /judged by the ShareManager's lease duration 4s/);
    mock.timers.reset();
    mock.timers.enable({ apis: ['setTimeout'] });
  }
});

test('the floor rises when the ShareManager is seen after the Lease, and is sticky for the holder', () => {
  let floor = 6000;
  const { m, stale } = monitor(() => floor);
  m.watchConnected('relisted');
  m.leaseSeen(withDuration(wire('a', 1, 't1'), 1));
  advance(3000);
  floor = 20_000; // the ShareManager (lease.duration 20s) arrives
  m.floorChanged('ns/a');
  advance(10_000);
  assert.equal(stale.length, 0, 'not at the default 6 s');
  floor = 6000; // the ShareManager deleted (or shortened): the running holder keeps 20 s
  m.floorChanged('ns/a');
  m.leaseSeen(withDuration(wire('a', 2, 't1'), 1));
  advance(6_999);
  assert.equal(stale.length, 0);
  advance(2);
  assert.equal(stale.length, 1, 'stale at 20 s after the last renewal');
  // A new holder (a pod from the current spec) starts from the current floor.
  m.leaseSeen(withDuration(wire('a', 3, 't2', 'pod-b'), 1));
  assert.equal(m.observation('ns/a')?.durationMs, 6000);
});
