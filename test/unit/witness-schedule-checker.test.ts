/**
 * Witness promises (lib/witness-protocol.ts, manager/witness/witness-rules.ts) against
 * seeded random schedules: API outages for everyone, one node cut off from the API, nodes
 * cut off from the pod network, witnesses restarting (forgetting all they promised),
 * messages delayed (up to 5 s) or lost, and clocks running at rates up to 0.1 % apart with
 * arbitrary offsets. The holder A renews through the API and, when renewals fail, asks
 * every witness for promises; a manager marks A delinquent D after it last observed a
 * renewal (the existing rule); the replacement B acquires, then asks for clearances and
 * opens its gate on a quorum. The invariant: B's gate opens only after A's fence ended.
 * Broken variants (a clearance that ignores a promise, no wait after a restart, a promise
 * counted from its answer, a promise without a fresh view after a restart, one promise
 * short of a quorum) are shown to break it, so the checker can fail.
 *
 * Not modelled: the API server's own failures beyond unreachability (its CAS is assumed
 * linearizable), a clock that stops (a frozen node: docs/design.md says what that does),
 * and the shell's HTTP and timers (the integration tests cover them).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { clearanceQuorum, type HeldPromise, servingDeadlineMs } from '../../lib/witness-protocol.ts';
import {
  apiAnswered,
  applyWitnessChange,
  decideClearance,
  decidePromise,
  startWitness,
  type WitnessSettings,
  type WitnessState,
} from '../../manager/witness/witness-rules.ts';
import { seededRandom } from '../support/seeded-random.ts';

const R = 2_000;
const T = 4_000;
const D = 6_000;
const FENCE_TIMEOUT = 1_500;
/** P: how long the holder counts a promise (the agent's default: T). */
const P = T;
const SETTINGS: WitnessSettings = { maxHoldMs: 30_000, apiLostAfterMs: 1_000 };
/** How often a witness reads its leases (the API's answer proves it reachable). */
const WITNESS_READ_EVERY = 250;
const RATE_SPREAD = 1e-3;
const HORIZON = 120_000;
const LEASE = 'share-a';

interface Window {
  from: number;
  to: number;
}
const inside = (windows: readonly Window[], t: number) => windows.some((w) => t >= w.from && t < w.to);

/** The rules under test; the broken variants replace one of them. */
interface Rules {
  promise: typeof decidePromise;
  clearance: typeof decideClearance;
  /** The holder's record of a promise, from its request's send and its answer's arrival. */
  held: (witness: string, sentAtMs: number, answeredAtMs: number, validForMs: number) => HeldPromise;
  /** The witnesses the holder counts against (its quorum is theirs). */
  holderSet: (witnesses: readonly string[]) => readonly string[];
}

const RULES: Rules = {
  promise: decidePromise,
  clearance: decideClearance,
  held: (witness, sentAtMs, _answeredAtMs, validForMs) => ({ witness, sentAtMs, validForMs }),
  holderSet: (w) => w,
};

interface Scenario {
  witnesses: string[];
  globalOutages: Window[];
  cutFromApi: Map<string, Window[]>;
  isolated: Map<string, Window[]>;
  restarts: Map<string, Window[]>;
  clock: Map<string, { rate: number; offset: number }>;
}

type Kind = 'any' | 'outage-only' | 'holder-cut' | 'restart-after-clearance';

