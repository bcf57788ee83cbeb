/**
 * The NFS entrypoint's lease gate: the pure decisions (start only on the agent's own
 * `lease held`, wait otherwise, give up at the timeout; the watch's 2 s rule), the loops
 * with an injected clock and answers, the watch against a hung agent (its stop decided on
 * elapsed time, not on an answer), and askAgent against the agent's real endpoints
 * (lib/http-endpoints.ts + agent/agent-health.ts), so the body the gate insists on is the
 * one the agent sends, and a fenced or stopped agent's answer never opens it.
 */
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { AgentHealth, type Phase } from '../../agent/agent-health.ts';
import { AgentMetrics } from '../../agent/agent-metrics.ts';
import { ManualClock, systemClock } from '../../lib/clock.ts';
import { serveEndpoints } from '../../lib/http-endpoints.ts';
import type { Logger } from '../../lib/logger.ts';
import { readNfsServerConfig } from '../../server/nfs-ganesha/config.ts';
import {
  type AgentAnswer,
  decideGate,
  decideWatch,
  LEASE_HELD_BODY,
  lapseKillAfterMs,
  leaseHeld,
  watchCadence,
} from '../../server/nfs-ganesha/lease-gate.ts';
import { askAgent, waitForLease, watchLease } from '../../server/nfs-ganesha/lease-gate-loops.ts';

const held: AgentAnswer = { kind: 'answered', status: 200, body: `${LEASE_HELD_BODY}\n` };
const notHeld: AgentAnswer = { kind: 'answered', status: 503, body: 'not ok: lease not held (acquiring)\n' };
const refused: AgentAnswer = { kind: 'unreachable', detail: 'ECONNREFUSED' };
const gate = { port: 8081, timeoutMs: 10_000, sinceMs: 1_000 };

function quietLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const log = {
    lines,
    fatal: (a: unknown, b?: string) => lines.push(b ?? String(a)),
    error: (a: unknown, b?: string) => lines.push(b ?? String(a)),
    warn: (a: unknown, b?: string) => lines.push(b ?? String(a)),
    info: (a: unknown, b?: string) => lines.push(b ?? String(a)),
    debug: () => {},
    trace: () => {},
    child: () => log,
  };
  return log as unknown as Logger & { lines: string[] };
}

describe('decideGate', () => {
  it("starts on the agent's 200 `ok: lease held`", () => {
    assert.deepEqual(decideGate(held, { ...gate, nowMs: 1_200 }), { kind: 'start' });
  });

  it('waits while the agent says the lease is not held (503)', () => {
    const d = decideGate(notHeld, { ...gate, nowMs: 1_200 });
    assert.equal(d.kind, 'wait');
    assert.equal(d.kind === 'wait' && d.reason, 'lease-not-held');
  });

  it('waits while the agent is unreachable (not started yet, restarting, hung)', () => {
    const d = decideGate(refused, { ...gate, nowMs: 1_200 });
    assert.equal(d.kind === 'wait' && d.reason, 'agent-unreachable');
  });

  it('refuses to start on anything but 200 with the agent body: other 2xx/3xx, a 200 from something else', () => {
    for (const answer of [
      { kind: 'answered', status: 204, body: '' },
      { kind: 'answered', status: 301, body: 'moved' },
      { kind: 'answered', status: 404, body: 'not found: try /healthz, /readyz or /metrics\n' },
      { kind: 'answered', status: 500, body: LEASE_HELD_BODY },
      { kind: 'answered', status: 200, body: 'ok' },
      { kind: 'answered', status: 200, body: 'ok: lease held, maybe' },
      { kind: 'answered', status: 200, body: '' },
    ] as AgentAnswer[]) {
      const d = decideGate(answer, { ...gate, nowMs: 1_200 });
      assert.equal(d.kind, 'wait', JSON.stringify(answer));
      assert.equal(d.kind === 'wait' && d.reason, 'unexpected-answer', JSON.stringify(answer));
      assert.equal(leaseHeld(answer), false);
    }
  });

  it('gives up at the timeout, naming the setting, the port and the last answer', () => {
    assert.equal(decideGate(notHeld, { ...gate, nowMs: 10_999 }).kind, 'wait');
    const d = decideGate(notHeld, { ...gate, nowMs: 11_000 });
    assert.equal(d.kind, 'give-up');
    assert.match(
      d.kind === 'give-up' ? d.message : '',
      /127\.0\.0\.1:8081 \(LEASEHOLD_NFS_LEASE_GATE_PORT\).*LEASEHOLD_NFS_LEASE_GATE_TIMEOUT=10000ms; ganesha was not started \(last answer: lease-not-held: 503 "not ok: lease not held \(acquiring\)"\)/,
    );
    assert.equal(decideGate(refused, { ...gate, nowMs: 60_000 }).kind, 'give-up');
    // A held lease still starts after the timeout: the decision is on this answer.
    assert.equal(decideGate(held, { ...gate, nowMs: 60_000 }).kind, 'start');
  });
});

