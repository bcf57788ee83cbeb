/**
 * The share pod's agent on a real node (dev/node: the real kubelet, containerd and runc),
 * for real-node.test.ts, on a node with the project's images imported: pods as the
 * manager builds them (manager/reconciliation/pod-spec.ts buildSharePod: the agent a
 * native sidecar whose startup probe gates the server, the server's liveness backstop on
 * the agent's /readyz, one PID namespace per pod) around the demo record server
 * (dev/share-server, run from the leasehold image as the image's user 65532) on an
 * emptyDir, under a ServiceAccount with the chart's agent Role (get, create, update
 * Leases). What the kernel shows of each agent and what it does:
 *  - at its image's user (uid 65532), plain or with `drop: [ALL], add: [KILL]`: no
 *    effective capability (with add KILL, KILL is in the bounding set only: a non-root
 *    container gets no ambient capabilities, kubernetes#56374), so its preflight says it
 *    cannot fence and it never acquires: its server never starts and its Lease never
 *    exists, although the ServiceAccount may create one (the agents below do);
 *  - as the manager runs it (uid 0, CAP_KILL alone, no_new_privs): it acquires and its
 *    server starts as uid 65532; marked delinquent, its pod fence stops that server of
 *    another user (SIGTERM; the server exits 0), and no process of a neighbour share pod
 *    on the same node;
 *  - the neighbour's agent hung (SIGSTOP) on a healthy node: the kubelet's liveness
 *    backstop stops its server within seconds, the agent still stopped (not its fence).
 * The pods are deleted at the end (no grace), the account stays (the cluster is the
 * test file's).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  CoordinationV1Api,
  CoreV1Api,
  RbacAuthorizationV1Api,
  type V1Pod,
  type V1SecurityContext,
} from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import type { LocalImage } from '../../dev/image/images.ts';
import type { RealNode } from '../../dev/node/node.ts';
import { monotonicMs } from '../../lib/clock.ts';
import { ANNOTATION_DELINQUENT } from '../../lib/lease-record.ts';
import { buildSharePod } from '../../manager/share-model/pod-spec.ts';
import { eventually } from '../support/cluster.ts';
import { capMask, containerLog, podProcess } from './real-node-images.ts';

const NS = 'default';
const ACCOUNT = 'share-agent';
/** The chart's default timings: D 6 s, R 2 s, T 4 s (so the backstop fails after D - T = 2 probes). */
const TIMINGS = { leaseDurationMs: 6000, renewIntervalMs: 2000, renewDeadlineMs: 4000, retryPeriodMs: 500 };
const AGENT_CMD = '/nodejs/bin/node dist/bin/leasehold.js agent';
const SERVER_CMD = '/nodejs/bin/node dist/dev/share-server/main.js';
/** How the server shows in /proc: it sets its process title (dev/share-server/main.ts). */
const SERVER_TITLE = 'share-server';
const FENCED = 'fenced: readiness dropped, fence action done, exiting';
/** Two probes 1 s apart, each timing out after 1 s, the probe's 1 s grace: ~4 s; generous for the loaded 2 cores. */
const BACKSTOP_WITHIN_MS = 15_000;

/** The ServiceAccount of the pods below, allowed what the chart's agent Role allows. */
async function createAgentAccount(cluster: Cluster): Promise<void> {
  const kc = cluster.kubeConfig;
  await kc.makeApiClient(CoreV1Api).createNamespacedServiceAccount({
    namespace: NS,
    body: { metadata: { name: ACCOUNT } },
  });
  const rbac = kc.makeApiClient(RbacAuthorizationV1Api);
  await rbac.createNamespacedRole({
    namespace: NS,
    body: {
      metadata: { name: ACCOUNT },
      rules: [
        { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] },
      ],
    },
  });
  await rbac.createNamespacedRoleBinding({
    namespace: NS,
    body: {
      metadata: { name: ACCOUNT },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: ACCOUNT },
      subjects: [{ kind: 'ServiceAccount', name: ACCOUNT, namespace: NS }],
    },
  });
}

/**
 * The manager's pod for a ShareManager `name` serving the record server, with test
 * seams only: a fixed name, pinned to `node`, an emptyDir for the claim, no owner (no
 * ShareManager object exists), and the agent's securityContext when `agentContext` is
 * given (`null`: none, the image's user).
 */
