/**
 * The agent against the real API server: acquisition rules, renewals, loss by a
 * manager's delinquent mark (with a signal fence), the server check, release on SIGTERM,
 * and bad env. Each test uses its own Lease name; the agent is the compiled process.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { CoreV1Api, RbacAuthorizationV1Api } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { ANNOTATION_DELINQUENT, LABEL_SHARE_MANAGER, toWire } from '../../lib/lease-record.ts';
import { useCluster } from '../support/cluster.ts';
import {
  agentEnv,
  cleanup,
  createLease,
  leaseApi,
  NAMESPACE,
  probe,
  readLease,
  spawnAgent,
  until,
} from './agent-harness.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });
after(cleanup);

/** Short timings so the suite is quick; each still leaves room for a noisy machine. */
const FAST = {
  LEASEHOLD_LEASE_DURATION: '4s',
  LEASEHOLD_RENEW_INTERVAL: '1s',
  LEASEHOLD_RENEW_DEADLINE: '2500ms',
  LEASEHOLD_RETRY_PERIOD: '250ms',
  LEASEHOLD_LOG_LEVEL: 'debug',
};

function envFor(lease: string, pod: string, extra: Record<string, string> = {}): Record<string, string> {
  return { ...agentEnv(lease, pod, { ...FAST, ...extra }), KUBECONFIG: cluster().kubeconfigPath };
}

async function httpPortOf(agent: ReturnType<typeof spawnAgent>): Promise<number> {
  return (await agent.waitForLog('agent started')).httpPort as number;
}

