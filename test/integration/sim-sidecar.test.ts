/**
 * The real agent as a native sidecar next to the share server on a simulated node:
 * the sidecar starts first and the server only after the sidecar's startup probe
 * (/readyz: lease held) passed; each pod has its own PID namespace, so a fencing agent
 * signals only its own server; a partition of the node (its TCP proxy stalls) makes
 * the agent fence its server at the renew deadline.
 */

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { PROJECT_IMAGE, SHARE_SERVER_IMAGE, type Sim } from '../../dev/sim/sim.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { k8s } from '../../lib/kube-client.ts';
import { ANNOTATION_DELINQUENT } from '../../lib/lease-record.ts';
import { eventually } from '../support/cluster.ts';
import { createShareAgentAccount, startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

assert.ok(
  existsSync(join(import.meta.dirname, '../../dist/agent/main.js')),
  'build first: tsc -p tsconfig.build.json',
);

let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim({ nodes: ['sim-a'] });
    await createShareAgentAccount(running.cluster.kubeConfig);
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const sim = () => (running as { sim: Sim }).sim;
const kc = () => (running as { cluster: Cluster }).cluster.kubeConfig;

function sharePod(name: string, lease: string): V1Pod {
  const field = (fieldPath: string) => ({ valueFrom: { fieldRef: { fieldPath } } });
  return {
    metadata: { name, namespace: 'default' },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': 'sim-a' },
      serviceAccountName: 'share-agent',
      restartPolicy: 'Never',
      shareProcessNamespace: true,
      terminationGracePeriodSeconds: 5,
      initContainers: [
        {
          name: 'agent',
          image: `${PROJECT_IMAGE}:dev`,
          args: ['agent'],
          restartPolicy: 'Always',
          // NB: as on a real node, the image's uid 65532 may not signal the root share
          // server (EPERM), and `add: [KILL]` does nothing for a non-root uid; the agent's
          // preflight asks for CAP_KILL, so: uid 0 with only CAP_KILL (as manager/share-model/pod-spec.ts).
          securityContext: { runAsUser: 0, capabilities: { drop: ['ALL'], add: ['KILL'] } },
          env: [
            { name: 'LEASEHOLD_LEASE_NAMESPACE', ...field('metadata.namespace') },
            { name: 'LEASEHOLD_LEASE_NAME', value: lease },
            { name: 'LEASEHOLD_POD_NAME', ...field('metadata.name') },
            { name: 'LEASEHOLD_NODE_NAME', ...field('spec.nodeName') },
            { name: 'LEASEHOLD_HTTP_PORT', value: '8081' },
            { name: 'LEASEHOLD_FENCE_ACTION', value: 'signal' },
            { name: 'LEASEHOLD_FENCE_PROCESS', value: 'share-server' },
          ],
          ports: [{ name: 'agent-http', containerPort: 8081 }],
          startupProbe: { httpGet: { path: '/readyz', port: 8081 }, periodSeconds: 1, failureThreshold: 60 },
        },
      ],
      containers: [
        {
          name: 'server',
          image: `${SHARE_SERVER_IMAGE}:dev`,
          args: ['--dir=/export', '--port=8080'],
          ports: [{ containerPort: 8080 }],
          volumeMounts: [{ name: 'share', mountPath: '/export' }],
        },
      ],
      volumes: [{ name: 'share', emptyDir: {} }],
    },
  };
}

async function runningPod(name: string): Promise<V1Pod> {
  const core = kc().makeApiClient(k8s.CoreV1Api);
  return eventually(
    `${name} Running and Ready`,
    async () => {
      const p = await core.readNamespacedPod({ namespace: 'default', name });
      const ready = p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
      return p.status?.phase === 'Running' && ready ? p : undefined;
    },
    60_000,
  );
}

/** The pods use an emptyDir, whose directory lives under the pod's sim dir. */
function windowsOf(pod: V1Pod) {
  return sim().servingWindowsIn(join(sim().root, 'pods', pod.metadata?.uid ?? '', 'volumes', 'share'));
}