function sharePod(
  name: string,
  node: RealNode,
  image: LocalImage,
  agentContext?: V1SecurityContext | null,
): V1Pod {
  const pod = buildSharePod({
    sm: {
      metadata: { name, namespace: NS, uid: `uid-${name}` },
      spec: {
        volume: { pvc: 'unused', mountPath: '/export' },
        server: {
          image: image.ref,
          command: SERVER_CMD.split(' '),
          args: ['--dir=/export'],
          ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }],
        },
        serviceAccountName: ACCOUNT,
      },
    },
    timings: TIMINGS,
    mountPath: '/export',
    fenceAction: 'pod',
    nfsServerImage: 'unused',
    agentImage: image.ref,
    agentPort: 8081,
    avoid: undefined,
  });
  pod.metadata = { ...pod.metadata, name, generateName: undefined, ownerReferences: [] };
  const spec = pod.spec as NonNullable<V1Pod['spec']>;
  spec.nodeSelector = { 'kubernetes.io/hostname': node.name };
  spec.volumes = [{ name: 'share', emptyDir: {} }];
  spec.terminationGracePeriodSeconds = 5;
  const agent = spec.initContainers?.[0];
  assert.ok(agent?.name === 'agent', 'the agent is the pod’s first init container');
  if (agentContext === null) delete agent.securityContext;
  else if (agentContext) agent.securityContext = agentContext;
  return pod;
}

const core = (cluster: Cluster) => cluster.kubeConfig.makeApiClient(CoreV1Api);

async function readyPod(cluster: Cluster, name: string): Promise<V1Pod> {
  return eventually(
    `${name} Ready (its agent holds the lease, its server runs)`,
    async () => {
      const p = await core(cluster).readNamespacedPod({ namespace: NS, name });
      return p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? p : undefined;
    },
    120_000,
    200,
  );
}

const serverStatus = (pod: V1Pod) => pod.status?.containerStatuses?.find((c) => c.name === 'server');

/** A manager-style delinquent mark on the Lease, by CAS (a renewal in between: read again). */
async function markDelinquent(cluster: Cluster, lease: string): Promise<void> {
  const coordination = cluster.kubeConfig.makeApiClient(CoordinationV1Api);
  await eventually(`the lease ${lease} marked delinquent`, async () => {
    const l = await coordination.readNamespacedLease({ namespace: NS, name: lease });
    l.metadata = {
      ...l.metadata,
      annotations: { ...l.metadata?.annotations, [ANNOTATION_DELINQUENT]: new Date().toISOString() },
    };
    try {
      return await coordination.replaceNamespacedLease({ namespace: NS, name: lease, body: l });
    } catch (err) {
      if ((err as { code?: number }).code === 409) return undefined;
      throw err;
    }
  });
}

