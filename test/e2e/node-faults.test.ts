/**
 * Node faults on the whole system (4 simulated nodes, a manager pod on each, installed
 * by helm), default lease timings (D 6 s, R 2 s, T 4 s):
 *  - crash: the node serving a share dies with its manager; another node's manager runs
 *    the failover; the replacement serves on another node within 20 s of the crash,
 *    the Service's EndpointSlices point at it, no record written before the crash is
 *    lost and the serving windows never overlap;
 *  - partition: the node serving a share is cut from the API server; its server fences
 *    itself before the replacement starts (windows never overlap) and stays fenced
 *    after the partition heals.
 * NB: kube-controller-manager runs with --attach-detach-reconcile-sync-period=2s. With
 * the Kubernetes default (1m) the replacement waits 0-60 s for that controller's state
 * sync to notice the VolumeAttachment the manager deleted before it attaches the RWO
 * volume elsewhere (measured by bench/failover); the opt-in out-of-service taint that
 * avoids that wait is tested in out-of-service.test.ts. Every other setting is the default.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createShare, pvName, serviceEndpointPods, waitServing } from '../../dev/system/shares.ts';
import { sleep } from '../../lib/clock.ts';
import { eventually } from '../support/cluster.ts';
import {
  assertNoOverlap,
  assertRecordsKept,
  eventsOf,
  faultAndWaitForReplacement,
  useSystem,
} from './e2e-support.ts';

const system = useSystem({ nodes: 4, cluster: { attachDetachReconcileSyncPeriod: '2s' } });

test('shares start and serve', { timeout: 120_000 }, async () => {
  await createShare(system(), 'crash-a');
  await createShare(system(), 'part-b');
  await waitServing(system(), 'crash-a', 90_000);
  await waitServing(system(), 'part-b', 90_000);
  await sleep(2_000); // some records on each volume
});

test('node crash: another node serves within 20 s; endpoints follow; no data lost; no overlap', {
  timeout: 180_000,
}, async () => {
  const sys = system();
  const managersBefore = await sys.managerPods();
  const r = await faultAndWaitForReplacement(sys, 'crash-a', (node) => sys.sim.node(node).crash(), 90_000);
  assert.notEqual(r.after.node, r.before.node, 'the replacement runs on another node');
  assert.ok(r.toServingS < 20, `crash to serving ${r.toServingS.toFixed(2)} s < 20 s`);
  process.stderr.write(`node crash: crash to serving ${r.toServingS.toFixed(2)} s\n`);

  // The manager on the crashed node died with it: another manager ran the failover.
  const crashedManager = managersBefore.get(r.before.node);
  const lf = r.status.lastFailover ?? {};
  assert.equal(lf.lostNode, r.before.node);
  assert.equal(lf.lostPod, r.before.pod);
  assert.ok(lf.by, 'lastFailover.by names the manager that ran it');
  assert.notEqual(lf.by, crashedManager, 'not the manager of the crashed node');
  assert.ok([...managersBefore.values()].includes(lf.by as string), `${lf.by} is one of the manager pods`);
  const expired = (await eventsOf(sys, 'LeaseExpired')).filter((e) => e.startsWith('crash-a:'));
  assert.equal(expired.length, 1, `exactly one failover of crash-a: ${expired.join(' | ')}`);

  // What the EndpointSlice controller published (simulated pods report non-loopback IPs).
  await eventually(
    'the EndpointSlices of the Service of crash-a point at the replacement only',
    async () => {
      const pods = await serviceEndpointPods(sys, 'crash-a');
      return pods.length === 1 && pods[0] === r.after.pod ? pods : undefined;
    },
    15_000,
  ).catch(async (err: unknown) => {
    const now = await serviceEndpointPods(sys, 'crash-a').catch((e: unknown) => [String(e)]);
    throw new Error(`${String(err)}; endpoints now: ${JSON.stringify(now)}`, { cause: err });
  });
  await assertRecordsKept(r.after, r.acked);
  assertNoOverlap(sys, 'crash-a');
});

test('node partition: the old server fences before the new one starts, and stays fenced after heal', {
  timeout: 180_000,
}, async () => {
  const sys = system();
  const r = await faultAndWaitForReplacement(
    sys,
    'part-b',
    async (node) => sys.sim.node(node).partition('close'),
    90_000,
    'partitioned from the API server',
  );
  process.stderr.write(`node partition: partition to serving ${r.toServingS.toFixed(2)} s\n`);
  const node = sys.sim.node(r.before.node);
  const windows = sys.sim.servingWindows(pvName('part-b'));
  const old = windows.filter((w) => w.id === r.before.pod);
  const fresh = windows.find((w) => w.id === r.after.pod);
  assert.ok(fresh, 'the replacement has a serving window');
  assert.equal(old.length, 1, 'the old pod served once');
  const oldWindow = old[0];
  assert.ok(oldWindow?.stopMonoMs !== undefined, 'the old server stopped serving while partitioned');
  assert.match(oldWindow.reason ?? '', /signal SIGTERM/, 'stopped by the agent fence (SIGTERM), not killed');
  assert.ok(
    oldWindow.stopMonoMs < fresh.startMonoMs,
    `old server stopped ${(fresh.startMonoMs - oldWindow.stopMonoMs).toFixed(0)} ms before the new one started`,
  );

  node.heal();
  await sleep(10_000);
  const afterHeal = sys.sim.servingWindows(pvName('part-b'));
  assert.equal(afterHeal.filter((w) => w.id === r.before.pod).length, 1, 'the old pod never served again');
  const current = await waitServing(sys, 'part-b', 5_000);
  assert.equal(current.pod, r.after.pod, 'the replacement still serves after the heal');
  assert.ok(
    !node.pods().some((p) => p.key.endsWith(`/${r.before.pod}`) && p.processes().length > 0),
    'no process of the old pod runs on the healed node',
  );
  await assertRecordsKept(r.after, r.acked);
  assertNoOverlap(sys, 'part-b');
});
