/**
 * Fencing in share-manager pods built by the manager's own pod spec (manager/share-model/pod-spec.ts,
 * the pod users run), on a simulated node against the real control plane:
 *  - no spec.fence: the default `pod` fence stops the server when a partition cuts the
 *    agent off, about T after its last renewal;
 *  - a fence that cannot find its target (signals made to fail): the kubelet's liveness
 *    backstop (the server's probe on the agent's /readyz) stops the server anyway;
 *  - an agent that hangs (SIGSTOP) while its node is fine, or dies (SIGKILL) while its
 *    node is cut off: the backstop stops the server within seconds, so no server runs
 *    on without an agent that proves the lease;
 *  - a server that ignores SIGTERM is SIGKILLed after the fence's grace; a server of
 *    another user (uid 1000) is fenced by the agent's CAP_KILL; an agent without it
 *    (its image's uid 65532, no capabilities) never acquires, so its server never starts.
 * Each measures the time from the fault to the server's exit and prints it. No manager
 * runs here: the Lease and the partition are the only actors.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { SHARE_SERVER_IMAGE, type Sim } from '../../dev/sim/sim.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { k8s } from '../../lib/kube-client.ts';
import { buildSharePod } from '../../manager/share-model/pod-spec.ts';
import {
  resolveSpec,
  type ShareManager,
  type ShareManagerSpec,
} from '../../manager/share-model/share-manager-spec.ts';
import { eventually } from '../support/cluster.ts';
import { createShareAgentAccount, startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

assert.ok(
  existsSync(join(import.meta.dirname, '../../dist/agent/main.js')),
  'build first: tsc -p tsconfig.build.json',
);

const NODE = 'sim-f';
const DEFAULTS = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };
const T = DEFAULTS.renewDeadlineMs;
const R = DEFAULTS.renewIntervalMs;

let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim({ nodes: [NODE] });
    await createShareAgentAccount(running.cluster.kubeConfig);
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const sim = () => (running as { sim: Sim }).sim;
const core = () => (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);

/** The manager's pod for a ShareManager named `name`, pinned to the node, on an emptyDir. */
function managerPod(
  name: string,
  fence?: ShareManagerSpec['fence'],
  server: Partial<ShareManagerSpec['server']> = {},
): V1Pod {
  const sm: ShareManager = {
    metadata: { name, namespace: 'default', uid: `uid-${name}` },
    spec: {
      volume: { pvc: 'unused', mountPath: '/export' },
      server: {
        image: `${SHARE_SERVER_IMAGE}:dev`,
        args: ['--dir=/export', '--port=8080'],
        ports: [{ containerPort: 8080 }],
        ...server,
      },
      serviceAccountName: 'share-agent',
      ...(fence ? { fence } : {}),
    },
  };
  const resolved = resolveSpec(sm.spec, DEFAULTS);
  assert.ok(resolved.ok, resolved.ok ? '' : resolved.message);
  const pod = buildSharePod({
    sm,
    timings: resolved.timings,
    mountPath: resolved.mountPath,
    fenceAction: resolved.fenceAction,
    nfsServerImage: 'leasehold.dev/nfs-ganesha:dev',
    agentImage: 'leasehold.dev/leasehold:dev',
    agentPort: 8081,
    avoid: undefined,
  });
  // Test seams: a fixed name, this node, an emptyDir instead of the PVC, no owner (no SM object).
  pod.metadata = { ...pod.metadata, name: `${name}-pod`, generateName: undefined, ownerReferences: [] };
  const spec = pod.spec as NonNullable<V1Pod['spec']>;
  spec.nodeSelector = { 'kubernetes.io/hostname': NODE };
  spec.volumes = [{ name: 'share', emptyDir: {} }];
  return pod;
}

async function startServing(pod: V1Pod): Promise<{ uid: string; agentPid: number; windowsDir: string }> {
  const created = await core().createNamespacedPod({ namespace: 'default', body: pod });
  const name = created.metadata?.name ?? '';
  await eventually(
    `${name} Running and Ready`,
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name });
      return p.status?.phase === 'Running' &&
        p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')
        ? p
        : undefined;
    },
    60_000,
  );
  const uid = created.metadata?.uid ?? '';
  const windowsDir = join(sim().root, 'pods', uid, 'volumes', 'share');
  await eventually('a serving window', async () => sim().servingWindowsIn(windowsDir)[0], 10_000);
  const worker = sim()
    .node(NODE)
    .pods()
    .find((w) => w.key === `default/${name}`);
  const agentPid = worker?.view.init[0]?.hostPid;
  assert.ok(agentPid, 'the agent process is known by its host pid');
  return { uid, agentPid, windowsDir };
}

