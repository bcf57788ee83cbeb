/**
 * Containers on a simulated node run with the users, groups and capabilities a real
 * node (kubelet + containerd 2.x + runc) gives them, read back from the kernel
 * (/proc/<hostPid>/status) for several securityContexts of the agent image
 * (USER 65532:65532) and the share-server image (root); the files they need are
 * usable by their user (the agent as 65532 reads its token kubeconfig and holds its
 * lease; a share server as uid 1000 writes its emptyDir). Then the kernel's own
 * signal permission, through the very wrapper the kubelet uses (PodSandbox.run, a
 * marked test seam): EPERM exactly where a real node gives EPERM; and the real agent
 * sees the credentials a real node gives it: at its image's uid 65532 (even with
 * `add: [KILL]`) its preflight finds no CAP_KILL and it never acquires, so the server
 * never starts; as uid 0 with only CAP_KILL it acquires and its fence stops the server.
 */

import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { V1Container, V1Pod, V1PodSecurityContext } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { simulatorCapabilities } from '../../dev/sim/kubelet/pod-prepare.ts';
import { containerNodePath } from '../../dev/sim/runtime/container-files.ts';
import type { ContainerIdentity } from '../../dev/sim/runtime/container-identity.ts';
import { resolveLaunch } from '../../dev/sim/runtime/container-launch.ts';
import { PodSandbox } from '../../dev/sim/runtime/pod-sandbox.ts';
import { PROJECT_IMAGE, SHARE_SERVER_IMAGE, type Sim } from '../../dev/sim/sim.ts';
import { k8s } from '../../lib/kube-client.ts';
import { ANNOTATION_DELINQUENT } from '../../lib/lease-record.ts';
import { eventually } from '../support/cluster.ts';
import { createShareAgentAccount, startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim({ nodes: ['sim-u'] });
    await createShareAgentAccount(running.cluster.kubeConfig);
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const sim = () => (running as { sim: Sim }).sim;
const core = () => (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);

// containerd's default set (pkg/oci/spec.go defaultUnixCaps), as the kernel shows it.
const DEFAULT_MASK = '00000000a80425fb';
const KILL_MASK = '0000000000000020';
const NONE = '0000000000000000';

interface ProcStatus {
  uid: string;
  gid: string;
  groups: string;
  capEff: string;
  capPrm: string;
  capBnd: string;
  capInh: string;
  capAmb: string;
  noNewPrivs: string;
}

function procStatus(pid: number): ProcStatus {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(text)?.[1]?.trim() ?? '';
  return {
    uid: field('Uid'),
    gid: field('Gid'),
    groups: field('Groups'),
    capEff: field('CapEff'),
    capPrm: field('CapPrm'),
    capBnd: field('CapBnd'),
    capInh: field('CapInh'),
    capAmb: field('CapAmb'),
    noNewPrivs: field('NoNewPrivs'),
  };
}

function agentContainer(securityContext?: V1Container['securityContext']): V1Container {
  const field = (fieldPath: string) => ({ valueFrom: { fieldRef: { fieldPath } } });
  return {
    name: 'agent',
    image: `${PROJECT_IMAGE}:dev`,
    args: ['agent'],
    env: [
      { name: 'LEASEHOLD_LEASE_NAMESPACE', ...field('metadata.namespace') },
      { name: 'LEASEHOLD_LEASE_NAME', ...field('metadata.name') },
      { name: 'LEASEHOLD_POD_NAME', ...field('metadata.name') },
      { name: 'LEASEHOLD_NODE_NAME', ...field('spec.nodeName') },
      { name: 'LEASEHOLD_HTTP_PORT', value: '8081' },
      // Holds a lease without fencing: its preflight would refuse a fence it cannot do.
      { name: 'LEASEHOLD_FENCE_ACTION', value: 'none' },
    ],
    ports: [{ containerPort: 8081 }],
    readinessProbe: { httpGet: { path: '/readyz', port: 8081 }, periodSeconds: 1 },
    ...(securityContext ? { securityContext } : {}),
  };
}

function serverContainer(securityContext?: V1Container['securityContext']): V1Container {
  return {
    name: 'server',
    image: `${SHARE_SERVER_IMAGE}:dev`,
    args: ['--dir=/data', '--port=8080'],
    ports: [{ containerPort: 8080 }],
    readinessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 1 },
    volumeMounts: [{ name: 'data', mountPath: '/data' }],
    ...(securityContext ? { securityContext } : {}),
  };
}

