/**
 * Simulated nodes on the real control plane: a node registers (Node, CSINode, node
 * Lease) and goes Ready; its kubelet runs a share-server pod in its own PID namespace
 * and reports Running/Ready; an unknown image gets a clear status; deleting a pod
 * terminates its process within the grace period; a crashed node is marked NotReady
 * by the real node-lifecycle controller and comes back on heal.
 */

import assert from 'node:assert/strict';
import { readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { readServingWindows } from '../../dev/share-server/serving-window-log.ts';
import { fakeClockEnv, SHARE_SERVER_IMAGE, type Sim, TEST_CSI_DRIVER } from '../../dev/sim/sim.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { k8s } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

// NB: one `before` starting both (a second root `before` next to useCluster() ran
// before the cluster was up).
let running: { cluster: Cluster; sim: Sim } | undefined;
let sim: Sim;
const cluster = () => (running as { cluster: Cluster }).cluster;
before(
  async () => {
    running = await startClusterAndSim({ nodes: ['sim-a', 'sim-b'] });
    sim = running.sim;
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));

const core = () => cluster().kubeConfig.makeApiClient(k8s.CoreV1Api);
const readyStatus = async (node: string) =>
  (await core().readNode({ name: node })).status?.conditions?.find((c) => c.type === 'Ready')?.status;

function sharePod(name: string, node: string, image = `${SHARE_SERVER_IMAGE}:dev`): V1Pod {
  return {
    metadata: { name, namespace: 'default' },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': node },
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: 'server',
          image,
          args: ['--dir=/data', '--port=8080'],
          ports: [{ containerPort: 8080 }],
          readinessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 1 },
          volumeMounts: [{ name: 'data', mountPath: '/data' }],
        },
      ],
      volumes: [{ name: 'data', emptyDir: {} }],
    },
  };
}

test('a simulated node registers: Node Ready, CSINode with the test driver, CSIDriver, renewed node lease', async () => {
  for (const name of ['sim-a', 'sim-b']) {
    await eventually(
      `node ${name} Ready`,
      async () => ((await readyStatus(name)) === 'True' ? true : undefined),
      20_000,
    );
    const node = await core().readNode({ name });
    assert.equal(
      node.metadata?.annotations?.['volumes.kubernetes.io/controller-managed-attach-detach'],
      'true',
    );
    assert.deepEqual(node.status?.addresses?.find((a) => a.type === 'InternalIP')?.address, '127.0.0.1');
  }
  const storage = cluster().kubeConfig.makeApiClient(k8s.StorageV1Api);
  const csiNode = await storage.readCSINode({ name: 'sim-a' });
  assert.equal(csiNode.spec.drivers[0]?.name, TEST_CSI_DRIVER);
  const driver = await storage.readCSIDriver({ name: TEST_CSI_DRIVER });
  assert.equal(driver.spec.attachRequired, true);
  const coordination = cluster().kubeConfig.makeApiClient(k8s.CoordinationV1Api);
  const first = await coordination.readNamespacedLease({ namespace: 'kube-node-lease', name: 'sim-a' });
  await eventually(
    'the node lease renewed',
    async () => {
      const now = await coordination.readNamespacedLease({ namespace: 'kube-node-lease', name: 'sim-a' });
      return new Date(now.spec?.renewTime ?? 0) > new Date(first.spec?.renewTime ?? 0) ? true : undefined;
    },
    10_000,
  );
});