/** The server container's exit after `sinceMono` (from the simulator's exit log). */
function serverExit(podName: string, sinceMono: number) {
  return eventually(
    `the server of ${podName} exited`,
    async () =>
      sim().exits.find((e) => e.pod === podName && e.container === 'server' && e.monoMs >= sinceMono),
    20_000,
  );
}

async function heal(): Promise<void> {
  sim().node(NODE).heal();
  await new Promise((r) => setTimeout(r, 500));
}

test('no spec.fence: the default pod fence stops the server about T after the partition cut the agent off', async (t) => {
  const pod = managerPod('fence-default');
  const env = pod.spec?.initContainers?.[0]?.env ?? [];
  assert.equal(env.find((e) => e.name === 'LEASEHOLD_FENCE_ACTION')?.value, 'pod');
  const { windowsDir } = await startServing(pod);
  const cutAt = monotonicMs();
  sim().node(NODE).partition('stall');
  try {
    const exit = await serverExit('fence-default-pod', cutAt);
    const ms = exit.monoMs - cutAt;
    t.diagnostic(
      `server stopped ${Math.round(ms)} ms after the partition (T = ${T} ms, R = ${R} ms): ${JSON.stringify(exit)}`,
    );
    // The last renewal was sent at most R before the cut; the fence comes T after it.
    assert.ok(ms >= T - R - 500, `not before T - R (${Math.round(ms)} ms)`);
    assert.ok(ms <= T + 1_500, `by T + slack (${Math.round(ms)} ms)`);
    assert.equal(exit.signal ?? null, null, 'the share server exited by itself on the fence SIGTERM');
    assert.match(sim().servingWindowsIn(windowsDir)[0]?.reason ?? '', /SIGTERM/);
  } finally {
    await heal();
  }
});

test('signals made to fail (the fence finds no target): the kubelet liveness backstop stops the server', async (t) => {
  const pod = managerPod('fence-miss', { action: 'signal', process: 'no-such-server' });
  await startServing(pod);
  const cutAt = monotonicMs();
  sim().node(NODE).partition('stall');
  try {
    const exit = await serverExit('fence-miss-pod', cutAt);
    const ms = exit.monoMs - cutAt;
    t.diagnostic(
      `backstop: server stopped ${Math.round(ms)} ms after the partition, i.e. at most ${Math.round(ms - (T - R))} ms after the renew deadline passed: ${JSON.stringify(exit)}`,
    );
    // /readyz fails at T after the last renewal (<= T after the cut); the probe runs every
    // 1 s and kills after 2 failures, allowing 1 s of grace: T + 2-3 s, plus slack.
    assert.ok(ms >= T - R - 500, `not before the lease lapsed (${Math.round(ms)} ms)`);
    assert.ok(ms <= T + 5_000, `by T + 5 s (${Math.round(ms)} ms)`);
    assert.equal(exit.reason, 'liveness', 'stopped by the kubelet, the agent could not');
  } finally {
    await heal();
  }
});

test('an agent that hangs (SIGSTOP) while its node is fine: the backstop stops the server within seconds', async (t) => {
  const pod = managerPod('agent-hung');
  const { agentPid } = await startServing(pod);
  const stoppedAt = monotonicMs();
  process.kill(agentPid, 'SIGSTOP');
  try {
    const exit = await serverExit('agent-hung-pod', stoppedAt);
    const ms = exit.monoMs - stoppedAt;
    t.diagnostic(`server stopped ${Math.round(ms)} ms after its agent froze: ${JSON.stringify(exit)}`);
    // two probes 1 s apart, each timing out after 1 s, + grace 1 s, plus slack.
    assert.ok(ms <= 6_000, `within 6 s of the agent hanging (${Math.round(ms)} ms)`);
    assert.equal(exit.reason, 'liveness');
  } finally {
    try {
      process.kill(agentPid, 'SIGCONT');
    } catch {
      // already gone
    }
  }
});

