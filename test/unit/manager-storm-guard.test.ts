import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  assess,
  considerStale,
  emptyStormGuard,
  forgetLease,
  type Population,
  type StormGuardState,
  stormStatus,
} from '../../manager/detection/storm-guard.ts';

const config = { threshold: 0.5, minLeases: 3, windowMs: 10_000 };

/** `leases` as [key, holder node]: the tracked population. */
function population(leases: [string, string][]): Population {
  const byNode = new Map<string, number>();
  for (const [, node] of leases) if (node) byNode.set(node, (byNode.get(node) ?? 0) + 1);
  return { total: leases.length, byNode };
}

/** Feeds stale verdicts in order; returns the allow of each and the final state. */
function feed(
  verdicts: { key: string; node: string; nodeHealthy?: boolean; now?: number }[],
  pop: Population,
  c = config,
): { allows: boolean[]; state: StormGuardState } {
  let state = emptyStormGuard;
  const allows: boolean[] = [];
  for (const v of verdicts) {
    const out = considerStale(state, { nodeHealthy: true, now: 0, ...v }, pop, c);
    state = out.state;
    allows.push(out.allow);
  }
  return { allows, state };
}

test('one stale lease among many is never a storm', () => {
  const pop = population(Array.from({ length: 20 }, (_, i) => [`l${i}`, `n${i % 4}`]));
  assert.deepEqual(feed([{ key: 'l0', node: 'n0' }], pop).allows, [true]);
});

test('a single lease out of one is not a storm (minLeases)', () => {
  assert.deepEqual(feed([{ key: 'a', node: '' }], population([['a', '']])).allows, [true]);
});

test('one node carrying 5 of 6 shares goes stale (still looking healthy): all 5 fail over at once', () => {
  const leases: [string, string][] = [
    ['a', 'big'],
    ['b', 'big'],
    ['c', 'big'],
    ['d', 'big'],
    ['e', 'big'],
    ['f', 'small'],
  ];
  const { allows, state } = feed(
    ['a', 'b', 'c', 'd', 'e'].map((key, i) => ({ key, node: 'big', now: i * 100 })),
    population(leases),
  );
  assert.deepEqual(allows, [true, true, true, true, true]);
  const s = stormStatus(state, population(leases), 500, config);
  assert.equal(s.active, false);
  assert.equal(s.source, 'big');
  assert.equal(s.explained, 5);
  assert.equal(s.suspects, 0);
});

test('a whole node of 10 shares among 3 nodes, all stale: never a storm, with any threshold', () => {
  const leases: [string, string][] = Array.from({ length: 14 }, (_, i) => [`l${i}`, i < 10 ? 'x' : `y${i}`]);
  const strict = { threshold: 0, minLeases: 1, windowMs: 10_000 };
  const { allows } = feed(
    Array.from({ length: 10 }, (_, i) => ({ key: `l${i}`, node: 'x' })),
    population(leases),
    strict,
  );
  assert.ok(allows.every(Boolean));
});

test('stale leases spread over 3 healthy-looking nodes: paused', () => {
  const leases: [string, string][] = ['a', 'b', 'c', 'd', 'e', 'f'].map((k, i) => [k, `n${i % 3}`]);
  // a,d on n0; b,e on n1; c,f on n2.
  const { allows, state } = feed(
    ['a', 'b', 'c', 'd', 'e', 'f'].map((key, i) => ({ key, node: `n${i % 3}`, now: i * 100 })),
    population(leases),
  );
  // After a,b,c,d: n0 (2) explains 2; 2 counted < minLeases. After e: n0 or n1 (2) explains 2;
  // 3 counted >= 3 and 3 > 0.5 x 4 leases elsewhere: paused.
  assert.deepEqual(allows, [true, true, true, true, false, false]);
  const s = stormStatus(state, population(leases), 600, config);
  assert.equal(s.active, true);
  assert.equal(s.suspects, 4);
  assert.equal(s.nodes, 2);
  assert.equal(stormStatus(state, population(leases), 20_000, config).active, false, 'the window passes');
});

test('one node lost plus one unrelated stale lease elsewhere: not a storm', () => {
  const leases: [string, string][] = [
    ['a', 'x'],
    ['b', 'x'],
    ['c', 'x'],
    ['d', 'x'],
    ['e', 'y'],
    ['f', 'z'],
  ];
  const { allows } = feed(
    [
      { key: 'a', node: 'x' },
      { key: 'e', node: 'y' },
      { key: 'b', node: 'x' },
      { key: 'c', node: 'x' },
      { key: 'd', node: 'x' },
    ],
    population(leases),
  );
  assert.ok(allows.every(Boolean));
});

test('stale leases on unhealthy nodes never count; a re-judged lease whose node went down stops counting', () => {
  const leases: [string, string][] = ['a', 'b', 'c', 'd', 'e'].map((k, i) => [k, `n${i}`]);
  const pop = population(leases);
  const { allows } = feed(
    ['a', 'b', 'c', 'd', 'e'].map((key, i) => ({ key, node: `n${i}`, nodeHealthy: false })),
    pop,
  );
  assert.ok(allows.every(Boolean));
  const spread = feed(
    ['a', 'b', 'c', 'd'].map((key, i) => ({ key, node: `n${i}` })),
    pop,
  );
  assert.equal(stormStatus(spread.state, pop, 0, config).active, true);
  const down = considerStale(spread.state, { key: 'd', node: 'n3', nodeHealthy: false, now: 0 }, pop, config);
  assert.equal(down.active, false, 'd is explained by its node now');
});

test('leases with no known holder node are never explained by a node failure: each counts on its own', () => {
  const leases: [string, string][] = ['a', 'b', 'c', 'd'].map((k) => [k, '']);
  const { allows } = feed(
    ['a', 'b', 'c', 'd'].map((key) => ({ key, node: '' })),
    population(leases),
  );
  assert.deepEqual(allows, [true, true, false, false]);
});

test('ties between nodes pick the node carrying more leases as the source (the stricter count)', () => {
  // x carries 1 tracked lease, y carries 5; one stale on each plus 2 unknown.
  const leases: [string, string][] = [
    ['a', 'x'],
    ['b', 'y'],
    ['b2', 'y'],
    ['b3', 'y'],
    ['b4', 'y'],
    ['b5', 'y'],
    ['u1', ''],
    ['u2', ''],
  ];
  const recent = new Map([
    ['a', { at: 0, node: 'x' }],
    ['b', { at: 0, node: 'y' }],
    ['u1', { at: 0, node: '' }],
    ['u2', { at: 0, node: '' }],
  ]);
  const a = assess(recent, population(leases), config);
  assert.equal(a.source, 'y');
  assert.equal(a.suspects, 3);
  // 3 > 0.5 x (8 - 5): active.
  assert.equal(a.active, true);
});

test('a lease that renews stops being a suspect; the same lease counts once', () => {
  const leases: [string, string][] = ['a', 'b', 'c', 'd'].map((k, i) => [k, `n${i}`]);
  const pop = population(leases);
  const { state: s1 } = feed(
    [
      { key: 'a', node: 'n0' },
      { key: 'a', node: 'n0' },
      { key: 'b', node: 'n1' },
      { key: 'c', node: 'n2' },
      { key: 'd', node: 'n3' },
    ],
    pop,
  );
  assert.equal(stormStatus(s1, pop, 0, config).suspects, 3, 'four distinct leases, one explained');
  assert.equal(stormStatus(s1, pop, 0, config).active, true);
  const s2 = forgetLease(s1, 'c');
  assert.equal(stormStatus(s2, pop, 0, config).active, false);
});
