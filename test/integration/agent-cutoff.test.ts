/**
 * The agent cut off from the real API server through dev/net/tcp-proxy.ts: it must
 * fence at the renew deadline T (counted from its last successful renewal) ± 0.5 s,
 * never later, whether the connection is reset (close) or silently dropped (stall);
 * and an outage shorter than T must not fence. Default timings: D 6 s, R 2 s, T 4 s.
 * Hedged renewals (agent/renew-round.ts), through the harness's slowApi proxy: an API
 * path answering 1.3 s late fences the old agent (hedging off: 1 s cap) but not the
 * default one, and a connection that died silently is escaped by the hedge.
 *
 * The last successful renewal is seen from outside twice: the debug line the agent
 * prints on each success (arrives after the request was sent, so it under-estimates the
 * time to the fence by the request latency) and the moment the proxy was switched
 * (every success was sent before it).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it, type TestContext } from 'node:test';
import type { ProxyMode } from '../../dev/net/tcp-proxy.ts';
import { useCluster } from '../support/cluster.ts';
import {
  type AgentProcess,
  agentEnv,
  agentMetric,
  cleanup,
  leaseApi,
  proxiedApi,
  readLease,
  slowApi,
  spawnAgent,
} from './agent-harness.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });
after(cleanup);

const T = 4_000;
const R = 2_000;
const FENCED = 'fenced: readiness dropped, fence action done, exiting';

/** Resolves just after the agent logs its next successful renewal. */
async function nextRenewal(agent: AgentProcess, timeoutMs = 5_000): Promise<number> {
  const seen = agent.lines.filter((l) => l.msg === 'lease renewed').length;
  const until = performance.now() + timeoutMs;
  while (performance.now() < until) {
    const renewals = agent.lines.filter((l) => l.msg === 'lease renewed');
    if (renewals.length > seen) return renewals[renewals.length - 1]?.atMs as number;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error('no renewal seen');
}

async function cutOff(t: TestContext, mode: Exclude<ProxyMode, 'pass'>, lease: string): Promise<void> {
  const { proxy, kubeconfigPath } = await proxiedApi(cluster());
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-fence-'));
  after(() => rm(dir, { recursive: true, force: true }));
  const marker = join(dir, 'fenced');
  const agent = spawnAgent({
    ...agentEnv(lease, `pod-${mode}`, {
      LEASEHOLD_LOG_LEVEL: 'debug',
      LEASEHOLD_FENCE_ACTION: 'command',
      LEASEHOLD_FENCE_COMMAND: `touch ${marker}`,
    }),
    KUBECONFIG: kubeconfigPath,
  });
  await agent.waitForLog('lease acquired');
  const lastRenewalAt = await nextRenewal(agent);
  // Cut shortly after a renewal: the next one is due R after it was sent.
  await new Promise((r) => setTimeout(r, 200));
  proxy.setMode(mode);
  const cutAt = performance.now();
  const exit = await agent.exited;
  const fenced = agent.lines.find((l) => l.msg === FENCED);
  assert.equal(exit.code, 1);
  assert.ok(fenced, `no "${FENCED}" line; stderr: ${agent.stderr()}`);
  assert.equal(fenced.reason, 'deadline-passed');
  const fromRenewal = fenced.atMs - lastRenewalAt;
  const fromCut = fenced.atMs - cutAt;
  // The renewal was sent before its log line arrived: the fence may come a little before T after it.
  assert.ok(
    fromRenewal >= T - 500,
    `fenced ${Math.round(fromRenewal)} ms after the last renewal, before T - 0.5 s`,
  );
  assert.ok(
    fromRenewal <= T + 500,
    `fenced ${Math.round(fromRenewal)} ms after the last renewal, later than T + 0.5 s`,
  );
  // Every success was sent before the cut, so the fence is due less than T after it; 300 ms
  // is slack for a loaded machine's timers and pipes, not for the agent.
  assert.ok(fromCut <= T + 300, `fenced ${Math.round(fromCut)} ms after the cut: later than T`);
  const sinceLastSuccess = (fenced.detail as { sinceLastSuccessMs: number }).sinceLastSuccessMs;
  t.diagnostic(
    `${mode}: fenced ${Math.round(fromRenewal)} ms after the last renewal was logged, ${Math.round(fromCut)} ms after the cut; agent measured ${Math.round(sinceLastSuccess)} ms since the last success was sent; fence command ${String(fenced.fenceMs)} ms`,
  );
  assert.ok(sinceLastSuccess >= T && sinceLastSuccess <= T + 500, `agent measured ${sinceLastSuccess} ms`);
  assert.ok(existsSync(marker), 'the fence command ran');
  assert.equal((fenced.fence as { kind: string }).kind, 'command-finished');
  const failures = agent.lines.filter(
    (l) => l.msg === 'lease renewal failing; retrying until the renew deadline',
  );
  // A reset fails the attempt at once; a stall keeps both the first attempt and its hedge
  // hanging until T, so no attempt fails before the fence.
  if (mode === 'close') assert.equal(failures.length, 1, 'one log line for the state change');
  else assert.ok(failures.length <= 1, 'at most one log line for the state change');
}

// NB: these three at once (each its own agent, proxy and lease): ~7 s instead of ~20 s.
describe('agent cut off from the API server', { concurrency: true }, () => {
  it('fences at the renew deadline when the connection is reset (proxy close)', async (t) => {
    await cutOff(t, 'close', 'cut-close');
  });

  it('fences at the renew deadline when the connection stalls without closing (proxy stall)', async (t) => {
    await cutOff(t, 'stall', 'cut-stall');
  });

  it('does not fence on an outage shorter than the renew deadline, and renewals resume', async () => {
    const { proxy, kubeconfigPath } = await proxiedApi(cluster());
    const agent = spawnAgent({
      ...agentEnv('cut-short', 'pod-short', { LEASEHOLD_LOG_LEVEL: 'debug' }),
      KUBECONFIG: kubeconfigPath,
    });
    await agent.waitForLog('lease acquired');
    await nextRenewal(agent);
    proxy.setMode('close');
    await new Promise((r) => setTimeout(r, 2_200)); // the renewal due 2 s after the last one fails
    proxy.setMode('pass');
    await agent.waitForLog('lease renewal recovered', T);
    const resumedAt = await nextRenewal(agent, R + 1_000);
    assert.ok(resumedAt > 0);
    assert.equal(agent.child.exitCode, null, 'still running');
    assert.ok(!agent.lines.some((l) => l.msg === FENCED));
    assert.equal((await readLease(leaseApi(cluster()), 'cut-short'))?.holder, 'pod-short');
  });
});

describe('agent on a slow or half-dead API path: hedged renewals', () => {
  const DELAY = 1_300;

  /** An agent behind its own slowApi proxy; `delayMs` applies from just after it acquired. */
  async function viaSlowApi(lease: string, delayMs: number, extra: Record<string, string> = {}) {
    const { proxy, kubeconfigPath } = await slowApi(cluster());
    const agent = spawnAgent({
      ...agentEnv(lease, `pod-${lease}`, { LEASEHOLD_LOG_LEVEL: 'debug', ...extra }),
      KUBECONFIG: kubeconfigPath,
    });
    const port = (await agent.waitForLog('agent started')).httpPort as number;
    await agent.waitForLog('lease acquired');
    proxy.setResponseDelay(delayMs);
    return { proxy, agent, port, slowedAt: performance.now() };
  }

  /** Renewals logged after `sinceMs`. */
  const renewalsSince = (agent: AgentProcess, sinceMs: number) =>
    agent.lines.filter((l) => l.msg === 'lease renewed' && l.atMs > sinceMs);

  // NB: four agents at once, ~7 s in all.
  it('answers 1.3 s late: the default agent renews, the old one (hedging off, 1 s cap) fences; a silently dead connection is escaped by the hedge; a lost answer is not a loss', async (t) => {
    const [slow, old, dead, lostAnswer] = await Promise.all([
      viaSlowApi('slow-hedged', DELAY),
      viaSlowApi('slow-old', DELAY, { LEASEHOLD_HEDGE_DELAY: '0' }),
      viaSlowApi('dead-conn', 0),
      viaSlowApi('lost-answer', 0),
    ]);
    // The first write commits but its answer never comes: the hedge gets 409, and the read
    // (on a fresh connection) finds our renewTime: renewed by the FIRST write, not lost.
    const lostAnswerCase = (async () => {
      await nextRenewal(lostAnswer.agent);
      lostAnswer.proxy.holdAnswersOpen();
      const heldAt = performance.now();
      const deadline = heldAt + R + 3_000;
      while (renewalsSince(lostAnswer.agent, heldAt).length === 0 && performance.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      const [renewed] = renewalsSince(lostAnswer.agent, heldAt);
      assert.ok(
        renewed,
        `no renewal after the answers were held: ${JSON.stringify(lostAnswer.agent.lines.slice(-4))}`,
      );
      assert.equal(renewed.via, 'read', 'proven by reading back our renewTime');
      assert.equal(renewed.hedge, false, 'credited to the first write, whose answer was lost');
      const lease = await readLease(leaseApi(cluster()), 'lost-answer');
      assert.equal(lease?.holder, 'pod-lost-answer');
      return renewed;
    })();
    // The dead connection: stalled just after a renewal, so the next one starts on it.
    const deadCase = (async () => {
      await nextRenewal(dead.agent);
      const acceptedBefore = dead.proxy.connections().accepted;
      dead.proxy.stallOpen();
      const stalledAt = performance.now();
      const deadline = stalledAt + R + 3_000;
      while (renewalsSince(dead.agent, stalledAt).length === 0 && performance.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      const [renewed] = renewalsSince(dead.agent, stalledAt);
      assert.ok(renewed, `no renewal after the stall; lines: ${JSON.stringify(dead.agent.lines.slice(-4))}`);
      assert.equal(renewed.hedge, true, 'the renewal came through the hedge');
      assert.ok(dead.proxy.connections().accepted > acceptedBefore, 'the hedge opened a new connection');
      assert.equal(await agentMetric(dead.port, 'leasehold_agent_renew_hedge_wins_total'), 1);
      return renewed;
    })();

    const oldExit = await old.agent.exited;
    const fenced = old.agent.lines.find((l) => l.msg === FENCED);
    assert.equal(oldExit.code, 1);
    assert.ok(fenced, `the old agent exited without fencing: ${old.agent.stderr()}`);
    assert.equal(fenced.reason, 'deadline-passed', 'the old agent fences a healthy but slow API');

    const until = slow.slowedAt + 2 * R + 3 * DELAY;
    while (renewalsSince(slow.agent, slow.slowedAt).length < 2 && performance.now() < until)
      await new Promise((r) => setTimeout(r, 20));
    const slowRenewals = renewalsSince(slow.agent, slow.slowedAt);
    assert.equal(slow.agent.child.exitCode, null, `the default agent fenced: ${slow.agent.stderr()}`);
    assert.ok(slowRenewals.length >= 2, `${slowRenewals.length} renewals through the slow API`);
    const latencies = slowRenewals.map((l) => l.latencyMs as number);
    assert.ok(
      latencies.every((ms) => ms >= DELAY - 50),
      `latencies ${latencies.join(', ')} ms: the delay did not apply`,
    );
    const hedges = (await agentMetric(slow.port, 'leasehold_agent_renew_hedges_total')) as number;
    assert.ok(hedges >= 2, `${hedges} hedges sent: every slow round hedges after 500 ms`);
    assert.equal((await readLease(leaseApi(cluster()), 'slow-hedged'))?.holder, 'pod-slow-hedged');

    const deadRenewal = await deadCase;
    assert.equal(dead.agent.child.exitCode, null, 'still running after the dead connection');
    const lostAnswerRenewal = await lostAnswerCase;
    assert.equal(lostAnswer.agent.child.exitCode, null, 'still running after the lost answer');
    t.diagnostic(
      `slow API (${DELAY} ms): default agent renewed in ${latencies.join(', ')} ms with ${hedges} hedges; old agent fenced ${Math.round(fenced.atMs - old.slowedAt)} ms after the slowdown; dead connection: hedge renewed in ${String(deadRenewal.latencyMs)} ms; lost answer: renewed by the read ${String(lostAnswerRenewal.latencyMs)} ms after the first write was sent`,
    );
  });
});

// NB: alone: it stops the API server every other test talks to.
describe('agent and a restarting API server', () => {
  it('rides out a real kube-apiserver restart shorter than its renew deadline', async () => {
    const agent = spawnAgent({
      ...agentEnv('restart-one', 'pod-restart', {
        LEASEHOLD_LOG_LEVEL: 'debug',
        LEASEHOLD_LEASE_DURATION: '30s',
        LEASEHOLD_RENEW_DEADLINE: '20s',
      }),
      KUBECONFIG: cluster().kubeconfigPath,
    });
    await agent.waitForLog('lease acquired');
    await nextRenewal(agent);
    const stoppedAt = performance.now();
    await cluster().stopApiServer();
    await new Promise((r) => setTimeout(r, 2_500));
    await cluster().startApiServer();
    const outageMs = performance.now() - stoppedAt;
    assert.ok(
      outageMs < 20_000,
      `the restart took ${Math.round(outageMs)} ms: longer than T, test is meaningless`,
    );
    await agent.waitForLog('lease renewal recovered', 10_000);
    await nextRenewal(agent, R + 2_000);
    assert.equal(agent.child.exitCode, null, 'still running');
    assert.equal((await readLease(leaseApi(cluster()), 'restart-one'))?.holder, 'pod-restart');
  });
});
