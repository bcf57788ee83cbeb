/**
 * Liveness probes as the kubelet runs them: a probe may target another container's
 * port (all containers of a pod share one network namespace); a failed probe kills the
 * container with the probe's own terminationGracePeriodSeconds (Kubernetes >= 1.25)
 * when set, else the pod's; a main container of a restartPolicy Never pod killed so
 * is not restarted and the pod ends Failed; the exit log says why (reason 'liveness').
 * The probed server ignores SIGTERM (--sigterm-delay=never), so the kill takes exactly
 * the grace period and then SIGKILL.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { V1Pod, V1Probe } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import type { ContainerExitRecord } from '../../dev/sim/kubelet/pod-worker.ts';
import { SHARE_SERVER_IMAGE, type Sim } from '../../dev/sim/sim.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import { k8s } from '../../lib/kube-client.ts';
import { eventually } from '../support/cluster.ts';
import { startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim({ nodes: ['sim-l'] });
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const sim = () => (running as { sim: Sim }).sim;
const core = () => (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);

/**
 * Two share servers: `target` on 9090, and `watched` (stubborn: ignores SIGTERM) whose
 * liveness probe checks the target's port, every second, failing at the first miss.
 */
function probedPod(name: string, liveness: Partial<V1Probe>, podGraceSeconds: number): V1Pod {
  return {
    metadata: { name, namespace: 'default' },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': 'sim-l' },
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: podGraceSeconds,
      containers: [
        {
          name: 'target',
          image: `${SHARE_SERVER_IMAGE}:dev`,
          args: ['--dir=/data', '--port=9090'],
          ports: [{ containerPort: 9090 }],
          volumeMounts: [{ name: 'data', mountPath: '/data', subPath: 'target' }],
        },
        {
          name: 'watched',
          image: `${SHARE_SERVER_IMAGE}:dev`,
          args: ['--dir=/data', '--port=8080', '--sigterm-delay=never'],
          ports: [{ containerPort: 8080 }],
          volumeMounts: [{ name: 'data', mountPath: '/data', subPath: 'watched' }],
          livenessProbe: {
            tcpSocket: { port: 9090 },
            // Room for the target to come up: one miss kills.
            initialDelaySeconds: 3,
            periodSeconds: 1,
            // A killed target refuses at once, so the timeout never shapes the figures; a
            // 1 s one failed a probe on a loaded machine (CI, 2026-12-01: killed 508 ms after
            // the target, its grace begun before), so the kill came before the test's.
            timeoutSeconds: 3,
            failureThreshold: 1,
            ...liveness,
          },
        },
      ],
      volumes: [{ name: 'data', emptyDir: {} }],
    },
  };
}

/** Waits for the pod, kills its probe target, returns how long until the watched process was gone. */
async function measure(name: string): Promise<{ ms: number; exit: ContainerExitRecord }> {
  const worker = await eventually('the pod running both containers', async () => {
    const w = sim()
      .node('sim-l')
      .pods()
      .find((p) => p.key === `default/${name}`);
    return w?.view.main[0]?.hostPid && w.view.main[1]?.hostPid ? w : undefined;
  });
  // Past the initial delay and a few probes: the cross-container probe passes.
  await sleep(4_500);
  assert.equal(
    sim().exits.some((e) => e.pod === name),
    false,
    "the liveness probe reaches the other container's port (no kill while the target serves)",
  );
  const targetPid = worker.view.main[0]?.hostPid as number;
  const killedAt = monotonicMs();
  process.kill(targetPid, 'SIGKILL');
  const exit = await eventually(
    'the watched container killed by its liveness probe',
    async () => sim().exits.find((e) => e.pod === name && e.container === 'watched'),
    40_000,
    20,
  );
  return { ms: exit.monoMs - killedAt, exit };
}

test("a failed liveness probe on another container's port kills with the probe's grace (1 s), no restart, pod Failed", async (t) => {
  await core().createNamespacedPod({
    namespace: 'default',
    body: probedPod('live-a', { terminationGracePeriodSeconds: 1 }, 30),
  });
  const { ms, exit } = await measure('live-a');
  t.diagnostic(
    `probe target killed -> watched process gone: ${Math.round(ms)} ms (period 1 s, failureThreshold 1, probe grace 1 s, pod grace 30 s)`,
  );
  assert.equal(exit.reason, 'liveness');
  assert.equal(exit.signal, 'SIGKILL', 'it ignored SIGTERM, so the grace ran out');
  assert.ok(ms >= 1_000, `not before the probe's grace of 1 s: ${Math.round(ms)} ms`);
  assert.ok(ms <= 4_000, `within period + grace + slack: ${Math.round(ms)} ms`);
  const target = sim().exits.find((e) => e.pod === 'live-a' && e.container === 'target');
  assert.equal(target?.reason, 'exited', 'the target died on its own (the test killed it)');

  const pod = await eventually(
    'live-a Failed',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'live-a' });
      return p.status?.phase === 'Failed' ? p : undefined;
    },
    20_000,
  );
  const watched = pod.status?.containerStatuses?.find((s) => s.name === 'watched');
  assert.equal(watched?.restartCount, 0, 'restartPolicy Never: not restarted');
  assert.equal(watched?.state?.terminated?.exitCode, 137);
  await sleep(1_500);
  assert.equal(
    sim().exits.filter((e) => e.pod === 'live-a' && e.container === 'watched').length,
    1,
    'it never ran again',
  );
});

test("without a probe-level grace the pod's terminationGracePeriodSeconds applies (3 s)", async (t) => {
  await core().createNamespacedPod({ namespace: 'default', body: probedPod('live-b', {}, 3) });
  const { ms, exit } = await measure('live-b');
  t.diagnostic(`probe target killed -> watched process gone: ${Math.round(ms)} ms (pod grace 3 s)`);
  assert.equal(exit.reason, 'liveness');
  assert.ok(ms >= 3_000, `the pod's grace of 3 s: ${Math.round(ms)} ms`);
  assert.ok(ms <= 6_000, `period + grace + slack: ${Math.round(ms)} ms`);
});
