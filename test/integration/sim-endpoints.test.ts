/**
 * Simulated pods report distinct, non-loopback pod IPs, so the real EndpointSlice
 * controller publishes them as a Service's endpoints (it rejects loopback addresses:
 * with 127.0.0.1 a Service's EndpointSlices stayed empty), and follows a pod that goes.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { SHARE_SERVER_IMAGE, type Sim } from '../../dev/sim/sim.ts';
import { k8s } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim({ nodes: ['sim-a', 'sim-b'] });
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const core = () => (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
const discovery = () =>
  (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(k8s.DiscoveryV1Api);

function servedPod(name: string, node: string): V1Pod {
  return {
    metadata: { name, namespace: 'default', labels: { app: 'served' } },
    spec: {
      nodeName: node,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          name: 'server',
          image: `${SHARE_SERVER_IMAGE}:dev`,
          args: ['--dir=/data', '--port=8080'],
          ports: [{ containerPort: 8080, name: 'http' }],
          readinessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 1 },
          volumeMounts: [{ name: 'data', mountPath: '/data' }],
        },
      ],
      volumes: [{ name: 'data', emptyDir: {} }],
    },
  };
}

/** Ready endpoints of a Service's EndpointSlices, as "pod=ip:port". */
async function readyEndpoints(service: string): Promise<string[]> {
  const slices = await discovery().listNamespacedEndpointSlice({
    namespace: 'default',
    labelSelector: `kubernetes.io/service-name=${service}`,
  });
  return slices.items
    .flatMap((s) =>
      (s.endpoints ?? [])
        .filter((e) => e.conditions?.ready === true)
        .flatMap((e) => e.addresses.map((ip) => `${e.targetRef?.name}=${ip}:${s.ports?.[0]?.port}`)),
    )
    .sort();
}

test('two pods get distinct non-loopback IPs; the Service EndpointSlices list them, then follow a deletion', async () => {
  await core().createNamespacedService({
    namespace: 'default',
    body: {
      metadata: { name: 'served' },
      spec: { selector: { app: 'served' }, ports: [{ port: 80, targetPort: 'http' }] },
    },
  });
  await core().createNamespacedPod({ namespace: 'default', body: servedPod('served-a', 'sim-a') });
  await core().createNamespacedPod({ namespace: 'default', body: servedPod('served-b', 'sim-b') });
  const ips = new Map<string, string>();
  for (const name of ['served-a', 'served-b']) {
    const pod = await eventually(
      `${name} Ready`,
      async () => {
        const p = await core().readNamespacedPod({ namespace: 'default', name });
        return p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? p : undefined;
      },
      30_000,
    );
    const ip = pod.status?.podIP ?? '';
    assert.match(ip, /^10\.244\.\d+\.\d+$/, `${name}: a non-loopback pod IP`);
    ips.set(name, ip);
  }
  assert.notEqual(ips.get('served-a'), ips.get('served-b'), 'every pod has its own IP');

  const expected = [...ips].map(([name, ip]) => `${name}=${ip}:8080`).sort();
  await eventually(
    'both pods in the EndpointSlices',
    async () => {
      const now = await readyEndpoints('served');
      return JSON.stringify(now) === JSON.stringify(expected) ? now : undefined;
    },
    20_000,
  );

  await core().deleteNamespacedPod({ namespace: 'default', name: 'served-a' });
  const left = [`served-b=${ips.get('served-b')}:8080`];
  await eventually(
    'only served-b left in the EndpointSlices',
    async () => {
      const now = await readyEndpoints('served');
      return JSON.stringify(now) === JSON.stringify(left) ? now : undefined;
    },
    20_000,
  );
  await core().deleteNamespacedPod({ namespace: 'default', name: 'served-b' });
  await core().deleteNamespacedService({ namespace: 'default', name: 'served' });
});