test('the kubelet runs a share-server pod in its own PID namespace, reports Running/Ready, and deletion stops it', async () => {
  await core().createNamespacedPod({ namespace: 'default', body: sharePod('share-1', 'sim-a') });
  const pod = await eventually(
    'share-1 Running and Ready',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-1' });
      const ready = p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
      return p.status?.phase === 'Running' && ready ? p : undefined;
    },
    30_000,
  );
  assert.equal(pod.spec?.nodeName, 'sim-a', 'scheduled by the real scheduler onto the selected node');
  // Reported only (EndpointSlices reject loopback); the server is reached at its host port.
  assert.match(pod.status?.podIP ?? '', /^10\.244\.\d+\.\d+$/, 'a non-loopback pod IP');
  assert.deepEqual(
    pod.status?.podIPs?.map((p) => p.ip),
    [pod.status?.podIP],
  );
  assert.equal(pod.status?.containerStatuses?.[0]?.ready, true);
  assert.equal(pod.status?.containerStatuses?.[0]?.restartCount, 0);

  const worker = sim
    .node('sim-a')
    .pods()
    .find((w) => w.key === 'default/share-1');
  assert.ok(worker, 'the kubelet of sim-a runs the pod');
  const pids = worker.processes();
  assert.ok(pids.length >= 2, `init and server in the pod namespace, got ${pids}`);
  assert.notEqual(
    readlinkSync(`/proc/${pids[0]}/ns/pid`),
    readlinkSync('/proc/self/ns/pid'),
    'own PID namespace',
  );
  assert.ok(pids.some((p) => readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'share-server'));

  const port = sim.hostPort('default', 'share-1', 8080);
  assert.ok(port !== undefined && port !== 8080, 'containerPort 8080 is mapped to a host port of its own');
  const body = await eventually(
    'records served',
    async () => {
      const r = (await (await fetch(`http://127.0.0.1:${port}/records`)).json()) as {
        server: string;
        lastSeq: number;
      };
      return r.lastSeq >= 3 ? r : undefined;
    },
    10_000,
  );
  assert.equal(body.server, 'share-1', 'HOSTNAME is the pod name');

  const deletedAt = performance.now();
  await core().deleteNamespacedPod({ namespace: 'default', name: 'share-1' });
  await eventually(
    'share-1 gone from the API',
    async () => {
      try {
        await core().readNamespacedPod({ namespace: 'default', name: 'share-1' });
        return undefined;
      } catch {
        return true;
      }
    },
    20_000,
  );
  const tookMs = performance.now() - deletedAt;
  assert.ok(
    tookMs < 5_000 + 3_000,
    `terminated within the 5 s grace period (+ slack), took ${Math.round(tookMs)} ms`,
  );
  for (const pid of pids) {
    assert.equal(readlinkSafe(`/proc/${pid}/ns/pid`), undefined, `process ${pid} of the pod is gone`);
  }
  const exit = sim.exits.find((e) => e.pod === 'share-1' && e.container === 'server');
  assert.equal(exit?.code, 0, 'the server exited cleanly on SIGTERM');
  const dir = join(sim.root, 'pods', pod.metadata?.uid ?? '', 'volumes', 'data');
  const windows = readServingWindows(join(dir, 'serving-windows.jsonl'));
  assert.equal(windows.length, 1);
  assert.equal(windows[0]?.reason, 'signal SIGTERM');
});

test('an unknown image gets a clear waiting reason, not a crash', async () => {
  await core().createNamespacedPod({
    namespace: 'default',
    body: sharePod('bad-image', 'sim-b', 'example.com/nope:1'),
  });
  const status = await eventually(
    'ErrImagePull status',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'bad-image' });
      const waiting = p.status?.containerStatuses?.[0]?.state?.waiting;
      return waiting?.reason === 'ErrImagePull' ? { phase: p.status?.phase, waiting } : undefined;
    },
    20_000,
  );
  assert.equal(status.phase, 'Pending');
  assert.match(status.waiting.message ?? '', /example\.com\/nope:1.*not available on simulated nodes/);
  await core().deleteNamespacedPod({ namespace: 'default', name: 'bad-image', gracePeriodSeconds: 0 });
});