test('sidecar first, server after the startup probe; a fencing agent signals only its own pod; a partition fences', async (t) => {
  const core = kc().makeApiClient(k8s.CoreV1Api);
  const coordination = kc().makeApiClient(k8s.CoordinationV1Api);
  await core.createNamespacedPod({ namespace: 'default', body: sharePod('share-a', 'lease-a') });
  await core.createNamespacedPod({ namespace: 'default', body: sharePod('share-b', 'lease-b') });
  const podA = await runningPod('share-a');
  const podB = await runningPod('share-b');

  for (const [pod, lease] of [
    [podA, 'lease-a'],
    [podB, 'lease-b'],
  ] as const) {
    const l = await coordination.readNamespacedLease({ namespace: 'default', name: lease });
    assert.equal(l.spec?.holderIdentity, pod.metadata?.name);
    assert.equal(l.metadata?.annotations?.['leasehold.dev/holder-node'], 'sim-a');
    const window = await eventually('a serving window', async () => windowsOf(pod)[0], 10_000);
    const acquired = new Date(l.spec?.acquireTime ?? 0).getTime();
    assert.ok(
      acquired > 0 && new Date(window.startWall).getTime() >= acquired,
      'the server started after the agent held the lease',
    );
    const init = pod.status?.initContainerStatuses?.[0];
    assert.equal(init?.started, true);
    assert.ok(init?.state?.running);
  }

  // A manager-style delinquent mark on lease-b: agent b fences its server, server a serves on.
  // By CAS, as a manager does: a renewal in between (409) means read again.
  await eventually('lease-b marked delinquent', async () => {
    const leaseB = await coordination.readNamespacedLease({ namespace: 'default', name: 'lease-b' });
    leaseB.metadata = {
      ...leaseB.metadata,
      annotations: { ...leaseB.metadata?.annotations, [ANNOTATION_DELINQUENT]: new Date().toISOString() },
    };
    try {
      return await coordination.replaceNamespacedLease({
        namespace: 'default',
        name: 'lease-b',
        body: leaseB,
      });
    } catch (err) {
      if ((err as { code?: number }).code === 409) return undefined;
      throw err;
    }
  });
  const stoppedB = await eventually('server b fenced', async () => windowsOf(podB)[0]?.stopMonoMs, 15_000);
  assert.ok(stoppedB);
  assert.match(windowsOf(podB)[0]?.reason ?? '', /SIGTERM/);
  // The server exits 0 on SIGTERM, so the pod ends Succeeded (restartPolicy Never).
  const endedB = await eventually(
    'pod b ended',
    async () => {
      const p = await core.readNamespacedPod({ namespace: 'default', name: 'share-b' });
      return p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed' ? p : undefined;
    },
    20_000,
  );
  assert.equal(endedB.status?.containerStatuses?.[0]?.state?.terminated?.exitCode, 0);
  assert.ok(endedB.status?.initContainerStatuses?.[0]?.state?.terminated, 'its sidecar was stopped too');
  assert.equal(windowsOf(podA)[0]?.stopMonoMs, undefined, 'server a still serving: agent b cannot see it');
  const portA = sim().hostPort('default', 'share-a', 8080);
  const before = ((await (await fetch(`http://127.0.0.1:${portA}/records`)).json()) as { lastSeq: number })
    .lastSeq;
  await new Promise((r) => setTimeout(r, 500));
  const afterSeq = ((await (await fetch(`http://127.0.0.1:${portA}/records`)).json()) as { lastSeq: number })
    .lastSeq;
  assert.ok(afterSeq > before, 'server a keeps appending');

  // Partition sim-a (its proxy stalls): agent a cannot renew and fences within the renew deadline.
  const partitionedAt = monotonicMs();
  sim().node('sim-a').partition('stall');
  const stoppedA = await eventually('server a fenced', async () => windowsOf(podA)[0]?.stopMonoMs, 15_000);
  const fenceMs = stoppedA - partitionedAt;
  t.diagnostic(
    `server fenced ${Math.round(fenceMs)} ms after the node's partition (renew deadline 4 s, interval 2 s)`,
  );
  // The last renewal was sent at most R = 2 s before the cut; T = 4 s after it the agent fences.
  assert.ok(fenceMs <= 4_000 + 1_500, `fenced ${Math.round(fenceMs)} ms after the partition`);
  assert.ok(fenceMs >= 4_000 - 2_000 - 500, `not before T - R, fenced after ${Math.round(fenceMs)} ms`);
  sim().node('sim-a').heal();
  await eventually(
    'pod a reported ended after heal',
    async () => {
      const p = await core.readNamespacedPod({ namespace: 'default', name: 'share-a' });
      return p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed' ? true : undefined;
    },
    20_000,
  );
});

test('a native sidecar that dies restarts in place (restartCount 1) and resumes its lease; the server serves on', async () => {
  const core = kc().makeApiClient(k8s.CoreV1Api);
  const coordination = kc().makeApiClient(k8s.CoordinationV1Api);
  await core.createNamespacedPod({ namespace: 'default', body: sharePod('share-c', 'lease-c') });
  const pod = await runningPod('share-c');
  const worker = sim()
    .node('sim-a')
    .pods()
    .find((w) => w.key === 'default/share-c');
  const agentPid = worker?.view.init[0]?.hostPid;
  assert.ok(agentPid, 'the agent process is known by its host pid');
  process.kill(agentPid, 'SIGKILL');
  const restarted = await eventually(
    'the agent restarted in place',
    async () => {
      const p = await core.readNamespacedPod({ namespace: 'default', name: 'share-c' });
      const s = p.status?.initContainerStatuses?.[0];
      return s?.restartCount === 1 && s.started && s.state?.running ? p : undefined;
    },
    20_000,
  );
  assert.equal(restarted.status?.phase, 'Running');
  assert.ok(
    restarted.status?.initContainerStatuses?.[0]?.lastState?.terminated,
    'the last run is reported terminated',
  );
  const lease = await coordination.readNamespacedLease({ namespace: 'default', name: 'lease-c' });
  assert.equal(lease.spec?.holderIdentity, 'share-c', 'the restarted agent still holds the lease');
  assert.equal(windowsOf(pod)[0]?.stopMonoMs, undefined, 'the server kept serving');
});