function scenario(rand: () => number, kind: Kind): Scenario {
  const n = kind === 'restart-after-clearance' || rand() < 0.5 ? 5 : 3;
  const witnesses = Array.from({ length: n }, (_, i) => `w${i}`);
  const window = (minLen: number, maxLen: number, forever = 0): Window => {
    const from = 2_000 + rand() * 60_000;
    return {
      from,
      to: rand() < forever ? Number.POSITIVE_INFINITY : from + minLen + rand() * (maxLen - minLen),
    };
  };
  const some = (p: number, make: () => Window) => (rand() < p ? [make()] : []);
  const globalOutages =
    kind === 'any' || kind === 'outage-only'
      ? [...some(0.8, () => window(1_000, 40_000)), ...some(0.4, () => window(1_000, 300_000))]
      : [];
  const cutFromApi = new Map<string, Window[]>();
  const isolated = new Map<string, Window[]>();
  const restarts = new Map<string, Window[]>();
  const clock = new Map<string, { rate: number; offset: number }>();
  for (const w of witnesses) {
    clock.set(w, { rate: 1 + (rand() * 2 - 1) * RATE_SPREAD, offset: rand() * 1e9 });
    if (kind === 'outage-only') continue;
    const holderNode = w === 'w0';
    if (kind === 'holder-cut') {
      if (holderNode) cutFromApi.set(w, [{ from: 10_000, to: Number.POSITIVE_INFINITY }]);
      continue;
    }
    if (kind === 'restart-after-clearance') {
      // A's quorum: w0, w4 (cut for good) and w3 (cut until u). w1 reaches the API, never
      // promises and clears; then restarts at r and is cut from the API from then on.
      const u = 25_000 + rand() * 20_000;
      const r = 20_000 + rand() * 20_000;
      if (w === 'w0') cutFromApi.set(w, [{ from: 10_000, to: Number.POSITIVE_INFINITY }]);
      if (w === 'w4') cutFromApi.set(w, [{ from: 8_000, to: Number.POSITIVE_INFINITY }]);
      if (w === 'w3') cutFromApi.set(w, [{ from: 8_000, to: u }]);
      if (w === 'w1') {
        restarts.set(w, [{ from: r, to: r + 500 }]);
        cutFromApi.set(w, [{ from: r, to: Number.POSITIVE_INFINITY }]);
      }
      continue;
    }
    cutFromApi.set(
      w,
      some(holderNode ? 0.6 : 0.2, () => window(2_000, 40_000, holderNode ? 0.3 : 0)),
    );
    isolated.set(
      w,
      some(holderNode ? 0.3 : 0.15, () => window(1_000, 30_000)),
    );
    restarts.set(
      w,
      some(0.3, () => window(200, 3_000)),
    );
  }
  return { witnesses, globalOutages, cutFromApi, isolated, restarts, clock };
}

interface Outcome {
  /** Real time A's fence ended; undefined: A still serves at the horizon. */
  holderStoppedAt: number | undefined;
  replacementOpenedAt: number | undefined;
  markedAt: number | undefined;
  /** A served past its API deadline on promises. */
  servedOnPromises: boolean;
  /** B was told to wait for a promise to run out. */
  waitedForPromise: boolean;
}

/** A small binary heap of timed events; ties run in the order they were added. */
class Events {
  private heap: Array<{ at: number; seq: number; run: () => void }> = [];
  private seq = 0;
  add(at: number, run: () => void): void {
    const h = this.heap;
    h.push({ at, seq: this.seq++, run });
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (this.before(h[p] as (typeof h)[0], h[i] as (typeof h)[0])) break;
      [h[p], h[i]] = [h[i] as (typeof h)[0], h[p] as (typeof h)[0]];
      i = p;
    }
  }
  next(): { at: number; run: () => void } | undefined {
    const h = this.heap;
    const top = h[0];
    const last = h.pop();
    if (h.length > 0 && last !== undefined) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.before(h[l] as (typeof h)[0], h[m] as (typeof h)[0])) m = l;
        if (r < h.length && this.before(h[r] as (typeof h)[0], h[m] as (typeof h)[0])) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i] as (typeof h)[0], h[m] as (typeof h)[0]];
        i = m;
      }
    }
    return top;
  }
  private before(a: { at: number; seq: number }, b: { at: number; seq: number }): boolean {
    return a.at < b.at || (a.at === b.at && a.seq < b.seq);
  }
}