describe('decideWatch', () => {
  const w = { port: 8081, lastHeldMs: 5_000 };
  it('held resets; missing is tolerated for less than 2 s, then stop', () => {
    assert.deepEqual(decideWatch(held, { ...w, nowMs: 9_000 }), { kind: 'held' });
    assert.equal(decideWatch(notHeld, { ...w, nowMs: 6_999 }).kind, 'tolerate');
    assert.equal(decideWatch(refused, { ...w, nowMs: 6_999 }).kind, 'tolerate');
    const stop = decideWatch(refused, { ...w, nowMs: 7_000 });
    assert.equal(stop.kind, 'stop');
    assert.match(
      stop.kind === 'stop' ? stop.message : '',
      /for 2000ms \(tolerance 2000ms\): stopping ganesha/,
    );
    assert.equal(
      decideWatch({ kind: 'answered', status: 200, body: 'ok' }, { ...w, nowMs: 7_500 }).kind,
      'stop',
    );
  });
});

describe('waitForLease and watchLease (injected answers and clock)', () => {
  it('polls until held, logging each change of reason once', async () => {
    const clock = new ManualClock(0);
    const answers = [refused, refused, notHeld, notHeld, held];
    const log = quietLog();
    const out = await waitForLease({
      port: 8081,
      clock,
      log,
      stop: new AbortController().signal,
      timeoutMs: 10_000,
      pollMs: 1,
      ask: async () => {
        clock.advance(50);
        return answers.shift() ?? held;
      },
    });
    assert.equal(out.kind, 'held');
    assert.equal(out.kind === 'held' && out.askedAtMs, 200, 'the send time of the passing request');
    assert.equal(log.lines.filter((l) => l === 'lease not held yet: ganesha waits').length, 2);
  });

  it('gives up at the timeout and never reports held', async () => {
    const clock = new ManualClock(0);
    const out = await waitForLease({
      port: 8081,
      clock,
      log: quietLog(),
      stop: new AbortController().signal,
      timeoutMs: 1_000,
      pollMs: 1,
      ask: async () => {
        clock.advance(300);
        return { kind: 'answered', status: 200, body: 'ok' };
      },
    });
    assert.equal(out.kind, 'gave-up');
  });

  it('ends at once with stopped when a stop is requested', async () => {
    const stop = new AbortController();
    const out = waitForLease({
      port: 8081,
      clock: new ManualClock(0),
      log: quietLog(),
      stop: stop.signal,
      timeoutMs: 10_000,
      pollMs: 60_000,
      ask: async () => notHeld,
    });
    setTimeout(() => stop.abort(), 10);
    assert.deepEqual(await out, { kind: 'stopped' });
  });

  it('the watch stops once the proof has been missing for the tolerance', async () => {
    const clock = new ManualClock(0);
    const answers = [held, held, notHeld, held, refused, refused, refused, refused, refused];
    const message = await watchLease({
      port: 8081,
      clock,
      log: quietLog(),
      stop: new AbortController().signal,
      lastHeldMs: 0,
      pollMs: 1,
      ask: async () => {
        clock.advance(500);
        return answers.shift() ?? refused;
      },
    });
    // Last held request sent at 1500 ms (the 4th); stopped at the first answer >= 3500 ms.
    assert.match(message ?? '', /has not reported the lease held for 2000ms/);
  });

  it("the watch keeps to the share's tolerance (D - T from the manager), and its cadence shrinks with it", async () => {
    const clock = new ManualClock(0);
    const message = await watchLease({
      port: 8081,
      clock,
      log: quietLog(),
      stop: new AbortController().signal,
      lastHeldMs: 0,
      pollMs: 1,
      toleranceMs: 700,
      ask: async () => {
        clock.advance(100);
        return refused;
      },
    });
    // Stopped at the first answer >= 700 ms after the gate's proof: not the 2 s default.
    assert.match(message ?? '', /for 700ms \(tolerance 700ms\)/);
    assert.deepEqual(watchCadence(2_000), { pollMs: 500, requestTimeoutMs: 1_000 }, 'the defaults');
    assert.deepEqual(watchCadence(10_000), { pollMs: 500, requestTimeoutMs: 1_000 }, 'never slower');
    assert.deepEqual(watchCadence(700), { pollMs: 175, requestTimeoutMs: 350 });
  });
});