function pod(name: string, container: V1Container, securityContext?: V1PodSecurityContext): V1Pod {
  return {
    metadata: { name, namespace: 'default' },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': 'sim-u' },
      serviceAccountName: 'share-agent',
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 2,
      containers: [container],
      volumes: [{ name: 'data', emptyDir: {} }],
      ...(securityContext ? { securityContext } : {}),
    },
  };
}

/** Creates the pod, waits until it is Ready, returns its container's host PID. */
async function readyPod(body: V1Pod): Promise<{ pod: V1Pod; pid: number }> {
  const name = body.metadata?.name ?? '';
  await core().createNamespacedPod({ namespace: 'default', body });
  const ready = await eventually(
    `${name} Ready`,
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name });
      return p.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True' ? p : undefined;
    },
    60_000,
  );
  const worker = sim()
    .node('sim-u')
    .pods()
    .find((w) => w.key === `default/${name}`);
  const pid = worker?.view.main[0]?.hostPid;
  assert.ok(pid, `${name}: the container's host pid is known`);
  return { pod: ready, pid };
}

/** The host pid the sim reports is node itself (setpriv exec'd into it), not a wrapper. */
function assertContainerProcess(pid: number, comm: string): void {
  assert.equal(readlinkSync(`/proc/${pid}/exe`), join(sim().root, 'image', 'node'));
  assert.equal(readFileSync(`/proc/${pid}/comm`, 'utf8').trim(), comm);
  const ppid = Number(/^PPid:\s*(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  assert.equal(readFileSync(`/proc/${ppid}/comm`, 'utf8').trim(), 'nsenter', 'its parent is nsenter');
}

test('the agent image: uid 65532 without effective caps; restricted: no bounding set and no_new_privs; both read their token', async (t) => {
  const plain = await readyPod(pod('agent-plain', agentContainer()));
  assertContainerProcess(plain.pid, 'MainThread'); // node names its main thread
  const s = procStatus(plain.pid);
  t.diagnostic(`agent-plain: ${JSON.stringify(s)}`);
  assert.equal(s.uid, '65532\t65532\t65532\t65532');
  assert.equal(s.gid, '65532\t65532\t65532\t65532');
  assert.equal(s.groups, '65532');
  assert.equal(s.capBnd, DEFAULT_MASK);
  assert.equal(s.capEff, NONE, 'a non-root uid keeps no capability across execve');
  assert.equal(s.capPrm, NONE);
  assert.equal(s.noNewPrivs, '0');
  // Ready = /readyz = the lease is held: the agent, as 65532, read the token kubeconfig.
  const plainConfig = statSync(join(sim().root, 'pods', plain.pod.metadata?.uid ?? '', 'kubeconfig'));
  assert.deepEqual([plainConfig.uid, plainConfig.mode & 0o777], [0, 0o644], 'no fsUser: root, 0644');

  const restricted = await readyPod(
    pod(
      'agent-restricted',
      agentContainer({
        runAsNonRoot: true,
        runAsUser: 65532,
        runAsGroup: 65532,
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
        seccompProfile: { type: 'RuntimeDefault' },
      }),
    ),
  );
  const r = procStatus(restricted.pid);
  t.diagnostic(`agent-restricted: ${JSON.stringify(r)}`);
  assert.equal(r.uid, '65532\t65532\t65532\t65532');
  assert.equal(r.capBnd, NONE);
  assert.equal(r.capEff, NONE);
  assert.equal(r.noNewPrivs, '1');
  const restrictedConfig = statSync(
    join(sim().root, 'pods', restricted.pod.metadata?.uid ?? '', 'kubeconfig'),
  );
  assert.deepEqual(
    [restrictedConfig.uid, restrictedConfig.mode & 0o777],
    [65532, 0o600],
    'the one runAsUser of the pod owns its token, 0600',
  );

  // add: [KILL] for a non-root container: in the bounding set, never effective.
  const kill = await readyPod(
    pod('agent-add-kill', agentContainer({ capabilities: { drop: ['ALL'], add: ['KILL'] } })),
  );
  const k = procStatus(kill.pid);
  assert.equal(k.capBnd, KILL_MASK);
  assert.equal(k.capEff, NONE, 'kubernetes#56374: no ambient caps, so execve clears it');
});

test('the share-server image: root with the default set; drop ALL + add KILL; uid 1000 with groups; privileged', async (t) => {
  const plain = await readyPod(pod('server-plain', serverContainer()));
  assertContainerProcess(plain.pid, 'share-server');
  const s = procStatus(plain.pid);
  t.diagnostic(`server-plain: ${JSON.stringify(s)}`);
  assert.equal(s.uid, '0\t0\t0\t0');
  assert.equal(s.groups, '0');
  assert.equal(s.capEff, DEFAULT_MASK);
  assert.equal(s.capBnd, DEFAULT_MASK);
  assert.equal(s.capInh, NONE);
  assert.equal(s.capAmb, NONE);

  const kill = await readyPod(
    pod('server-kill', serverContainer({ capabilities: { drop: ['ALL'], add: ['KILL'] } })),
  );
  const k = procStatus(kill.pid);
  assert.equal(k.capEff, KILL_MASK);
  assert.equal(k.capBnd, KILL_MASK);

  // CAP_KILL with its prefix: containerd makes it CAP_CAP_KILL, runc ignores it.
  const prefixed = await readyPod(
    pod('server-prefixed', serverContainer({ capabilities: { drop: ['ALL'], add: ['CAP_KILL'] } })),
  );
  assert.equal(procStatus(prefixed.pid).capEff, NONE);

  const stranger = await readyPod(
    pod('server-1000', serverContainer({ allowPrivilegeEscalation: false }), {
      runAsUser: 1000,
      fsGroup: 2000,
      supplementalGroups: [3000],
    }),
  );
  const u = procStatus(stranger.pid);
  t.diagnostic(`server-1000: ${JSON.stringify(u)}`);
  assert.equal(u.uid, '1000\t1000\t1000\t1000');
  assert.equal(u.gid, '0\t0\t0\t0', 'a uid without a passwd entry in the image gets gid 0');
  assert.equal(u.groups, '0 2000 3000');
  assert.equal(u.capEff, NONE);
  assert.equal(u.noNewPrivs, '1');
  // Ready = serving: as uid 1000 it wrote its records into the emptyDir (0777, group fsGroup).
  const dir = statSync(join(sim().root, 'pods', stranger.pod.metadata?.uid ?? '', 'volumes', 'data'));
  assert.deepEqual([dir.gid, dir.mode & 0o7777], [2000, 0o2777]);
  const records = statSync(
    join(sim().root, 'pods', stranger.pod.metadata?.uid ?? '', 'volumes', 'data', 'records.jsonl'),
  );
  assert.deepEqual([records.uid, records.gid], [1000, 2000], 'written by uid 1000, setgid dir group');

  const privileged = await readyPod(
    pod('server-privileged', serverContainer({ privileged: true, capabilities: { drop: ['ALL'] } })),
  );
  const own = /^CapEff:\s*(\S+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))?.[1];
  assert.equal(procStatus(privileged.pid).capEff, own, "privileged: all of the runtime's own caps");
});

test('runAsNonRoot with the root share-server image: CreateContainerConfigError with the kubelet message', async () => {
  await core().createNamespacedPod({
    namespace: 'default',
    body: pod('server-nonroot', serverContainer({ runAsNonRoot: true })),
  });
  const waiting = await eventually(
    'server-nonroot waiting',
    async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name: 'server-nonroot' });
      const w = p.status?.containerStatuses?.[0]?.state?.waiting;
      return w && w.reason !== 'ContainerCreating' ? w : undefined;
    },
    30_000,
  );
  assert.equal(waiting.reason, 'CreateContainerConfigError');
  assert.match(
    waiting.message ?? '',
    /^container has runAsNonRoot and image will run as root \(pod: "server-nonroot_default\(.+\)", container: server\)$/,
  );
  assert.equal(
    sim().exits.some((e) => e.pod === 'server-nonroot'),
    false,
    'no process was started',
  );
});