describe('agent acquisition', () => {
  it('creates a missing lease, labelled, and reports ready; renewals advance renewTime and keep the holder', async () => {
    const api = leaseApi(cluster());
    const agent = spawnAgent(envFor('create-me', 'pod-create'));
    const port = await httpPortOf(agent);
    const acquired = await agent.waitForLog('lease acquired');
    assert.equal(acquired.how, 'created');
    const first = await until('lease created', () => readLease(api, 'create-me'));
    assert.equal(first.holder, 'pod-create');
    assert.equal(first.holderNode, 'node-a');
    assert.equal(first.wire.metadata?.labels?.[LABEL_SHARE_MANAGER], 'create-me');
    assert.equal(first.durationSeconds, 4);
    assert.equal((await probe(port, '/readyz')).status, 200);
    assert.equal((await probe(port, '/healthz')).status, 200);

    await new Promise((r) => setTimeout(r, 3_200));
    const later = await readLease(api, 'create-me');
    assert.equal(later?.holder, 'pod-create');
    assert.equal(later?.transitions, first.transitions);
    assert.ok((later?.renewTime?.getTime() ?? 0) > (first.renewTime?.getTime() ?? 0), 'renewTime advanced');
    const renewals = agent.lines.filter((l) => l.msg === 'lease renewed').length;
    assert.ok(renewals >= 2 && renewals <= 4, `expected about 3 renewals in 3.2 s at R=1s, saw ${renewals}`);
    const infoLines = agent.lines.filter((l) => l.level === 'info' && l.msg === 'lease renewed');
    assert.equal(infoLines.length, 0, 'no info line per renewal');
    const metrics = (await probe(port, '/metrics')).text;
    assert.match(metrics, /leasehold_agent_renewals_total [1-9]/);
    assert.match(metrics, /leasehold_agent_lease_held 1/);
    assert.match(metrics, /leasehold_agent_renew_duration_seconds_bucket/);
    assert.match(
      metrics,
      /leasehold_agent_seconds_since_last_renewal 0?\.\d+|leasehold_agent_seconds_since_last_renewal 1\.\d+/,
    );
  });

  it('acquires a free lease and counts a change of holder', async () => {
    const api = leaseApi(cluster());
    await createLease(api, 'free-one', { holder: '', transitions: 5 });
    const agent = spawnAgent(envFor('free-one', 'pod-free'));
    assert.equal((await agent.waitForLog('lease acquired')).how, 'free');
    const lease = await readLease(api, 'free-one');
    assert.equal(lease?.holder, 'pod-free');
    assert.equal(lease?.transitions, 6);
  });

  it('takes over a delinquent lease at once and clears the mark', async () => {
    const api = leaseApi(cluster());
    await createLease(api, 'delinquent-one', {
      holder: 'dead-pod',
      transitions: 2,
      annotations: { [ANNOTATION_DELINQUENT]: new Date().toISOString() },
    });
    const spawnedAt = performance.now();
    const agent = spawnAgent(envFor('delinquent-one', 'pod-heir'));
    const acquired = await agent.waitForLog('lease acquired');
    assert.equal(acquired.how, 'delinquent');
    assert.ok(acquired.atMs - spawnedAt < 3_000, `took ${Math.round(acquired.atMs - spawnedAt)} ms`);
    const lease = await readLease(api, 'delinquent-one');
    assert.equal(lease?.holder, 'pod-heir');
    assert.equal(lease?.transitions, 3);
    assert.equal(lease?.delinquentSince, undefined);
  });

  it('refuses a lease whose holder keeps renewing, and gives up after LEASEHOLD_ACQUIRE_TIMEOUT with exit 3', async () => {
    const api = leaseApi(cluster());
    let lease = await createLease(api, 'alive-one', { holder: 'live-pod', durationSeconds: 4 });
    const renewing = setInterval(() => {
      lease = { ...lease, renewTime: new Date() };
      api
        .replaceNamespacedLease({ namespace: 'default', name: 'alive-one', body: toWire(lease) })
        .then((wire) => {
          lease = { ...lease, resourceVersion: wire.metadata?.resourceVersion ?? '' };
        })
        .catch(() => {});
    }, 1_000);
    try {
      const agent = spawnAgent(envFor('alive-one', 'pod-patient', { LEASEHOLD_ACQUIRE_TIMEOUT: '9s' }));
      const port = await httpPortOf(agent);
      await agent.waitForLog('lease held by another pod; waiting until it is free, delinquent or silent');
      assert.equal((await probe(port, '/readyz')).status, 503);
      const exit = await agent.exited;
      assert.equal(exit.code, 3);
      assert.ok(!agent.lines.some((l) => l.msg === 'lease acquired'));
      assert.equal((await readLease(api, 'alive-one'))?.holder, 'live-pod');
    } finally {
      clearInterval(renewing);
    }
  });

  it("a restarted agent that finds another holder stops its pod's server at once if that server answers its check (exit 1), and only then", async () => {
    const api = leaseApi(cluster());
    let lease = await createLease(api, 'held-elsewhere', { holder: 'other-pod', durationSeconds: 4 });
    const renewing = setInterval(() => {
      lease = { ...lease, renewTime: new Date() };
      api
        .replaceNamespacedLease({ namespace: 'default', name: 'held-elsewhere', body: toWire(lease) })
        .then((wire) => {
          lease = { ...lease, resourceVersion: wire.metadata?.resourceVersion ?? '' };
        })
        .catch(() => {});
    }, 1_000);
    const targetName = `lhrs-${process.pid}`;
    const target = spawn('bash', ['-c', `exec -a ${targetName} sleep 300`], { stdio: 'ignore' });
    const targetExit = new Promise<NodeJS.Signals | null>((resolve) =>
      target.once('exit', (_code, signal) => resolve(signal)),
    );
    after(() => target.kill('SIGKILL'));
    // The server's port: closed first (a server waiting at its own lease gate, as the
    // shipped NFS server's entrypoint does in every fresh pod), then answering.
    const server = createServer((socket) => socket.end());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const fenceEnv = {
      LEASEHOLD_FENCE_ACTION: 'signal',
      LEASEHOLD_FENCE_PROCESS: targetName,
      LEASEHOLD_SERVER_CHECK: `tcp://127.0.0.1:${port}`,
      LEASEHOLD_SERVER_CHECK_TIMEOUT: '500ms',
    };
    try {
      const waiting = spawnAgent(
        envFor('held-elsewhere', 'pod-restarted', { ...fenceEnv, LEASEHOLD_ACQUIRE_TIMEOUT: '3s' }),
      );
      await waiting.waitForLog('lease held by another pod; waiting until it is free, delinquent or silent');
      assert.equal(
        (await waiting.exited).code,
        3,
        'timed out waiting: a server that does not answer is left alone',
      );
      assert.ok(!waiting.lines.some((l) => String(l.msg).startsWith('fenced')));
      assert.equal(target.exitCode, null, 'the waiting server still runs');
      assert.equal(target.signalCode, null);

      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
      const spawnedAt = performance.now();
      const agent = spawnAgent(envFor('held-elsewhere', 'pod-restarted', fenceEnv));
      const exit = await agent.exited;
      assert.equal(exit.code, 1, 'exit 1 (fenced)');
      assert.ok(
        exit.atMs - spawnedAt < 10_000,
        `fenced ${Math.round(exit.atMs - spawnedAt)} ms after its start`,
      );
      const fenced = agent.lines.find(
        (l) =>
          l.msg === 'fenced at start: a server of this pod was running while another pod holds the lease',
      );
      assert.equal(fenced?.holder, 'other-pod');
      assert.equal((fenced?.fence as { kind?: string })?.kind, 'stopped');
      assert.equal(await targetExit, 'SIGTERM');
      assert.equal((await readLease(api, 'held-elsewhere'))?.holder, 'other-pod', 'the lease untouched');
    } finally {
      clearInterval(renewing);
      server.close();
    }
  });

  it('takes over a lease unchanged for the lease duration by its own observation', async () => {
    const api = leaseApi(cluster());
    // The ghost's renewTime is "now": only the agent's own observation can show it is dead.
    await createLease(api, 'silent-one', { holder: 'ghost-pod', durationSeconds: 4, transitions: 1 });
    const spawnedAt = performance.now();
    const agent = spawnAgent(envFor('silent-one', 'pod-successor'));
    const acquired = await agent.waitForLog('lease acquired', 15_000);
    const tookMs = acquired.atMs - spawnedAt;
    assert.equal(acquired.how, 'expired');
    assert.ok(tookMs >= 4_000, `took over after ${Math.round(tookMs)} ms, before D = 4 s`);
    assert.ok(tookMs < 4_000 + 3_000, `took over after ${Math.round(tookMs)} ms`);
    const lease = await readLease(api, 'silent-one');
    assert.equal(lease?.holder, 'pod-successor');
    assert.equal(lease?.transitions, 2);
  });

  it("with LEASEHOLD_TAKE_EXPIRED=false (what the manager sets under require-node-down) never takes a silent holder; the failover's mark hands it on", async () => {
    const api = leaseApi(cluster());
    await createLease(api, 'gated-one', { holder: 'frozen-pod', durationSeconds: 4, transitions: 1 });
    const agent = spawnAgent({ ...envFor('gated-one', 'pod-waiting'), LEASEHOLD_TAKE_EXPIRED: 'false' });
    const waiting = await agent.waitForLog(
      'lease held by another pod; waiting until it is free or delinquent (a silent holder is left to the failover)',
    );
    assert.equal(waiting.takeExpired, false);
    await sleep(3 * 4_000); // three times D of silence
    assert.equal((await readLease(api, 'gated-one'))?.holder, 'frozen-pod', 'not taken by expiry');
    assert.equal(
      agent.lines.some((l) => l.msg === 'lease acquired'),
      false,
    );
    // The manager's failover marks it (after its storage-fencing gate): taken at once.
    const current = await api.readNamespacedLease({ namespace: NAMESPACE, name: 'gated-one' });
    await api.replaceNamespacedLease({
      namespace: NAMESPACE,
      name: 'gated-one',
      body: {
        ...current,
        metadata: {
          ...current.metadata,
          annotations: {
            ...current.metadata?.annotations,
            [ANNOTATION_DELINQUENT]: new Date().toISOString(),
          },
        },
      },
    });
    assert.equal((await agent.waitForLog('lease acquired')).how, 'delinquent');
  });

  it('resumes its own lease after a restart in place', async () => {
    const api = leaseApi(cluster());
    await createLease(api, 'own-one', { holder: 'pod-same', transitions: 4 });
    const agent = spawnAgent(envFor('own-one', 'pod-same'));
    assert.equal((await agent.waitForLog('lease acquired')).how, 'self');
    assert.equal((await readLease(api, 'own-one'))?.transitions, 4);
  });
});

