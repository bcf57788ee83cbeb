/**
 * The storm guard against the real API server. Nodes stay Ready and their heartbeat
 * Leases keep renewing throughout (a node that just crashed looks like this for its
 * whole heartbeat grace):
 *  - all six share managers of ONE node stop at once: that is the node's failure, not a
 *    storm; every one fails over, no pause;
 *  - nine share managers spread over THREE such nodes stop at once: past the threshold
 *    the manager suspects itself or the control plane; it pauses the remaining failovers
 *    and says so (event, metric, log).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import {
  applyCrd,
  createNamespace,
  createNode,
  createShareManager,
  eventsFor,
  getShareManager,
  HolderLoop,
  readLease,
  runPodOn,
  startManager,
  stopAllManagers,
  waitForPods,
} from './manager-harness.ts';

// NB: the nodes must look healthy throughout; with the dev cluster's 8 s node-monitor
// grace a heartbeat loop starved on a loaded 2-core machine let one go Unknown (full
// suite). 40 s is the Kubernetes default, and what a just-crashed node really has.
const cluster = useCluster({ scheduler: false, nodeMonitorGracePeriod: '40s' });
const LEASE = { duration: '3s', renewInterval: '1s', renewDeadline: '2s', retryPeriod: '200ms' };
const loops: HolderLoop[] = [];

const NODES = ['node-s', 'node-t', 'node-u'];

/** Share managers `names` running on `nodeOf(i)`, each lease held by a HolderLoop; waits until all Running. */
async function runShares(
  kc: k8s.KubeConfig,
  namespace: string,
  names: string[],
  nodeOf: (i: number) => string,
): Promise<HolderLoop[]> {
  const holders = await Promise.all(
    names.map(async (name, i) => {
      await createShareManager(kc, { namespace, name, lease: LEASE });
      const [pod] = await waitForPods(kc, namespace, name, 1);
      assert.ok(pod);
      await runPodOn(kc, pod, nodeOf(i));
      const h = new HolderLoop(kc, namespace, name, pod.metadata?.name ?? '', nodeOf(i), 1000).start();
      loops.push(h);
      return h;
    }),
  );
  await eventually(
    'all Running',
    async () => {
      const states = await Promise.all(
        names.map(async (n) => (await getShareManager(kc, namespace, n)).status?.state),
      );
      return states.every((s) => s === 'Running') ? true : undefined;
    },
    30_000,
  );
  for (const node of new Set(names.map((_, i) => nodeOf(i)))) {
    const n = await kc.makeApiClient(k8s.CoreV1Api).readNode({ name: node });
    assert.equal(
      n.status?.conditions?.find((c) => c.type === 'Ready')?.status,
      'True',
      `${node} looks healthy`,
    );
  }
  return holders;
}

async function delinquent(kc: k8s.KubeConfig, namespace: string, names: string[]): Promise<string[]> {
  const marked = [];
  for (const name of names) if ((await readLease(kc, namespace, name)).delinquentSince) marked.push(name);
  return marked;
}

describe('storm guard', () => {
  before(async () => {
    await applyCrd(cluster());
    for (const node of NODES) {
      await createNode(cluster().kubeConfig, node);
      // The node's heartbeat, as a kubelet would renew it: the node looks healthy throughout.
      loops.push(
        new HolderLoop(cluster().kubeConfig, 'kube-node-lease', node, node, node, 2000, 0, 40).start(),
      );
    }
  });
  after(async () => {
    await Promise.all(loops.splice(0).map((h) => h.stop()));
    await stopAllManagers();
  });

  it('six leases stale at once on ONE healthy-looking node: a node loss, all fail over, no pause', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'one-node');
    const manager = startManager(cluster(), 'o1', {
      LEASEHOLD_WATCH_NAMESPACE: 'one-node',
      LEASEHOLD_STORM_THRESHOLD: '0.2',
      LEASEHOLD_STORM_MIN_LEASES: '3',
      LEASEHOLD_STORM_WINDOW: '60s',
    });
    try {
      const names = Array.from({ length: 7 }, (_, i) => `one-${i}`);
      // Six on node-s (the node that "crashes"), one on node-t that keeps renewing.
      const holders = await runShares(kc, 'one-node', names, (i) => (i < 6 ? 'node-s' : 'node-t'));
      const stoppedAt = Date.now();
      await Promise.all(holders.slice(0, 6).map((h) => h.stop()));
      const marked = await eventually(
        'all six marked delinquent',
        async () => {
          const m = await delinquent(kc, 'one-node', names);
          return m.length >= 6 ? m : undefined;
        },
        20_000,
      );
      const allMarkedMs = Date.now() - stoppedAt;
      await sleep(3000);
      assert.deepEqual(
        await delinquent(kc, 'one-node', names),
        names.slice(0, 6),
        'the node-t share kept its lease',
      );
      assert.ok(marked.length === 6);
      const stormLines = (await manager.lines()).filter((l) => String(l.msg).startsWith('storm guard'));
      assert.deepEqual(stormLines, [], 'no storm pause');
      const stormEvents = (await Promise.all(names.map((n) => eventsFor(kc, 'one-node', n))))
        .flat()
        .filter((e) => e.reason === 'StormGuardActive');
      assert.equal(stormEvents.length, 0);
      const port = (await manager.lines()).find((l) => l.msg === 'manager started')?.port;
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(metrics, /^leasehold_manager_storm_guard_active 0$/m);
      // D = 3 s after the last renewal (<= 1 s before the stop), plus the confirming read.
      assert.ok(allMarkedMs < 3000 + 4000, `all six marked ${allMarkedMs} ms after the stop`);
    } finally {
      await manager.kill();
    }
  });

  it('nine leases stale at once on three healthy-looking nodes: a few fail over, the rest are paused', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'storm');
    const manager = startManager(cluster(), 's1', {
      LEASEHOLD_WATCH_NAMESPACE: 'storm',
      LEASEHOLD_STORM_THRESHOLD: '0.2',
      LEASEHOLD_STORM_MIN_LEASES: '3',
      LEASEHOLD_STORM_WINDOW: '60s',
    });
    try {
      const names = Array.from({ length: 9 }, (_, i) => `vol-${i}`);
      const holders = await runShares(kc, 'storm', names, (i) => NODES[i % 3] as string);

      await Promise.all(holders.map((h) => h.stop()));
      await eventually(
        'the storm guard active',
        async () =>
          (await manager.lines()).some((l) => String(l.msg).startsWith('storm guard')) ? true : undefined,
        15_000,
      );
      await sleep(3000); // every verdict is in by now
      const marked = await delinquent(kc, 'storm', names);
      // The guard counts the suspects not on the node explaining the most (3 per node here):
      // it trips at the first verdict leaving 3 unexplained, which is the 5th or 6th.
      assert.ok(
        marked.length === 4 || marked.length === 5,
        `failed over before the guard: ${marked.join(', ')} (expected 4 or 5 of 9)`,
      );
      const stormEvents = (await Promise.all(names.map((n) => eventsFor(kc, 'storm', n))))
        .flat()
        .filter((e) => e.reason === 'StormGuardActive');
      assert.equal(stormEvents.length, 1, 'announced once');
      const port = (await manager.lines()).find((l) => l.msg === 'manager started')?.port;
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(metrics, /^leasehold_manager_storm_guard_active 1$/m);
      assert.match(metrics, /^leasehold_manager_stale_detected_total 9$/m);
    } finally {
      await manager.kill();
    }
  });
});
