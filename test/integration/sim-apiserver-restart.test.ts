/**
 * The simulator survives an API-server restart: its watches re-list, heartbeats and
 * status writes resume, and a pod deleted after the restart is terminated as usual.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Cluster } from '../../dev/cluster/types.ts';
import { SHARE_SERVER_IMAGE, type Sim } from '../../dev/sim/sim.ts';
import { k8s } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim({ nodes: ['sim-a'] });
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const cluster = () => (running as { cluster: Cluster }).cluster;
const sim = () => (running as { sim: Sim }).sim;

test('after a 10 s API-server outage the kubelet sees new pods and deletions again', async (t) => {
  const core = cluster().kubeConfig.makeApiClient(k8s.CoreV1Api);
  // Bound to the node directly: the scheduler's own watches take up to ~30 s to recover.
  const pod = (name: string) => ({
    metadata: { name, namespace: 'default' },
    spec: {
      nodeName: 'sim-a',
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: 'server',
          image: `${SHARE_SERVER_IMAGE}:dev`,
          args: ['--dir=/data'],
          volumeMounts: [{ name: 'data', mountPath: '/data' }],
        },
      ],
      volumes: [{ name: 'data', emptyDir: {} }],
    },
  });
  const phase = async (name: string) => {
    try {
      return (await core.readNamespacedPod({ namespace: 'default', name })).status?.phase ?? 'Pending';
    } catch {
      return 'Gone';
    }
  };
  await core.createNamespacedPod({ namespace: 'default', body: pod('before') });
  await eventually(
    'before Running',
    async () => ((await phase('before')) === 'Running' ? true : undefined),
    30_000,
  );

  const stoppingAt = performance.now();
  await cluster().stopApiServer();
  t.diagnostic(`API server stopped in ${Math.round(performance.now() - stoppingAt)} ms`);
  await new Promise((r) => setTimeout(r, 10_000));
  const restartedAt = performance.now();
  await cluster().startApiServer();
  t.diagnostic(`API server ready again ${Math.round(performance.now() - restartedAt)} ms after start`);

  const createdAt = performance.now();
  await core.createNamespacedPod({ namespace: 'default', body: pod('after') });
  await eventually(
    'after Running',
    async () => ((await phase('after')) === 'Running' ? true : undefined),
    60_000,
  );
  const ranMs = performance.now() - createdAt;
  t.diagnostic(`a pod created after the restart ran ${Math.round(ranMs)} ms later`);
  assert.ok(ranMs < 10_000, `the kubelet's watch recovered promptly (${Math.round(ranMs)} ms)`);
  const deletedAt = performance.now();
  await core.deleteNamespacedPod({ namespace: 'default', name: 'before' });
  await eventually(
    'before terminated and gone',
    async () => ((await phase('before')) === 'Gone' ? true : undefined),
    30_000,
  );
  t.diagnostic(
    `a pod deleted after the restart was gone ${Math.round(performance.now() - deletedAt)} ms later`,
  );
  assert.equal(sim().exits.find((e) => e.pod === 'before')?.code, 0, 'stopped by SIGTERM, exit 0');
  // The node-lifecycle controller may have marked it Unknown meanwhile (no heartbeat got
  // through the outage); the next status post (every 10 s) makes it Ready again.
  await eventually(
    'sim-a Ready',
    async () => {
      const node = await core.readNode({ name: 'sim-a' });
      return node.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True' ? true : undefined;
    },
    15_000,
  );
});