describe('agent loss, fencing and release', () => {
  it('fences by signal within one renew interval of a manager-style delinquent CAS write', async (t) => {
    const api = leaseApi(cluster());
    // NB: unique in its first 15 characters, the part a comm match compares: the old
    // `leasehold-fence-target-PID` matched every dev/fuse `leasehold-fencefs` (comm
    // `leasehold-fence`) of a real-node test running beside it, and SIGKILLed them.
    const targetName = `lhft-${process.pid}`;
    const target = spawn('bash', ['-c', `exec -a ${targetName} sleep 300`], { stdio: 'ignore' });
    const targetExit = new Promise<{ signal: NodeJS.Signals | null; atMs: number }>((resolve) =>
      target.once('exit', (_code, signal) => resolve({ signal, atMs: performance.now() })),
    );
    after(() => target.kill('SIGKILL'));
    const agent = spawnAgent(
      envFor('marked-one', 'pod-doomed', {
        LEASEHOLD_FENCE_ACTION: 'signal',
        LEASEHOLD_FENCE_PROCESS: targetName,
        // The longest grace D - T (1.5 s) allows, so "no SIGKILL" is not a timing bound on
        // a loaded machine. (Two CI runs' SIGKILLs blamed on load were the name clash above.)
        LEASEHOLD_FENCE_TIMEOUT: '1400ms',
        LEASEHOLD_FENCE_GRACE: '1300ms',
      }),
    );
    await agent.waitForLog('lease acquired');
    await agent.waitForLog('lease renewed');

    const held = await readLease(api, 'marked-one');
    assert.ok(held);
    const markedAt = performance.now();
    await api.replaceNamespacedLease({
      namespace: 'default',
      name: 'marked-one',
      body: toWire({ ...held, delinquentSince: new Date().toISOString(), failoverBy: 'manager-x' }),
    });
    const exit = await agent.exited;
    const fenced = agent.lines.find((l) => l.msg === 'fenced: readiness dropped, fence action done, exiting');
    assert.equal(exit.code, 1);
    assert.equal((fenced?.detail as { reason?: string })?.reason, 'delinquent');
    assert.ok(
      exit.atMs - markedAt < 1_000 + 1_500, // R, plus slack for a loaded 2-core machine
      `fenced ${Math.round(exit.atMs - markedAt)} ms after the mark (R = 1 s)`,
    );
    const signalled = await targetExit;
    assert.equal(signalled.signal, 'SIGTERM');
    assert.ok(signalled.atMs <= exit.atMs + 50, 'the fence signal went out before the agent exited');
    const fence = fenced?.fence as { kind?: string; killed?: number[] };
    assert.equal(fence?.kind, 'stopped', 'the target was verified gone');
    assert.deepEqual(
      (fenced?.fence as { pids?: number[] })?.pids,
      [target.pid],
      'the target and nothing else',
    );
    assert.deepEqual(fence?.killed, [], 'SIGTERM sufficed: no SIGKILL');
    assert.ok(
      (fenced?.fenceMs as number) < 1_300,
      `signal fence took ${String(fenced?.fenceMs)} ms (within the grace)`,
    );
    t.diagnostic(
      `fenced ${Math.round(exit.atMs - markedAt)} ms after the mark; signal fence took ${String(fenced?.fenceMs)} ms`,
    );
  });

  it('fences when the server check fails N times in a row', async () => {
    const server = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as { port: number }).port;
    const agent = spawnAgent(
      envFor('checked-one', 'pod-checked', {
        LEASEHOLD_SERVER_CHECK: `tcp://127.0.0.1:${port}`,
        LEASEHOLD_SERVER_CHECK_TIMEOUT: '500ms',
        LEASEHOLD_SERVER_CHECK_FAILURES: '2',
      }),
    );
    await agent.waitForLog('server check passed for the first time; failures count from now');
    const closedAt = performance.now();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const exit = await agent.exited;
    assert.equal(exit.code, 1);
    const fenced = agent.lines.find((l) => l.msg === 'fenced: readiness dropped, fence action done, exiting');
    assert.equal(fenced?.reason, 'server-check-failed');
    assert.ok(
      exit.atMs - closedAt < 2 * 1_000 + 1_500,
      `fenced ${Math.round(exit.atMs - closedAt)} ms after the server died`,
    );
  });

  it('releases the lease on SIGTERM within 1 s and exits 0, keeping transitions', async (t) => {
    const api = leaseApi(cluster());
    const agent = spawnAgent(envFor('released-one', 'pod-leaving'));
    await agent.waitForLog('lease acquired');
    await agent.waitForLog('lease renewed');
    const before = await readLease(api, 'released-one');
    const sentAt = performance.now();
    agent.child.kill('SIGTERM');
    const free = await until('lease free', async () => {
      const lease = await readLease(api, 'released-one');
      return lease?.holder === '' ? lease : undefined;
    });
    const freeAfterMs = performance.now() - sentAt;
    const exit = await agent.exited;
    assert.equal(exit.code, 0);
    assert.ok(freeAfterMs < 1_000, `lease free ${Math.round(freeAfterMs)} ms after SIGTERM`);
    t.diagnostic(`lease free ${Math.round(freeAfterMs)} ms after SIGTERM (as seen by polling every 50 ms)`);
    assert.equal(free.transitions, before?.transitions);
    assert.ok(agent.lines.some((l) => l.msg === 'lease released'));
  });

  it('exits 2 with a message naming the variable, value and rule on bad env', async () => {
    const agent = spawnAgent({
      ...agentEnv('bad-one', 'pod-bad', { LEASEHOLD_RENEW_INTERVAL: '5s' }),
      KUBECONFIG: cluster().kubeconfigPath,
    });
    const exit = await agent.exited;
    assert.equal(exit.code, 2);
    assert.match(
      agent.stderr(),
      /LEASEHOLD_RENEW_DEADLINE=4s must be longer than LEASEHOLD_RENEW_INTERVAL=5s/,
    );
    assert.match(agent.stderr(), /T > R/);
  });
});

