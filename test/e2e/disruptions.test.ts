/**
 * Disruptions that must NOT cause a failover, or only a planned one, on the whole
 * system (3 simulated nodes, a manager on each, default timings D 6 s, R 2 s, T 4 s):
 *  - clock skew: agents under libfaketime 10 minutes ahead and behind keep their
 *    shares for 20 s, more than three lease durations (their renewTime is off by 10
 *    minutes; no manager compares it); the 20 s count from when they serve, and the two
 *    scenarios below run meanwhile on other shares (they fail over nothing either);
 *  - the agent sidecar crashes (SIGKILL) and restarts within D: same pod, no failover;
 *  - drain (cordon + eviction, a graceful delete): the agent releases the lease, the
 *    new pod acquires it at once: no failover, no lease-duration wait;
 *  - the API server is down for 12 s: zero failovers (no stale verdict, no delinquent
 *    mark) and every share is served again afterwards. 12 s from the stop's start (the
 *    old server refuses new requests at once; it is killed 5 s later if its watches keep
 *    it alive) exceeds T (4 s: every agent fences, its pod ends, the managers replace it),
 *    D (6 s: every lease looks stale by then, and the managers were blind) and the
 *    node-monitor grace (8 s: the node-lifecycle controller sees every heartbeat late);
 *    it was 20 s plus the 5 s stop, which added nothing to those but grew every client's
 *    reconnect backoff.
 * kube-controller-manager: --attach-detach-reconcile-sync-period=2s (why: docs/testing.md, The tiers).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { createShare, pvName, sharePods, shareStatus, waitServing } from '../../dev/system/shares.ts';
import { SHARES_NAMESPACE } from '../../dev/system/system.ts';
import { sleep } from '../../lib/clock.ts';
import { withDeadline } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { LIBFAKETIME, skewAgentsOf } from './clock-skew-policy.ts';
import {
  assertNoOverlap,
  eventsOf,
  failedOver,
  leaseOf,
  setUnschedulable,
  useSystem,
} from './e2e-support.ts';

const system = useSystem({
  nodes: 3,
  cluster: { attachDetachReconcileSyncPeriod: '2s' },
  // The agent 10 min behind must accept the API server's certificate.
  backdateCerts: { offset: '-1h', library: LIBFAKETIME },
});
const SHARES = ['skew-ahead', 'skew-behind', 'agent-r', 'drain-d'];
const SKEWED = ['skew-ahead', 'skew-behind'];
/** When the skew window began, and the pod serving each skewed share then. */
const skewWindow = { startedAt: 0, servers: new Map<string, string>() };
const SKEW_WINDOW_MS = 20_000; // more than three lease durations

test('shares start (two with skewed agents) and serve', { timeout: 150_000 }, async () => {
  const sys = system();
  // Each resolves once the API server applies it (it loads policies asynchronously).
  await skewAgentsOf(sys.cluster, 'skew-ahead', '+10m');
  await skewAgentsOf(sys.cluster, 'skew-behind', '-10m');
  for (const share of SHARES) await createShare(sys, share);
  for (const share of SHARES) await waitServing(sys, share, 120_000);
  for (const share of SKEWED) {
    const [pod] = await sharePods(sys, share);
    const env = pod?.spec?.initContainers?.[0]?.env ?? [];
    assert.ok(
      env.some((e) => e.name === 'LD_PRELOAD'),
      `${share}: the agent runs under libfaketime`,
    );
    skewWindow.servers.set(share, (await waitServing(sys, share, 5_000)).pod);
  }
  skewWindow.startedAt = performance.now();
});

function agentPid(pids: number[]): number | undefined {
  return pids.find((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('dist/agent/main.js');
    } catch {
      return false;
    }
  });
}

test('agent crash and restart within the lease duration: no failover', { timeout: 60_000 }, async () => {
  const sys = system();
  const serving = await waitServing(sys, 'agent-r', 5_000);
  const worker = sys.sim
    .node(serving.node)
    .pods()
    .find((p) => p.key === `${SHARES_NAMESPACE}/${serving.pod}`);
  const pid = agentPid(worker?.processes() ?? []);
  assert.ok(pid, 'the agent process of the serving pod');
  const transitions = (await leaseOf(sys, 'agent-r')).spec?.leaseTransitions;
  process.kill(pid, 'SIGKILL');
  const restarted = await eventually(
    'the agent sidecar restarted and renewing again',
    async () => {
      const lease = await leaseOf(sys, 'agent-r');
      const newPid = agentPid(worker?.processes() ?? []);
      const renewedAgo = Date.now() - new Date(lease.spec?.renewTime as unknown as string).getTime();
      return newPid && newPid !== pid && renewedAgo < 1_500 ? newPid : undefined;
    },
    20_000,
    200,
  );
  assert.ok(restarted);
  await sleep(8_000); // past D since the crash
  const lease = await leaseOf(sys, 'agent-r');
  assert.equal(lease.spec?.holderIdentity, serving.pod, 'the same pod holds the lease');
  assert.equal(lease.spec?.leaseTransitions, transitions, 'no change of holder');
  assert.equal(
    lease.metadata?.annotations?.['leasehold.dev/delinquent'],
    undefined,
    'never marked delinquent',
  );
  assert.equal((await waitServing(sys, 'agent-r', 5_000)).pod, serving.pod, 'the same server serves');
  assert.equal((await shareStatus(sys, 'agent-r')).lastFailover, undefined, 'no failover');
  assertNoOverlap(sys, 'agent-r');
});

