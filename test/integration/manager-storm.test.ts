/**
 * The storm guard against the real API server: ten share managers on one node whose
 * Node stays Ready and whose heartbeat Lease keeps renewing; all ten leases stop at
 * once. Past the threshold the manager suspects itself or the control plane: it pauses
 * the remaining failovers and says so (event, metric, log).
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

const cluster = useCluster({ scheduler: false });
const LEASE = { duration: '3s', renewInterval: '1s', renewDeadline: '2s', retryPeriod: '200ms' };
const loops: HolderLoop[] = [];

describe('storm guard', () => {
  before(async () => {
    await applyCrd(cluster());
    await createNode(cluster().kubeConfig, 'node-s');
    // The node's heartbeat, as a kubelet would renew it: the node looks healthy throughout.
    loops.push(
      new HolderLoop(
        cluster().kubeConfig,
        'kube-node-lease',
        'node-s',
        'node-s',
        'node-s',
        2000,
        0,
        40,
      ).start(),
    );
  });
  after(async () => {
    await Promise.all(loops.splice(0).map((h) => h.stop()));
    await stopAllManagers();
  });

  it('ten leases stale at once on a healthy node: a few fail over, the rest are paused', async () => {
    const kc = cluster().kubeConfig;
    await createNamespace(kc, 'storm');
    const manager = startManager(cluster(), 's1', {
      LEASEHOLD_WATCH_NAMESPACE: 'storm',
      LEASEHOLD_STORM_THRESHOLD: '0.2',
      LEASEHOLD_STORM_MIN_LEASES: '3',
      LEASEHOLD_STORM_WINDOW: '60s',
    });
    try {
      const names = Array.from({ length: 10 }, (_, i) => `vol-${i}`);
      const holders = await Promise.all(
        names.map(async (name) => {
          await createShareManager(kc, { namespace: 'storm', name, lease: LEASE });
          const [pod] = await waitForPods(kc, 'storm', name, 1);
          assert.ok(pod);
          await runPodOn(kc, pod, 'node-s');
          const h = new HolderLoop(kc, 'storm', name, pod.metadata?.name ?? '', 'node-s', 1000).start();
          loops.push(h);
          return h;
        }),
      );
      await eventually(
        'all Running',
        async () => {
          const states = await Promise.all(
            names.map(async (n) => (await getShareManager(kc, 'storm', n)).status?.state),
          );
          return states.every((s) => s === 'Running') ? true : undefined;
        },
        30_000,
      );
      const node = await kc.makeApiClient(k8s.CoreV1Api).readNode({ name: 'node-s' });
      assert.equal(
        node.status?.conditions?.find((c) => c.type === 'Ready')?.status,
        'True',
        'the node looks healthy',
      );

      await Promise.all(holders.map((h) => h.stop()));
      await eventually(
        'the storm guard active',
        async () =>
          (await manager.lines()).some((l) => String(l.msg).startsWith('storm guard')) ? true : undefined,
        15_000,
      );
      await sleep(3000); // every verdict is in by now
      const marked = [];
      for (const name of names) if ((await readLease(kc, 'storm', name)).delinquentSince) marked.push(name);
      assert.equal(marked.length, 2, `failed over before the guard: ${marked.join(', ')}`);
      const stormEvents = (await Promise.all(names.map((n) => eventsFor(kc, 'storm', n))))
        .flat()
        .filter((e) => e.reason === 'StormGuardActive');
      assert.equal(stormEvents.length, 1, 'announced once');
      const port = (await manager.lines()).find((l) => l.msg === 'manager started')?.port;
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(metrics, /^leasehold_manager_storm_guard_active 1$/m);
      assert.match(metrics, /^leasehold_manager_stale_detected_total 10$/m);
    } finally {
      await manager.kill();
    }
  });
});