test('a crashed node is marked NotReady by the node-lifecycle controller, its processes die, heal brings it back', async (t) => {
  await core().createNamespacedPod({ namespace: 'default', body: sharePod('share-b', 'sim-b') });
  await eventually(
    'share-b Running',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-b' });
      return p.status?.phase === 'Running' ? true : undefined;
    },
    30_000,
  );
  const pids =
    sim
      .node('sim-b')
      .pods()
      .find((w) => w.key === 'default/share-b')
      ?.processes() ?? [];
  assert.ok(pids.length > 0);
  const crashedAt = performance.now();
  const calledMonoMs = monotonicMs();
  const crashing = sim.node('sim-b').crash();
  // The fault time is when the machine died, not when its processes were reaped.
  const recorded = sim.faults().find((f) => f.node === 'sim-b' && f.fault === 'crash');
  assert.ok(recorded, 'the crash is recorded at once, before its processes are reaped');
  await crashing;
  t.diagnostic(
    `crash recorded ${(recorded.monoMs - calledMonoMs).toFixed(1)} ms after the call, reaped ${(monotonicMs() - calledMonoMs).toFixed(1)} ms after it`,
  );
  for (const pid of pids)
    assert.equal(readlinkSafe(`/proc/${pid}/ns/pid`), undefined, `process ${pid} killed by the crash`);
  await eventually(
    'sim-b NotReady',
    async () => ((await readyStatus('sim-b')) !== 'True' ? true : undefined),
    30_000,
    250,
  );
  const notReadyMs = performance.now() - crashedAt;
  t.diagnostic(`crashed node NotReady after ${Math.round(notReadyMs)} ms (grace period 8 s)`);
  // Grace period 8 s (test cluster) after the last heartbeat, plus the monitor period.
  assert.ok(notReadyMs >= 5_000, `not before the grace period, took ${Math.round(notReadyMs)} ms`);
  assert.ok(notReadyMs < 20_000, `within the grace period and slack, took ${Math.round(notReadyMs)} ms`);
  assert.equal(await readyStatus('sim-a'), 'True', 'the other node stays Ready');

  sim.node('sim-b').heal();
  await eventually(
    'sim-b Ready again',
    async () => ((await readyStatus('sim-b')) === 'True' ? true : undefined),
    20_000,
  );
  const after = await eventually(
    'share-b marked Failed after the reboot',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-b' });
      return p.status?.phase === 'Failed' ? p : undefined;
    },
    20_000,
  );
  assert.equal(after.status?.reason, 'NodeRestarted');
});

function readlinkSafe(path: string): string | undefined {
  try {
    return readlinkSync(path);
  } catch {
    return undefined;
  }
}

test('a frozen node: its processes stop (SIGSTOP), it goes NotReady; heal resumes them and it is Ready again', async (t) => {
  await core().createNamespacedPod({ namespace: 'default', body: sharePod('share-f', 'sim-a') });
  await eventually(
    'share-f Running',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-f' });
      return p.status?.phase === 'Running' ? true : undefined;
    },
    30_000,
  );
  const worker = sim
    .node('sim-a')
    .pods()
    .find((w) => w.key === 'default/share-f');
  const pids = worker?.processes() ?? [];
  assert.ok(pids.length > 0);
  const frozenAt = performance.now();
  sim.node('sim-a').freeze();
  await eventually(
    'every process of the pod stopped',
    async () => (pids.every((p) => processState(p) === 'T') ? true : undefined),
    3_000,
    20,
  );
  await eventually(
    'sim-a NotReady',
    async () => ((await readyStatus('sim-a')) !== 'True' ? true : undefined),
    30_000,
    250,
  );
  t.diagnostic(`frozen node NotReady after ${Math.round(performance.now() - frozenAt)} ms`);
  sim.node('sim-a').heal();
  await eventually(
    'every process running again',
    async () => (pids.every((p) => processState(p) !== 'T') ? true : undefined),
    3_000,
    20,
  );
  await eventually(
    'sim-a Ready again',
    async () => ((await readyStatus('sim-a')) === 'True' ? true : undefined),
    20_000,
  );
  const port = sim.hostPort('default', 'share-f', 8080);
  // A thawed process may need a moment on a loaded machine.
  await eventually(
    'the thawed server answering',
    async () => {
      const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2_000) });
      return res.status === 200 ? true : undefined;
    },
    10_000,
  );
  const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-f' });
  assert.equal(p.status?.phase, 'Running');
});

function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