function simulate(seed: number, kind: Kind, rules: Rules = RULES): Outcome {
  const horizon = kind === 'outage-only' ? 420_000 : HORIZON;
  const rand = seededRandom(seed);
  const s = scenario(rand, kind);
  const events = new Events();
  const local = (node: string, t: number) => {
    const c = s.clock.get(node) as { rate: number; offset: number };
    return c.offset + c.rate * t;
  };
  const realOf = (node: string, l: number) => {
    const c = s.clock.get(node) as { rate: number; offset: number };
    return (l - c.offset) / c.rate;
  };
  const apiUp = (node: string, t: number) =>
    !inside(s.globalOutages, t) && !inside(s.cutFromApi.get(node) ?? [], t);
  const running = (node: string, t: number) => !inside(s.restarts.get(node) ?? [], t);
  // A pod-network message: delivered after a delay, or lost. The safety schedules are harsh
  // (10 % lost, 5 % delayed 1–5 s); the liveness ones model a healthy pod network.
  const harsh = kind === 'any' || kind === 'restart-after-clearance';
  const send = (from: string, to: string, t: number, deliver: (at: number) => void) => {
    const lost = rand() < (harsh ? 0.1 : 0.01);
    if (inside(s.isolated.get(from) ?? [], t) || inside(s.isolated.get(to) ?? [], t) || lost) return;
    const x = rand();
    const delay = harsh
      ? x < 0.8
        ? rand() * 50
        : x < 0.95
          ? 50 + rand() * 950
          : 1_000 + rand() * 4_000
      : x < 0.95
        ? rand() * 50
        : 50 + rand() * 250;
    events.add(t + delay, () => {
      if (!inside(s.isolated.get(to) ?? [], t + delay)) deliver(t + delay);
    });
  };

  // The Lease on the API server.
  const lease = { holder: 'A', rv: 1, marked: false, commitAt: 0 };
  const out: Outcome = {
    holderStoppedAt: undefined,
    replacementOpenedAt: undefined,
    markedAt: undefined,
    servedOnPromises: false,
    waitedForPromise: false,
  };

  // Witnesses: w_i's manager on node w_i; the holder A on w0, the manager that marks and
  // the replacement B on w2.
  const witness = new Map<string, WitnessState>();
  // Managers that have run for a while; a restart (below) starts one afresh.
  for (const w of s.witnesses) witness.set(w, startWitness(local(w, -SETTINGS.maxHoldMs)));
  for (const w of s.witnesses) {
    for (const down of s.restarts.get(w) ?? []) {
      events.add(down.to, () => witness.set(w, startWitness(local(w, down.to))));
    }
    const read = (t: number) => {
      if (t > horizon) return;
      if (running(w, t) && apiUp(w, t)) {
        const view = { holder: lease.holder, delinquent: lease.marked && lease.holder === 'A' };
        apiAnswered(witness.get(w) as WitnessState, local(w, t), new Map([[LEASE, view]]));
      }
      events.add(t + WITNESS_READ_EVERY, () => read(t + WITNESS_READ_EVERY));
    };
    const first = rand() * WITNESS_READ_EVERY;
    events.add(first, () => read(first));
  }

  // The holder A on w0.
  const holderSet = rules.holderSet(s.witnesses);
  const a = { proofLocal: local('w0', 0), promises: [] as HeldPromise[], fencing: false };
  const deadline = () =>
    servingDeadlineMs({
      apiProofSentAtMs: a.proofLocal,
      renewDeadlineMs: T,
      promises: a.promises,
      witnesses: holderSet,
    });
  const fence = (t: number) => {
    if (a.fencing) return;
    a.fencing = true;
    out.holderStoppedAt = t + rand() * FENCE_TIMEOUT;
  };
  let checkAt = Number.NaN;
  const checkDeadline = (t: number) => {
    if (a.fencing) return;
    const end = deadline();
    if (local('w0', t) >= end - 1e-6) return fence(t);
    if (local('w0', t) >= a.proofLocal + T) out.servedOnPromises = true;
    if (end === checkAt) return;
    checkAt = end;
    const at = Math.max(t, realOf('w0', end));
    events.add(at, () => {
      if (checkAt === end) checkDeadline(at);
    });
  };
  const renew = (t: number) => {
    if (a.fencing || t > horizon) return;
    // A renewal lost on its own (not an outage) only in the mixed schedules.
    const ok = apiUp('w0', t) && (kind !== 'any' || rand() > 0.05);
    if (ok) {
      const commitAt = t + rand() * 100;
      events.add(commitAt, () => {
        if (lease.holder !== 'A' || lease.marked) {
          const lostAt = commitAt + rand() * 100;
          events.add(lostAt, () => fence(lostAt));
          return;
        }
        lease.rv += 1;
        lease.commitAt = commitAt;
        const answeredAt = commitAt + rand() * 100;
        events.add(answeredAt, () => {
          a.proofLocal = Math.max(a.proofLocal, local('w0', t));
          checkDeadline(answeredAt);
        });
      });
    }
    // The agent's retry period after a failure, R after a success.
    const next = realOf('w0', local('w0', t) + (ok ? R : 500));
    events.add(next, () => renew(next));
  };
  const askForPromises = (t: number) => {
    if (a.fencing || t > horizon) return;
    const sentLocal = local('w0', t);
    if (sentLocal - a.proofLocal >= R) {
      for (const w of s.witnesses) {
        send('w0', w, t, (at) => {
          if (!running(w, at)) return;
          const decided = rules.promise(
            witness.get(w) as WitnessState,
            { lease: LEASE, holder: 'A', validForMs: P, marginMs: D - T },
            local(w, at),
            SETTINGS,
          );
          applyWitnessChange(witness.get(w) as WitnessState, decided.change);
          const { answer } = decided;
          if (answer.kind !== 'promised') return;
          send(w, 'w0', at, (back) => {
            a.promises.push(rules.held(w, sentLocal, local('w0', back), answer.validForMs));
            checkDeadline(back);
          });
        });
      }
    }
    const next = realOf('w0', sentLocal + 500);
    events.add(next, () => askForPromises(next));
  };
  events.add(0, () => checkDeadline(0));
  events.add(R, () => renew(R));
  events.add(500, () => askForPromises(500));

  // The manager on w2: observes commits through its watch (or when it can reach the API
  // again: "watch healthy since"), marks by CAS D after its observation.
  const actor = { observedLocal: local('w2', 0), rvSeen: 1, wasUp: true };
  const judge = (t: number) => {
    if (t > horizon || lease.marked) return;
    const up = apiUp('w2', t) && running('w2', t);
    if (up && (!actor.wasUp || lease.rv !== actor.rvSeen)) {
      actor.observedLocal = local('w2', t);
      actor.rvSeen = lease.rv;
    }
    actor.wasUp = up;
    if (up && local('w2', t) - actor.observedLocal > D && lease.rv === actor.rvSeen) {
      lease.marked = true;
      lease.rv += 1;
      out.markedAt = t;
      const acquireAt = t + 500 + rand() * 2_500;
      events.add(acquireAt, () => acquire(acquireAt));
      return;
    }
    events.add(t + 100, () => judge(t + 100));
  };
  events.add(100, () => judge(100));

  // The replacement B on w2.
  const cleared = new Set<string>();
  const acquire = (t: number) => {
    if (t > horizon) return;
    if (!apiUp('w2', t)) return void events.add(t + 500, () => acquire(t + 500));
    lease.holder = 'B';
    lease.marked = false;
    lease.rv += 1;
    const ask = (at: number) => {
      if (out.replacementOpenedAt !== undefined || at > horizon) return;
      for (const w of s.witnesses) {
        send('w2', w, at, (arrived) => {
          if (!running(w, arrived)) return;
          const decided = rules.clearance(
            witness.get(w) as WitnessState,
            { lease: LEASE, previousHolder: 'A' },
            local(w, arrived),
            SETTINGS,
          );
          applyWitnessChange(witness.get(w) as WitnessState, decided.change);
          if (decided.answer.kind === 'wait' && decided.answer.reason === 'promised')
            out.waitedForPromise = true;
          if (decided.answer.kind !== 'cleared') return;
          send(w, 'w2', arrived, (back) => {
            cleared.add(w);
            if (out.replacementOpenedAt === undefined && clearanceQuorum(cleared, s.witnesses))
              out.replacementOpenedAt = back;
          });
        });
      }
      const next = realOf('w2', local('w2', at) + 300);
      events.add(next, () => ask(next));
    };
    ask(t + rand() * 100);
  };

  for (let e = events.next(); e !== undefined && e.at <= horizon; e = events.next()) e.run();
  return out;
}