test('an agent that dies (SIGKILL) on a node cut off from the API: the backstop stops the server at once, not T later', async (t) => {
  // NB: on a node that reaches the API, the sidecar restarts in place and re-proves its
  // lease within a probe period, so the server serves on (sim-sidecar.test.ts); cut off,
  // the restarted agent cannot, and /readyz stays 503.
  const pod = managerPod('agent-dead');
  const { agentPid } = await startServing(pod);
  sim().node(NODE).partition('stall');
  const killedAt = monotonicMs();
  process.kill(agentPid, 'SIGKILL');
  try {
    const exit = await serverExit('agent-dead-pod', killedAt);
    const ms = exit.monoMs - killedAt;
    t.diagnostic(`server stopped ${Math.round(ms)} ms after its agent died: ${JSON.stringify(exit)}`);
    // two failed probes 1 s apart + grace 1 s, plus slack: not T later.
    assert.ok(ms <= 4_500, `within 4.5 s of the agent dying (${Math.round(ms)} ms)`);
    assert.equal(exit.reason, 'liveness');
  } finally {
    await heal();
  }
});

test('a server that ignores SIGTERM: the pod fence SIGKILLs it after the grace, well inside T + (D - T)', async (t) => {
  const pod = managerPod('stubborn', undefined, {
    args: ['--dir=/export', '--port=8080', '--sigterm-delay=never'],
  });
  const { windowsDir } = await startServing(pod);
  const cutAt = monotonicMs();
  sim().node(NODE).partition('stall');
  try {
    const exit = await serverExit('stubborn-pod', cutAt);
    const ms = exit.monoMs - cutAt;
    t.diagnostic(`stubborn server killed ${Math.round(ms)} ms after the partition: ${JSON.stringify(exit)}`);
    assert.equal(exit.signal, 'SIGKILL', 'it ignored SIGTERM: only SIGKILL stopped it');
    // Fence at <= T after the cut, SIGKILL 750 ms later (grace = half of 3/4 of D - T).
    assert.ok(ms <= T + 750 + 1_500, `by T + grace + slack (${Math.round(ms)} ms)`);
    const window = sim().servingWindowsIn(windowsDir)[0];
    assert.equal(window?.stopMonoMs, exit.monoMs, 'its window closes at the kill (no stop line written)');
  } finally {
    await heal();
  }
});

test('a server of another user (uid 1000): the agent (uid 0, only CAP_KILL) fences it', async (t) => {
  const pod = managerPod('other-user', undefined, { securityContext: { runAsUser: 1000, runAsGroup: 1000 } });
  const { agentPid } = await startServing(pod);
  const server = sim()
    .node(NODE)
    .pods()
    .find((w) => w.key === 'default/other-user-pod')?.view.main[0]?.hostPid;
  assert.ok(server);
  const uidOf = (pid: number) => /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  assert.equal(uidOf(server), '1000', 'the server runs as uid 1000');
  assert.equal(uidOf(agentPid), '0', 'the agent runs as uid 0 (with only CAP_KILL)');
  const cutAt = monotonicMs();
  sim().node(NODE).partition('stall');
  try {
    const exit = await serverExit('other-user-pod', cutAt);
    t.diagnostic(
      `server of uid 1000 stopped ${Math.round(exit.monoMs - cutAt)} ms after the partition: ${JSON.stringify(exit)}`,
    );
    assert.ok(exit.monoMs - cutAt <= T + 1_500);
  } finally {
    await heal();
  }
});

test('an agent at its image user (uid 65532, no capabilities) cannot fence a root server: it never acquires, the server never starts', async () => {
  const pod = managerPod('no-kill');
  const agent = pod.spec?.initContainers?.[0];
  assert.ok(agent);
  delete agent.securityContext; // what the chart's restricted context or a PSS-restricted namespace would give
  const created = await core().createNamespacedPod({ namespace: 'default', body: pod });
  const name = created.metadata?.name ?? '';
  const refused = await eventually(
    'the agent says it cannot fence',
    async () => {
      const port = sim().hostPort('default', name, 8081);
      if (port === undefined) return undefined;
      const res = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => undefined);
      const text = res ? await res.text() : '';
      return res?.status === 503 && text.includes('CAP_KILL') ? text : undefined;
    },
    30_000,
  );
  assert.match(refused, /uid 65532/);
  await new Promise((r) => setTimeout(r, 2_000));
  const p = await core().readNamespacedPod({ namespace: 'default', name });
  const serverStatus = p.status?.containerStatuses?.find((c) => c.name === 'server');
  assert.ok(!serverStatus?.state?.running, 'the server container never started');
  assert.equal(
    sim().exits.filter((e) => e.pod === name && e.container === 'server').length,
    0,
    'no server process ever ran',
  );
  await core().deleteNamespacedPod({ namespace: 'default', name, gracePeriodSeconds: 0 });
});