describe('agent API access', () => {
  it('works with a service-account token limited to get/create/update on leases (the RBAC the chart needs)', async () => {
    const c = cluster();
    const core = c.kubeConfig.makeApiClient(CoreV1Api);
    const rbac = c.kubeConfig.makeApiClient(RbacAuthorizationV1Api);
    const namespace = 'default';
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'leasehold-agent' } } });
    await rbac.createNamespacedRole({
      namespace,
      body: {
        metadata: { name: 'leasehold-agent' },
        rules: [
          { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'create', 'update'] },
        ],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: 'leasehold-agent' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'leasehold-agent' },
        subjects: [{ kind: 'ServiceAccount', name: 'leasehold-agent', namespace }],
      },
    });
    const token = await core.createNamespacedServiceAccountToken({
      namespace,
      name: 'leasehold-agent',
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    });
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-agent-token-'));
    after(() => rm(dir, { recursive: true, force: true }));
    const kubeconfigPath = join(dir, 'kubeconfig.json');
    await c.writeTokenKubeconfig(kubeconfigPath, token.status?.token ?? '');
    const agent = spawnAgent({ ...envFor('token-one', 'pod-token'), KUBECONFIG: kubeconfigPath });
    assert.match(String((await agent.waitForLog('agent started')).api), /^KUBECONFIG=/);
    await agent.waitForLog('lease acquired');
    await agent.waitForLog('lease renewed');
    agent.child.kill('SIGTERM');
    assert.equal((await agent.exited).code, 0);
    assert.equal((await readLease(leaseApi(c), 'token-one'))?.holder, '');
  });

  it('reads a YAML kubeconfig (through client-node, loaded only then)', async () => {
    const c = cluster();
    const admin = JSON.parse(await readFile(c.kubeconfigPath, 'utf8')) as {
      clusters: Array<{ cluster: { server: string; 'certificate-authority': string } }>;
      users: Array<{ user: { 'client-certificate': string; 'client-key': string } }>;
    };
    const cl = admin.clusters[0]?.cluster;
    const user = admin.users[0]?.user;
    assert.ok(cl && user);
    const yaml = [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: local',
      '  cluster:',
      `    server: ${cl.server}`,
      `    certificate-authority: ${cl['certificate-authority']}`,
      'users:',
      '- name: admin',
      '  user:',
      `    client-certificate: ${user['client-certificate']}`,
      `    client-key: ${user['client-key']}`,
      'contexts:',
      '- name: local',
      '  context: {cluster: local, user: admin}',
      'current-context: local',
      '',
    ].join('\n');
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-agent-yaml-'));
    after(() => rm(dir, { recursive: true, force: true }));
    const kubeconfigPath = join(dir, 'kubeconfig.yaml');
    await writeFile(kubeconfigPath, yaml);
    const agent = spawnAgent({ ...envFor('yaml-one', 'pod-yaml'), KUBECONFIG: kubeconfigPath });
    assert.match(String((await agent.waitForLog('agent started')).api), /via client-node/);
    await agent.waitForLog('lease renewed');
    assert.equal((await readLease(leaseApi(c), 'yaml-one'))?.holder, 'pod-yaml');
  });
});