/** The invariant: B serves only after A's fence ended. */
function twoServers(o: Outcome): boolean {
  if (o.replacementOpenedAt === undefined) return false;
  return o.holderStoppedAt === undefined || o.holderStoppedAt > o.replacementOpenedAt;
}

const SEEDS = 600;
/** Each broken variant is run until its first violation, over at most this many schedules. */
const VARIANT_SEEDS = 3_000;

describe('witness promises: randomized schedules', () => {
  it(`never two servers: outages, cut-off nodes, partitions, restarts, delays, clock rates (${SEEDS} schedules)`, (t) => {
    const seen = { failovers: 0, servedOnPromises: 0, waitedForPromise: 0, holderFenced: 0 };
    for (let seed = 1; seed <= SEEDS; seed++) {
      const o = simulate(seed, 'any');
      assert.equal(twoServers(o), false, `seed ${seed}: ${JSON.stringify(o)}`);
      if (o.replacementOpenedAt !== undefined) seen.failovers++;
      if (o.servedOnPromises) seen.servedOnPromises++;
      if (o.waitedForPromise) seen.waitedForPromise++;
      if (o.holderStoppedAt !== undefined) seen.holderFenced++;
    }
    t.diagnostic(JSON.stringify(seen));
    // The schedules reach every path: failovers, serving on promises, a clearance that waited.
    assert.ok(seen.failovers > 150, JSON.stringify(seen));
    assert.ok(seen.servedOnPromises > 200, JSON.stringify(seen));
    assert.ok(seen.waitedForPromise > 20, JSON.stringify(seen));
  });

  it('a witness restarting after it cleared, cut off from the API: it promises nothing (300 schedules)', () => {
    let failovers = 0;
    for (let seed = 1; seed <= 300; seed++) {
      const o = simulate(seed, 'restart-after-clearance');
      assert.equal(twoServers(o), false, `seed ${seed}: ${JSON.stringify(o)}`);
      if (o.replacementOpenedAt !== undefined) failovers++;
    }
    assert.ok(failovers > 250, `${failovers} failovers`);
  });

  it('an outage for everyone (up to 5 min): the holder serves throughout, nothing moves', () => {
    let outages = 0;
    for (let seed = 1; seed <= 100; seed++) {
      const o = simulate(seed, 'outage-only');
      assert.equal(o.holderStoppedAt, undefined, `seed ${seed}: the holder fenced`);
      assert.equal(o.markedAt, undefined, `seed ${seed}: a failover`);
      if (o.servedOnPromises) outages++;
    }
    assert.ok(outages > 75, `${outages} of 100 schedules served on promises`);
  });

  it('one node cut off from the API: its holder fences on time and the replacement is not slower for the witnesses', () => {
    const extra: number[] = [];
    for (let seed = 1; seed <= 500; seed++) {
      const o = simulate(seed, 'holder-cut');
      assert.equal(
        o.servedOnPromises,
        false,
        `seed ${seed}: served on promises although its peers reach the API`,
      );
      assert.ok(
        o.holderStoppedAt !== undefined && o.holderStoppedAt < 10_000 + T + FENCE_TIMEOUT + 100,
        `seed ${seed}`,
      );
      assert.ok(o.markedAt !== undefined && o.replacementOpenedAt !== undefined, `seed ${seed}: no failover`);
      extra.push(o.replacementOpenedAt - o.markedAt);
    }
    extra.sort((x, y) => x - y);
    // Acquisition 0.5–3 s after the mark, then clearances at once: no promise to wait for.
    assert.ok((extra[Math.floor(extra.length * 0.95)] as number) < 5_000, `p95 ${extra[475]} ms`);
  });

  it('the checker catches broken rules', () => {
    const broken: Array<[string, Partial<Rules>]> = [
      [
        'a clearance that ignores promises',
        {
          clearance: (st, r, now, set) => decideClearance({ ...st, promisedUntilMs: new Map() }, r, now, set),
        },
      ],
      [
        'no wait after a restart',
        {
          clearance: (st, r, now, set) =>
            decideClearance({ ...st, startedAtMs: Number.NEGATIVE_INFINITY }, r, now, set),
        },
      ],
      [
        'a promise counted from its answer',
        { held: (witness, _sent, answered, validForMs) => ({ witness, sentAtMs: answered, validForMs }) },
      ],
      ['one promise short of a quorum', { holderSet: (w) => w.slice(0, Math.max(1, w.length - 2)) }],
      [
        'a promise without a fresh view after a restart',
        {
          promise: (st, r, now, set) =>
            decidePromise(
              { ...st, views: new Map([[LEASE, { holder: r.holder, delinquent: false }]]) },
              r,
              now,
              set,
            ),
        },
      ],
    ];
    for (const [what, change] of broken) {
      const rules = { ...RULES, ...change };
      let violations = 0;
      for (let seed = 1; seed <= VARIANT_SEEDS && violations === 0; seed++) {
        const kind = seed % 2 === 0 ? 'restart-after-clearance' : 'any';
        if (twoServers(simulate(seed, kind, rules))) violations++;
      }
      assert.ok(violations > 0, `${what}: no violation found in ${VARIANT_SEEDS} schedules`);
    }
  });
});