describe('the watch against a hung agent: the stop decided on elapsed time', () => {
  /** `p`, or 'still waiting' after `ms` (so a watch that never decides fails, not hangs). */
  const within = <T>(p: Promise<T>, ms: number) =>
    Promise.race([p, new Promise<'still waiting'>((r) => setTimeout(() => r('still waiting'), ms).unref())]);

  it('a request that never returns: stopped at the deadline, not after an answer', async () => {
    const t0 = systemClock.now();
    const out = await within(
      watchLease({
        port: 8081,
        clock: systemClock,
        log: quietLog(),
        stop: new AbortController().signal,
        lastHeldMs: t0,
        toleranceMs: 300,
        ask: () => new Promise<AgentAnswer>(() => {}),
      }),
      5_000,
    );
    assert.notEqual(out, 'still waiting', 'the watch decided without an answer');
    assert.match(
      String(out),
      /has not reported the lease held for \d+ms \(tolerance 300ms\).*no answer before the deadline/,
    );
  });

  it("an agent whose HTTP port accepts and never answers (askAgent's own timeout is not waited for)", async () => {
    const sockets: Socket[] = [];
    const hung = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => hung.listen(0, '127.0.0.1', resolve));
    try {
      const t0 = systemClock.now();
      const out = await within(
        watchLease({
          port: (hung.address() as { port: number }).port,
          clock: systemClock,
          log: quietLog(),
          stop: new AbortController().signal,
          lastHeldMs: t0,
          toleranceMs: 400,
        }),
        5_000,
      );
      assert.notEqual(out, 'still waiting');
      assert.match(String(out), /\(tolerance 400ms\)/);
    } finally {
      for (const s of sockets) s.destroy();
      hung.close();
    }
  });

  it("SIGKILL after the lapse comes within the agent's fence grace for that margin, not the 10 s planned stop", () => {
    assert.equal(lapseKillAfterMs(2_000), 750, 'the defaults: D - T = 2 s');
    assert.ok(lapseKillAfterMs(700) < 700);
    assert.ok(lapseKillAfterMs(1) >= 1);
  });
});

describe("askAgent against the agent's own endpoints", () => {
  async function agentAt(phase: Phase, renewedAgoMs = 0) {
    const metrics = new AgentMetrics(systemClock);
    const health = new AgentHealth(metrics, 4_000);
    metrics.renewed(systemClock.now() - renewedAgoMs, 0, false);
    if (phase !== 'starting') health.enter(phase, phase === 'cannot-fence' ? 'no CAP_KILL' : undefined);
    const endpoints = await serveEndpoints({
      host: '127.0.0.1',
      port: 0,
      registry: metrics.registry,
      healthz: health.healthz,
      readyz: health.readyz,
    });
    return endpoints;
  }

  it('opens only for `holding` with a renewal within T; every other phase and a closed port keep it shut', async () => {
    const cases: [Phase, number, boolean][] = [
      ['holding', 0, true],
      ['holding', 4_500, false],
      ['starting', 0, false],
      ['cannot-fence', 0, false],
      ['acquiring', 0, false],
      ['releasing', 0, false],
      ['fenced', 0, false],
      ['stopped', 0, false],
    ];
    for (const [phase, ago, opens] of cases) {
      const endpoints = await agentAt(phase, ago);
      try {
        const answer = await askAgent(endpoints.port);
        assert.equal(answer.kind, 'answered', phase);
        assert.equal(leaseHeld(answer), opens, `${phase} renewed ${ago} ms ago: ${JSON.stringify(answer)}`);
        assert.equal(
          decideGate(answer, { ...gate, nowMs: 1_000 }).kind,
          opens ? 'start' : 'wait',
          `${phase} renewed ${ago} ms ago`,
        );
      } finally {
        await endpoints.close();
      }
    }
    const gone = await agentAt('holding');
    const port = gone.port;
    await gone.close();
    const answer = await askAgent(port);
    assert.equal(answer.kind, 'unreachable');
    assert.equal(decideGate(answer, { ...gate, nowMs: 1_000 }).kind, 'wait');
  });
});

describe('settings', () => {
  it('the gate is off unless LEASEHOLD_NFS_LEASE_GATE_PORT is set; timeout default 10 min; bad values name the variable', () => {
    const base = readNfsServerConfig({});
    assert.equal(base.leaseGatePort, undefined);
    assert.equal(base.leaseGateTimeoutMs, 600_000);
    const on = readNfsServerConfig({
      LEASEHOLD_NFS_LEASE_GATE_PORT: '8081',
      LEASEHOLD_NFS_LEASE_GATE_TIMEOUT: '30s',
    });
    assert.equal(on.leaseGatePort, 8081);
    assert.equal(on.leaseGateTimeoutMs, 30_000);
    assert.equal(base.leaseProofToleranceMs, 2_000, 'D - T of the default timings');
    assert.equal(
      readNfsServerConfig({ LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE: '1500ms' }).leaseProofToleranceMs,
      1_500,
    );
    assert.throws(
      () => readNfsServerConfig({ LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE: '50ms' }),
      /LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE="50ms": must be from 100ms to 600s/,
    );
    assert.throws(
      () =>
        readNfsServerConfig({ LEASEHOLD_NFS_LEASE_GATE_PORT: '0', LEASEHOLD_NFS_LEASE_GATE_TIMEOUT: '10ms' }),
      (err: Error) =>
        /LEASEHOLD_NFS_LEASE_GATE_PORT="0": must be a whole number from 1 to 65535/.test(err.message) &&
        /LEASEHOLD_NFS_LEASE_GATE_TIMEOUT="10ms"/.test(err.message),
    );
  });
});