test('a partitioned node reports nothing: NotReady, a deletion waits until heal, then the kubelet terminates the pod', async (t) => {
  await core().createNamespacedPod({ namespace: 'default', body: sharePod('share-p', 'sim-a') });
  await eventually(
    'share-p Running',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-p' });
      return p.status?.phase === 'Running' ? true : undefined;
    },
    30_000,
  );
  const pids =
    sim
      .node('sim-a')
      .pods()
      .find((w) => w.key === 'default/share-p')
      ?.processes() ?? [];
  const partitionedAt = performance.now();
  sim.node('sim-a').partition('close');
  await core().deleteNamespacedPod({ namespace: 'default', name: 'share-p' });
  await eventually(
    'sim-a NotReady',
    async () => ((await readyStatus('sim-a')) !== 'True' ? true : undefined),
    30_000,
    250,
  );
  t.diagnostic(`partitioned node NotReady after ${Math.round(performance.now() - partitionedAt)} ms`);
  const pending = await core().readNamespacedPod({ namespace: 'default', name: 'share-p' });
  assert.ok(pending.metadata?.deletionTimestamp, 'the deletion is recorded but not carried out');
  assert.ok(
    pids.every((p) => processState(p) !== undefined),
    'the partitioned kubelet did not stop the pod',
  );
  sim.node('sim-a').heal();
  await eventually(
    'share-p terminated and gone after heal',
    async () => {
      try {
        await core().readNamespacedPod({ namespace: 'default', name: 'share-p' });
        return undefined;
      } catch {
        return true;
      }
    },
    20_000,
  );
  assert.ok(
    pids.every((p) => processState(p) === undefined),
    'its processes are gone',
  );
  await eventually(
    'sim-a Ready again',
    async () => ((await readyStatus('sim-a')) === 'True' ? true : undefined),
    20_000,
  );
});

test('a force delete (grace 0) kills the pod at once', async () => {
  await core().createNamespacedPod({ namespace: 'default', body: sharePod('share-k', 'sim-b') });
  await eventually(
    'share-k Running',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-k' });
      return p.status?.phase === 'Running' ? true : undefined;
    },
    30_000,
  );
  const pids =
    sim
      .node('sim-b')
      .pods()
      .find((w) => w.key === 'default/share-k')
      ?.processes() ?? [];
  assert.ok(pids.length > 0);
  const deletedAt = performance.now();
  await core().deleteNamespacedPod({ namespace: 'default', name: 'share-k', gracePeriodSeconds: 0 });
  await eventually(
    'share-k processes gone',
    async () => (pids.every((p) => processState(p) === undefined) ? true : undefined),
    5_000,
    20,
  );
  const tookMs = performance.now() - deletedAt;
  assert.ok(tookMs < 3_000, `killed in ${Math.round(tookMs)} ms`);
  // The exit is recorded when the sim's child-exit handler runs, which a CI run saw come
  // after /proc no longer listed the processes: waited for, then judged.
  const exit = await eventually(
    'share-k server exit recorded',
    async () => sim.exits.find((e) => e.pod === 'share-k' && e.container === 'server'),
    5_000,
    20,
  );
  assert.equal(exit?.signal, 'SIGKILL', `killed, not asked to stop: ${JSON.stringify(exit)}`);
});

test('a node with a fake clock runs its containers 10 minutes ahead (libfaketime)', async () => {
  sim.node('sim-b').setContainerEnv(fakeClockEnv('+10m'));
  await core().createNamespacedPod({ namespace: 'default', body: sharePod('share-skew', 'sim-b') });
  const pod = await eventually(
    'share-skew Running',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'share-skew' });
      return p.status?.phase === 'Running' ? p : undefined;
    },
    30_000,
  );
  const dir = join(sim.root, 'pods', pod.metadata?.uid ?? '', 'volumes', 'data');
  const window = await eventually('a serving window', async () => sim.servingWindowsIn(dir)[0], 10_000);
  const skewMs = new Date(window.startWall).getTime() - Date.now();
  assert.ok(
    Math.abs(skewMs - 600_000) < 30_000,
    `the server's wall clock is 10 min ahead, got ${Math.round(skewMs / 1000)} s`,
  );
  sim.node('sim-b').setContainerEnv({});
  await core().deleteNamespacedPod({ namespace: 'default', name: 'share-skew', gracePeriodSeconds: 0 });
});