test('drain (cordon + eviction): lease released, the new pod acquires at once, no failover', {
  timeout: 90_000,
}, async () => {
  const sys = system();
  const serving = await waitServing(sys, 'drain-d', 5_000);
  await setUnschedulable(sys, serving.node, true);
  try {
    const evictedAt = Date.now();
    await sys.core.createNamespacedPodEviction(
      {
        name: serving.pod,
        namespace: SHARES_NAMESPACE,
        body: {
          apiVersion: 'policy/v1',
          kind: 'Eviction',
          metadata: { name: serving.pod, namespace: SHARES_NAMESPACE },
        },
      },
      withDeadline(5_000),
    );
    const next = await waitServing(sys, 'drain-d', 60_000, serving.pod);
    const window = sys.sim.servingWindows(pvName('drain-d')).find((w) => w.id === next.pod);
    const tookS = (new Date(window?.startWall ?? Date.now()).getTime() - evictedAt) / 1000;
    process.stderr.write(`drain: eviction to serving ${tookS.toFixed(2)} s\n`);
    assert.notEqual(next.node, serving.node, 'the new pod avoids the cordoned node');
    const agentExit = sys.sim.exits.find((e) => e.pod === serving.pod && e.container === 'agent');
    assert.equal(agentExit?.code, 0, 'the old agent released the lease and exited 0');
    const lease = await leaseOf(sys, 'drain-d');
    assert.equal(lease.spec?.holderIdentity, next.pod);
    assert.equal(
      lease.metadata?.annotations?.['leasehold.dev/delinquent'],
      undefined,
      'never marked delinquent',
    );
    assert.equal((await shareStatus(sys, 'drain-d')).lastFailover, undefined, 'no failover');
    assert.ok(tookS < 15, `eviction to serving ${tookS.toFixed(2)} s < 15 s (no lease-duration wait)`);
    assertNoOverlap(sys, 'drain-d');
  } finally {
    await setUnschedulable(sys, serving.node, false);
  }
});

// NB: after the agent-crash and drain scenarios, which run during the skew window.
test('clock skew: agents 10 min ahead and behind renew without a false failover', {
  timeout: 60_000,
}, async () => {
  const sys = system();
  assert.ok(skewWindow.startedAt > 0, 'the skewed shares served (first test)');
  await sleep(Math.max(0, SKEW_WINDOW_MS - (performance.now() - skewWindow.startedAt)));
  for (const [share, offsetMin] of [
    ['skew-ahead', 10],
    ['skew-behind', -10],
  ] as const) {
    const lease = await leaseOf(sys, share);
    const skewMs = new Date(lease.spec?.renewTime as unknown as string).getTime() - Date.now();
    assert.ok(
      Math.abs(skewMs - offsetMin * 60_000) < 30_000,
      `${share}: renewTime is ${(skewMs / 60_000).toFixed(1)} min off real time (the agent's clock)`,
    );
    assert.equal(lease.spec?.holderIdentity, skewWindow.servers.get(share), `${share}: same holder`);
    assert.equal(
      (await waitServing(sys, share, 5_000)).pod,
      skewWindow.servers.get(share),
      `${share}: same pod serves`,
    );
    assert.equal((await shareStatus(sys, share)).lastFailover, undefined, `${share}: no failover`);
  }
  assert.deepEqual(await eventsOf(sys, 'LeaseExpired'), [], 'no LeaseExpired event');
});

const OUTAGE_MS = 12_000;

test('API server down for 12 s: zero failovers, every share served again', { timeout: 150_000 }, async () => {
  const sys = system();
  const before = new Map<string, string>();
  for (const share of SHARES) before.set(share, (await waitServing(sys, share, 10_000)).pod);
  const downAt = performance.now();
  await sys.cluster.stopApiServer();
  await sleep(Math.max(0, OUTAGE_MS - (performance.now() - downAt)));
  await sys.cluster.startApiServer();
  const backAt = performance.now();
  process.stderr.write(
    `API outage: the API server ready again ${((backAt - downAt) / 1000).toFixed(1)} s after its stop began\n`,
  );
  const back: string[] = [];
  for (const share of SHARES) {
    await waitServing(sys, share, 90_000);
    back.push(`${share} ${((performance.now() - backAt) / 1000).toFixed(1)} s`);
  }
  process.stderr.write(`API outage: served again after the API returned: ${back.join(', ')}\n`);
  await sleep(10_000); // past D after the managers see the API again
  const after = new Map<string, string>();
  for (const share of SHARES) after.set(share, (await waitServing(sys, share, 30_000)).pod);
  process.stderr.write(
    `API outage: ${SHARES.map((s) => `${s} ${before.get(s) === after.get(s) ? 'same pod' : `new pod ${after.get(s)}`}`).join(', ')}\n`,
  );
  // NB: the agents fence after T (4 s) without the API, as they must; their pods end. What
  // must not follow is a failover (stale verdict, delinquent mark, force delete) for them.
  assert.deepEqual([...(await failedOver(sys)).keys()], [], 'no ShareManager went through a failover');
  assert.deepEqual(await eventsOf(sys, 'LeaseExpired'), [], 'no LeaseExpired event');
  for (const share of SHARES) {
    const lease = await leaseOf(sys, share);
    assert.equal(
      lease.metadata?.annotations?.['leasehold.dev/delinquent'],
      undefined,
      `${share}: never marked delinquent`,
    );
    assertNoOverlap(sys, share);
  }
});