const running = (pid: number) => {
  try {
    return !/^State:\s*Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
};

/** The checks of the header on `node` (its containerd has `image`, the leasehold image). */
export async function sharePodAgents(cluster: Cluster, node: RealNode, image: LocalImage): Promise<void> {
  await createAgentAccount(cluster);
  const refusing: Record<string, V1SecurityContext | null> = {
    'agent-image-user': null,
    'agent-image-user-add-kill': { capabilities: { drop: ['ALL'], add: ['KILL'] } },
  };
  const fencing = 'agent-fences';
  const neighbour = 'agent-hangs';
  for (const [name, context] of Object.entries(refusing))
    await core(cluster).createNamespacedPod({ namespace: NS, body: sharePod(name, node, image, context) });
  for (const name of [fencing, neighbour])
    await core(cluster).createNamespacedPod({ namespace: NS, body: sharePod(name, node, image) });
  const uid = async (name: string) =>
    (await core(cluster).readNamespacedPod({ namespace: NS, name })).metadata?.uid ?? '';

  // The agents at the image's user: what the kernel gave them, what they said.
  for (const name of Object.keys(refusing)) {
    const podUid = await uid(name);
    const agent = await eventually(`${name}: its agent process`, async () =>
      podProcess(node, podUid, AGENT_CMD),
    );
    assert.deepEqual(agent.uid, ['65532', '65532', '65532', '65532'], `${name}: the image's user`);
    assert.equal(agent.capEff, 0n, `${name}: no effective capability`);
    if (name === 'agent-image-user-add-kill')
      assert.equal(agent.capBnd, capMask(['KILL']), `${name}: KILL in the bounding set only`);
    else assert.ok((agent.capBnd & capMask(['KILL'])) !== 0n, `${name}: the runtime's default set has KILL`);
    const pod = await core(cluster).readNamespacedPod({ namespace: NS, name });
    const said = await eventually(
      `${name}: the agent says it cannot fence`,
      async () =>
        containerLog(node, pod, 'agent')
          .split('\n')
          .find((l) => l.includes('not acquiring the lease')),
      60_000,
      200,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; its log: ${containerLog(node, pod, 'agent').slice(-2000)}`);
    });
    assert.match(said, /needs CAP_KILL, and the agent \(uid 65532\) has effective capabilities 0x0/);
  }

  // The agents as the manager runs them: both acquire, both servers run as the image's user.
  const [fencingPod, neighbourPod] = await Promise.all([
    readyPod(cluster, fencing),
    readyPod(cluster, neighbour),
  ]);
  const processes = async (pod: V1Pod) => {
    const podUid = pod.metadata?.uid ?? '';
    return {
      agent: await eventually('the agent process', async () => podProcess(node, podUid, AGENT_CMD)),
      server: await eventually('the server process', async () => podProcess(node, podUid, SERVER_TITLE)),
    };
  };
  const fencingProcs = await processes(fencingPod);
  const neighbourProcs = await processes(neighbourPod);
  assert.deepEqual(fencingProcs.agent.uid, ['0', '0', '0', '0'], 'the manager’s agent runs as uid 0');
  assert.equal(fencingProcs.agent.capEff, capMask(['KILL']), 'with CAP_KILL alone');
  assert.equal(fencingProcs.agent.noNewPrivs, '1');
  assert.deepEqual(fencingProcs.server.uid, ['65532', '65532', '65532', '65532'], 'its server: another user');

  // Marked delinquent: the pod fence stops that server, and nothing of the neighbour.
  const markedAt = monotonicMs();
  await markDelinquent(cluster, fencing);
  const stopped = await eventually(
    `${fencing}: its server stopped by the fence`,
    async () => {
      const p = await core(cluster).readNamespacedPod({ namespace: NS, name: fencing });
      return serverStatus(p)?.state?.terminated ? p : undefined;
    },
    30_000,
    200,
  );
  const fencedMs = monotonicMs() - markedAt;
  assert.equal(
    serverStatus(stopped)?.state?.terminated?.exitCode,
    0,
    'the server stopped on the fence’s SIGTERM (a uid-0 agent may signal uid 65532 only by CAP_KILL)',
  );
  assert.ok(
    containerLog(node, stopped, 'agent').includes(FENCED),
    `${fencing}: its agent logged ${JSON.stringify(FENCED)}`,
  );
  assert.ok(
    running(neighbourProcs.server.pid) && running(neighbourProcs.agent.pid),
    `the fence of ${fencing} left ${neighbour}'s processes running`,
  );

  // The neighbour's agent hung: the kubelet's backstop (liveness on /readyz) stops its server.
  const hungAt = monotonicMs();
  process.kill(neighbourProcs.agent.pid, 'SIGSTOP');
  let backstopMs: number;
  try {
    await eventually(
      `${neighbour}: its server stopped by the kubelet's liveness backstop`,
      async () => (running(neighbourProcs.server.pid) ? undefined : true),
      BACKSTOP_WITHIN_MS,
      50,
    );
    backstopMs = monotonicMs() - hungAt;
    assert.match(
      readFileSync(`/proc/${neighbourProcs.agent.pid}/status`, 'utf8'),
      /^State:\s*T/m,
      'the agent was still stopped: the kubelet, not its fence, stopped the server',
    );
  } finally {
    process.kill(neighbourProcs.agent.pid, 'SIGCONT');
  }
  const leases = await cluster.kubeConfig
    .makeApiClient(CoordinationV1Api)
    .listNamespacedLease({ namespace: NS });
  const names = leases.items.map((l) => l.metadata?.name);
  assert.ok(names.includes(fencing) && names.includes(neighbour), `the account may create Leases: ${names}`);
  for (const name of Object.keys(refusing)) {
    assert.ok(!names.includes(name), `${name}: never acquired (no Lease)`);
    const p = await core(cluster).readNamespacedPod({ namespace: NS, name });
    assert.equal(p.status?.initContainerStatuses?.[0]?.started, false, `${name}: its agent never started`);
    assert.ok(serverStatus(p)?.state?.waiting, `${name}: its server never started`);
  }
  console.log(
    `real node: share pods: the fence stopped the server ${Math.round(fencedMs)} ms after the delinquent mark; the backstop ${Math.round(backstopMs)} ms after the agent hung`,
  );
  await Promise.all(
    [...Object.keys(refusing), fencing, neighbour].map((name) =>
      core(cluster).deleteNamespacedPod({ namespace: NS, name, gracePeriodSeconds: 0 }),
    ),
  );
}