/** The identity a real node gives `container` (image user + securityContext), via the kubelet's launch. */
function identityFor(container: V1Container): ContainerIdentity {
  const p: V1Pod = {
    metadata: { name: 'probe', namespace: 'default', uid: 'u' },
    spec: { containers: [container] },
  };
  const launch = resolveLaunch(p, container, {
    repoRoot: '/nonexistent',
    nodePath: process.execPath,
    podIP: '10.244.0.1',
    hostIP: '127.0.0.1',
    kubeconfigPath: '/nonexistent',
    ports: new Map(),
    mounts: new Map(),
    basePath: '/usr/bin:/bin',
    hostCaps: simulatorCapabilities(),
    rootfsDir: '/nonexistent',
  });
  assert.equal(launch.kind, 'process', JSON.stringify(launch));
  return (launch as { identity: ContainerIdentity }).identity;
}

test("the kernel's signal permission through the kubelet's own wrapper: EPERM where a real node gives it", async (t) => {
  // NB: the sim's node binary is hard-linked out of /root (0700); here a uid-65532
  // prober needs one it may execute, so it gets the same treatment.
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-sigperm-'));
  const node = containerNodePath(dir);
  const sandbox = await PodSandbox.start('test/signal-permission');
  const env = { PATH: '/usr/bin:/bin' };
  const root = identityFor({ name: 'server', image: `${SHARE_SERVER_IMAGE}:dev` });
  const nonRoot = identityFor({ name: 'agent', image: `${PROJECT_IMAGE}:dev`, args: ['agent'] });
  try {
    const sleeper = (identity: ContainerIdentity, name: string) =>
      sandbox.run(node, ['-e', 'setInterval(() => {}, 1e6)'], env, join(dir, `${name}.log`), identity);
    const rootTarget = sleeper(root, 'root-target');
    const userTarget = sleeper(nonRoot, 'user-target');
    const nsPid = async (proc: ReturnType<typeof sleeper>) => {
      const host = await proc.hostPidKnown;
      assert.ok(host);
      // NSpid: host pid, then the pid inside the pod's namespace (what a container sees).
      const ids = /^NSpid:\s*(.*)$/m.exec(readFileSync(`/proc/${host}/status`, 'utf8'))?.[1]?.split(/\s+/);
      return Number(ids?.at(-1));
    };
    const targets = { root: await nsPid(rootTarget), user: await nsPid(userTarget) };
    await eventually('targets exec`d as their users', async () => {
      const r = procStatus((await rootTarget.hostPidKnown) as number).uid.startsWith('0\t');
      const u = procStatus((await userTarget.hostPidKnown) as number).uid.startsWith('65532\t');
      return r && u ? true : undefined;
    });

    const probe = async (name: string, identity: ContainerIdentity, target: number): Promise<string> => {
      const log = join(dir, `${name}.log`);
      const proc = sandbox.run(
        node,
        [
          '-e',
          'try { process.kill(Number(process.argv[1]), 0); console.log("ok") } catch (e) { console.log(e.code) }',
          String(target),
        ],
        env,
        log,
        identity,
      );
      const exit = await proc.exited;
      assert.equal(exit.code, 0, `${name} ran (${readFileSync(log, 'utf8')})`);
      return readFileSync(log, 'utf8').trim();
    };
    const as = (container: Partial<V1Container>, image = SHARE_SERVER_IMAGE) =>
      identityFor({ name: 'p', image: `${image}:dev`, args: ['agent'], ...container });
    const results = {
      'uid 65532, no caps -> root': await probe('a', nonRoot, targets.root),
      'uid 65532, add KILL -> root': await probe(
        'b',
        as({ securityContext: { capabilities: { add: ['KILL'] } } }, PROJECT_IMAGE),
        targets.root,
      ),
      'uid 0, drop ALL + add KILL -> uid 65532': await probe(
        'c',
        as({ securityContext: { capabilities: { drop: ['ALL'], add: ['KILL'] } } }),
        targets.user,
      ),
      'uid 0, drop ALL -> uid 65532': await probe(
        'd',
        as({ securityContext: { capabilities: { drop: ['ALL'] } } }),
        targets.user,
      ),
      'uid 0, drop ALL -> root (same uid)': await probe(
        'e',
        as({ securityContext: { capabilities: { drop: ['ALL'] } } }),
        targets.root,
      ),
      'uid 65532 -> uid 65532 (same uid)': await probe('f', nonRoot, targets.user),
    };
    t.diagnostic(JSON.stringify(results));
    assert.deepEqual(results, {
      'uid 65532, no caps -> root': 'EPERM',
      'uid 65532, add KILL -> root': 'EPERM',
      'uid 0, drop ALL + add KILL -> uid 65532': 'ok',
      'uid 0, drop ALL -> uid 65532': 'EPERM',
      'uid 0, drop ALL -> root (same uid)': 'ok',
      'uid 65532 -> uid 65532 (same uid)': 'ok',
    });
  } finally {
    await sandbox.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

function fencingPod(name: string, securityContext?: V1Container['securityContext']): V1Pod {
  const agent = agentContainer(securityContext);
  return {
    metadata: { name, namespace: 'default' },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': 'sim-u' },
      serviceAccountName: 'share-agent',
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 2,
      initContainers: [
        {
          ...agent,
          restartPolicy: 'Always',
          readinessProbe: undefined,
          startupProbe: { httpGet: { path: '/readyz', port: 8081 }, periodSeconds: 1, failureThreshold: 600 },
          env: [
            ...(agent.env ?? []).filter((e) => e.name !== 'LEASEHOLD_FENCE_ACTION'),
            { name: 'LEASEHOLD_FENCE_ACTION', value: 'signal' },
            { name: 'LEASEHOLD_FENCE_PROCESS', value: 'share-server' },
          ],
        },
      ],
      containers: [serverContainer()],
      volumes: [{ name: 'data', emptyDir: {} }],
    },
  };
}

test("the real agent at its image's uid 65532, even with add KILL, finds no CAP_KILL and never acquires; the server never starts", async (t) => {
  const cases: Array<[string, V1Container['securityContext']]> = [
    ['fence-plain', undefined],
    ['fence-add-kill', { capabilities: { drop: ['ALL'], add: ['KILL'] } }],
  ];
  for (const [name, sc] of cases) {
    await core().createNamespacedPod({ namespace: 'default', body: fencingPod(name, sc) });
  }
  for (const name of ['fence-plain', 'fence-add-kill']) {
    const pod = await eventually(`${name}: its agent running`, async () => {
      const p = await core().readNamespacedPod({ namespace: 'default', name });
      return p.status?.initContainerStatuses?.[0]?.state?.running ? p : undefined;
    });
    const logPath = join(sim().root, 'pods', pod.metadata?.uid ?? '', 'logs', 'agent.log');
    const line = await eventually(
      `${name}: the agent says it cannot fence`,
      async () =>
        readFileSync(logPath, 'utf8')
          .split('\n')
          .find((l) => l.includes('cannot fence')),
      60_000,
    ).catch((err: Error) => {
      // What the agent said instead is the diagnosis; the timeout alone is not.
      const said = existsSync(logPath) ? readFileSync(logPath, 'utf8').slice(-2000) : '(no log file)';
      throw new Error(`${err.message}; the agent's log ends with:\n${said}`);
    });
    t.diagnostic(`${name}: ${line.slice(0, 260)}`);
    assert.match(line, /needs CAP_KILL, and the agent \(uid 65532\) has effective capabilities 0x0/);
    const latest = await core().readNamespacedPod({ namespace: 'default', name });
    assert.equal(latest.status?.initContainerStatuses?.[0]?.started, false, 'never started: no lease');
    assert.ok(latest.status?.containerStatuses?.[0]?.state?.waiting, 'the server was never started');
    assert.equal(sim().exits.filter((e) => e.pod === name).length, 0);
  }
  const coordination = (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(
    k8s.CoordinationV1Api,
  );
  const leases = await coordination.listNamespacedLease({ namespace: 'default' });
  assert.equal(
    leases.items.some((l) => l.metadata?.name?.startsWith('fence-')),
    false,
    'no lease was acquired',
  );
});

test('the real agent as uid 0 with only CAP_KILL acquires, and its fence stops the root server', async () => {
  const { pod: ready } = await readyPod(
    fencingPod('fence-root-kill', { runAsUser: 0, capabilities: { drop: ['ALL'], add: ['KILL'] } }),
  );
  const coordination = (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(
    k8s.CoordinationV1Api,
  );
  // A manager-style delinquent mark by CAS; a renewal in between (409) means read again.
  await eventually('the lease marked delinquent', async () => {
    const lease = await coordination.readNamespacedLease({ namespace: 'default', name: 'fence-root-kill' });
    lease.metadata = {
      ...lease.metadata,
      annotations: { ...lease.metadata?.annotations, [ANNOTATION_DELINQUENT]: new Date().toISOString() },
    };
    try {
      return await coordination.replaceNamespacedLease({
        namespace: 'default',
        name: 'fence-root-kill',
        body: lease,
      });
    } catch (err) {
      if ((err as { code?: number }).code === 409) return undefined;
      throw err;
    }
  });
  const stopped = await eventually(
    'the server fenced',
    async () => sim().exits.find((e) => e.pod === 'fence-root-kill' && e.container === 'server'),
    20_000,
  );
  assert.equal(stopped.code, 0, "the server stopped on the fence's SIGTERM");
  const windows = sim().servingWindowsIn(
    join(sim().root, 'pods', ready.metadata?.uid ?? '', 'volumes', 'data'),
  );
  assert.match(windows[0]?.reason ?? '', /SIGTERM/);
});
