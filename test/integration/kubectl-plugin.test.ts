/**
 * `kubectl leasehold` against a real control plane, as a user runs it: installed by
 * kubectl-plugin/install.sh into a directory of its own (from the dist/ the runner built), run as a process (and once
 * through the real kubectl, which finds it on PATH), with a ServiceAccount token bound
 * to exactly the ClusterRole docs/operations.md documents (applied from the docs' YAML
 * block as written).
 *
 * The objects it reads are the real manager's (dist/manager/main.js, one process, the
 * default `require-node-down` storage policy; the test plays kubelets and agents as
 * manager-harness.ts does, no scheduler, no controller manager):
 *  - apps/vol-a: failed over for real: its holder on node-1 stops renewing, the share
 *    waits for node-down evidence (its claim does not exist, so nothing fences), the
 *    test taints node-1 out-of-service, the manager fails it over, the test runs the
 *    replacement on node-2 and plays its agent: served, with a complete lastFailover;
 *  - apps/vol-b: its holder on node-3 stops renewing: not served, AwaitingNodeDown;
 *  - apps/vol-c: a spec the manager rejects (renew deadline below the renew interval): Error;
 *  - apps/vol-d: its pod never scheduled: Pending.
 * Then: status (direct and through kubectl), timeline, why for each, the bad inputs
 * (unknown share, unknown command, unknown context, an unreachable API server) with
 * their exit codes, and that the identity may not write.
 *
 * Not covered here: the agent's log lines themselves (no kubelet serves pods/log
 * without real nodes: the read goes through RBAC to the API server, which says the pod's
 * node has no kubelet; test/unit/kubectl-plugin-why.test.ts covers the excerpt).
 * Cost: one control plane, about 30 s with the failover.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { freePorts } from '../../dev/net/free-port.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import { type RunResult, repoRoot, runTool } from '../support/tools.ts';
import {
  createNamespace,
  createShareManager,
  FAST_LEASE,
  getShareManager,
  HolderLoop,
  kubectl,
  runningShare,
  runPodOn,
  startManager,
  taintOutOfService,
  useManagerFixture,
  waitForPods,
  waitForReplacement,
} from './manager-harness.ts';

const cluster = useCluster({ scheduler: false, controllerManager: false });
const holders: HolderLoop[] = [];
const NS = 'apps';
const VIEWER_NS = 'leasehold-viewer';

/** The ClusterRole of docs/operations.md, "kubectl leasehold", as written there. */
async function documentedRbac(): Promise<string> {
  const docs = await readFile(join(repoRoot, 'docs/operations.md'), 'utf8');
  const blocks = [...docs.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1] ?? '');
  const rbac = blocks.filter((b) => /kind: ClusterRole\n/.test(b) && /name: leasehold-viewer\n/.test(b));
  assert.equal(rbac.length, 1, 'docs/operations.md has one ClusterRole leasehold-viewer block');
  return rbac[0] ?? '';
}

/** Until the share's failover waits for node-down evidence (its storage cannot fence). */
async function awaitingNodeDown(name: string): Promise<void> {
  await eventually(
    `${name} waiting for node-down evidence`,
    async () => {
      const sm = await getShareManager(cluster().kubeConfig, NS, name);
      const gate = sm.status?.conditions?.find((c) => c.type === 'StorageFencing');
      return gate?.reason === 'AwaitingNodeDown' ? true : undefined;
    },
    20_000,
  );
}

describe('kubectl leasehold, read-only, on the real manager’s objects', () => {
  useManagerFixture(cluster, ['node-1', 'node-2', 'node-3'], holders);
  let dir = '';
  let plugin = '';
  let viewer = '';
  const pods: Record<string, string> = {};
  /** Example outputs, printed once at the end (docs/operations.md shows them). */
  const shown: string[] = [];

  /** The installed executable, as a process, with the viewer's kubeconfig unless `env` says otherwise. */
  async function run(
    args: string[],
    env: Record<string, string> = { KUBECONFIG: viewer },
  ): Promise<RunResult> {
    const result = await runTool(plugin, args, { env, replaceEnv: true });
    shown.push(
      `$ kubectl leasehold ${args.join(' ')}\n${result.stdout}${result.stderr}(exit ${result.code})`,
    );
    return result;
  }

  before(async () => {
    const c = cluster();
    const kc = c.kubeConfig;
    dir = await mkdtemp(join(tmpdir(), 'leasehold-plugin-'));
    // --no-build: the runner compiled dist/; another tsc now could hand a half-written
    // file to a process another test file starts meanwhile.
    const installed = await runTool('bash', [join(repoRoot, 'kubectl-plugin/install.sh'), '--no-build', dir]);
    assert.equal(installed.code, 0, `install.sh failed: ${installed.stderr}`);
    plugin = join(dir, 'kubectl-leasehold');

    // The read-only identity: the documented ClusterRole, bound to a ServiceAccount.
    const applied = await kubectl(c, ['apply', '-f', '-'], await documentedRbac());
    assert.equal(applied.code, 0, applied.stderr);
    await createNamespace(kc, VIEWER_NS);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedServiceAccount({
      namespace: VIEWER_NS,
      body: { metadata: { name: 'viewer' } },
    });
    await kc.makeApiClient(k8s.RbacAuthorizationV1Api).createClusterRoleBinding({
      body: {
        metadata: { name: 'leasehold-viewer' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'leasehold-viewer' },
        subjects: [{ kind: 'ServiceAccount', name: 'viewer', namespace: VIEWER_NS }],
      },
    });
    const token = await core.createNamespacedServiceAccountToken({
      namespace: VIEWER_NS,
      name: 'viewer',
      body: { spec: { audiences: [], expirationSeconds: 3600 } },
    });
    viewer = join(dir, 'viewer.kubeconfig');
    await c.writeTokenKubeconfig(viewer, token.status?.token ?? '');

    // The shares, as the real manager makes and reports them.
    await createNamespace(kc, NS);
    startManager(c, 'm1', { LEASEHOLD_NONFENCING_STORAGE: 'require-node-down' });
    const a = await runningShare(
      kc,
      { namespace: NS, name: 'vol-a', node: 'node-1', lease: FAST_LEASE },
      holders,
    );
    const b = await runningShare(
      kc,
      { namespace: NS, name: 'vol-b', node: 'node-3', lease: FAST_LEASE },
      holders,
    );
    pods.aLost = a.pod.metadata?.name ?? '';
    pods.b = b.pod.metadata?.name ?? '';
    await createShareManager(kc, {
      namespace: NS,
      name: 'vol-c',
      lease: { duration: '6s', renewInterval: '2s', renewDeadline: '1s', retryPeriod: '200ms' },
    });
    await createShareManager(kc, { namespace: NS, name: 'vol-d', lease: FAST_LEASE });
    pods.d = (await waitForPods(kc, NS, 'vol-d', 1))[0]?.metadata?.name ?? '';

    await a.holder.stop(); // node-1 "dies"
    await awaitingNodeDown('vol-a');
    await taintOutOfService(kc, 'node-1'); // the operator's evidence that node-1 is down
    const replacement = await waitForReplacement(kc, NS, 'vol-a', pods.aLost, 20_000);
    pods.aNew = replacement.metadata?.name ?? '';
    await runPodOn(kc, replacement, 'node-2');
    holders.push(new HolderLoop(kc, NS, 'vol-a', pods.aNew, 'node-2', 1000).start());
    await eventually(
      'vol-a Running with a completed lastFailover',
      async () => {
        const sm = await getShareManager(kc, NS, 'vol-a');
        return sm.status?.state === 'Running' && sm.status.lastFailover?.completedAt ? true : undefined;
      },
      20_000,
    );

    await b.holder.stop(); // node-3 "dies"; nobody says it is down
    await awaitingNodeDown('vol-b');
    await eventually('vol-c in Error', async () =>
      (await getShareManager(kc, NS, 'vol-c')).status?.state === 'Error' ? true : undefined,
    );
  });

  after(async () => {
    process.stderr.write(`\nkubectl leasehold, as run by this test:\n\n${shown.join('\n\n')}\n`);
    await rm(dir, { recursive: true, force: true });
  });

  it('status lists every share with its holder, node, phase, conditions and last failover', async () => {
    const { stdout, code, stderr } = await run(['status']);
    assert.equal(code, 0, stderr);
    const lines = stdout.trimEnd().split('\n');
    assert.match(
      lines[0] ?? '',
      /^NAMESPACE\s+NAME\s+CLAIM\s+PHASE\s+SERVED\s+HOLDER\s+NODE\s+CONDITIONS\s+LAST FAILOVER\s+TOOK$/,
    );
    const row = (name: string) =>
      lines.find((l) => l.startsWith(`${NS} `) && l.split(/\s+/)[1] === name) ?? '';
    assert.match(
      row('vol-a'),
      new RegExp(
        `Running\\s+yes\\s+${pods.aNew}\\s+node-2\\s+\\S*StorageFencing=False\\(NodeDown\\)\\S*\\s+\\S+ ago from node-1\\s+\\d+\\.\\d\\d s$`,
      ),
    );
    assert.match(
      row('vol-b'),
      new RegExp(
        // No lastFailover while it waits: the record is written when the failover's steps begin.
        `FailingOver\\s+no\\s+${pods.b}\\s+node-3\\s+\\S*StorageFencing=False\\(AwaitingNodeDown\\)\\S*\\s+-\\s+-$`,
      ),
    );
    assert.match(row('vol-c'), /Error\s+no\s+\(no lease\)\s+-\s+-\s+-\s+-$/);
    assert.match(row('vol-d'), /Pending\s+no\s+\(free\)\s+-\s+\S+\s+-\s+-$/);
    assert.equal(lines.length, 5, stdout);
  });

  it('runs as `kubectl leasehold` through the real kubectl, the plugin found on PATH', async () => {
    const listed = await runTool(cluster().kubectl, ['plugin', 'list'], {
      env: { PATH: `${dir}:/usr/bin:/bin`, HOME: dir },
      replaceEnv: true,
    });
    assert.match(listed.stdout, new RegExp(`${dir}/kubectl-leasehold`));
    const result = await runTool(cluster().kubectl, ['leasehold', 'status', '-n', NS], {
      env: { PATH: `${dir}:/usr/bin:/bin`, HOME: dir, KUBECONFIG: viewer },
      replaceEnv: true,
    });
    shown.push(
      `$ kubectl leasehold status -n ${NS}   (through kubectl)\n${result.stdout}${result.stderr}(exit ${result.code})`,
    );
    assert.equal(result.code, 0, result.stderr);
    for (const name of ['vol-a', 'vol-b', 'vol-c', 'vol-d'])
      assert.match(result.stdout, new RegExp(`^${NS}\\s+${name}\\s`, 'm'));
    const other = await run(['status', '-n', 'default']);
    assert.equal(other.stdout.trim(), 'No ShareManagers in namespace default.');
  });

  it('timeline shows the failover’s recorded steps in order and the events during it', async () => {
    const { stdout, code, stderr } = await run(['timeline', 'vol-a', '--kubeconfig', viewer], {});
    assert.equal(code, 0, stderr);
    const lines = stdout.split('\n');
    assert.match(
      lines[0] ?? '',
      /^Timeline of the failover of apps\/vol-a \(seconds since the stale lease was detected, \S+Z; run by manager m1\):$/,
    );
    const steps = [
      'stale lease detected',
      'lease marked delinquent',
      `pod ${pods.aLost} force-deleted`,
      'volume released on node-1 (handoff done or detached)',
      `replacement ${pods.aNew} created`,
      'new agent acquired the lease',
    ];
    const seconds = steps.map((step, i) => {
      const line = lines[i + 1] ?? '';
      assert.ok(line.includes(step) && line.includes('(status.lastFailover)'), `step ${i + 1}: ${line}`);
      return Number(/^\s+(-?\d+\.\d\d) s /.exec(line)?.[1]);
    });
    assert.equal(seconds[0], 0);
    for (let i = 1; i < seconds.length; i++)
      assert.ok((seconds[i] ?? Number.NaN) >= (seconds[i - 1] ?? Number.NaN), `steps in order: ${seconds}`);
    assert.match(
      stdout,
      new RegExp(
        `^LeaseExpired: pod ${pods.aLost} on node node-1 lost the lease; ${pods.aNew} acquired it \\d+\\.\\d\\d s after the detection$`,
        'm',
      ),
    );
    const events = stdout.slice(stdout.indexOf('Events on apps/vol-a during the failover'));
    for (const reason of ['AwaitingNodeDown', 'NodeDown', 'LeaseExpired', 'FailoverCompleted'])
      assert.match(
        events,
        new RegExp(`^  \\S+Z  \\S+\\s+${reason}\\s`, 'm'),
        `event ${reason} in:\n${events}`,
      );
    const never = await run(['timeline', 'vol-d']);
    assert.equal(never.code, 0);
    assert.match(never.stdout, /^apps\/vol-d has no recorded failover/);
  });

  it('why says plainly when a share is served, and why not when it is not', async () => {
    const a = await run(['why', 'vol-a', '-n', NS]);
    assert.equal(a.code, 0, a.stderr);
    assert.match(
      a.stdout,
      new RegExp(
        `^apps/vol-a is served: pod ${pods.aNew} on node node-2 holds the lease \\(status Running\\)\\.$`,
        'm',
      ),
    );

    const b = await run(['why', 'vol-b']);
    assert.equal(b.code, 0, b.stderr);
    assert.match(
      b.stdout,
      /^apps\/vol-b is NOT served: its failover waits for evidence that node node-3 is down \(StorageFencing=False, AwaitingNodeDown: its storage cannot fence that node\)$/m,
    );
    assert.match(b.stdout, /^ {2}condition +StorageFencing=False \(AwaitingNodeDown\): .*node-3/m);
    assert.match(b.stdout, /^ {2}failover +no step taken yet$/m);
    assert.match(b.stdout, /^ {2}event +\S+Z AwaitingNodeDown on ShareManager vol-b: /m);
    // The log read passed RBAC (pods/log) and reached the API server, which has no kubelet to ask.
    const log = /^ {2}agent log +pod (\S+): not readable: (.*)$/m.exec(b.stdout);
    assert.equal(log?.[1], pods.b, b.stdout);
    assert.doesNotMatch(log?.[2] ?? '', /forbidden|403/i);

    const c = await run(['why', 'vol-c']);
    assert.match(
      c.stdout,
      /^apps\/vol-c is NOT served: its spec is rejected \(status Error\): spec\.lease .*renew/m,
    );
    const d = await run(['why', 'vol-d']);
    assert.match(
      d.stdout,
      new RegExp(`^apps/vol-d is NOT served: its pod ${pods.d} is not scheduled on a node yet$`, 'm'),
    );
    assert.match(
      d.stdout,
      new RegExp(
        `^  agent log +pod ${pods.d}: not readable: it has no node yet, so no container has run$`,
        'm',
      ),
    );
  });

  it('a bad input gets one line naming it and a non-zero exit code', async () => {
    const missing = await run(['why', 'nope']);
    assert.equal(missing.code, 1);
    assert.equal(
      missing.stderr,
      'kubectl leasehold: share "nope": no ShareManager of that name, and none serving a claim of that name, in any namespace\n',
    );
    const unknown = await run(['frobnicate']);
    assert.equal(unknown.code, 2);
    assert.match(
      unknown.stderr,
      /^kubectl leasehold: unknown command "frobnicate": expected one of status, timeline, why\n/,
    );
    const context = await run(['status', '--context', 'elsewhere']);
    assert.equal(context.code, 2);
    assert.match(
      context.stderr,
      /--context elsewhere: no such context in KUBECONFIG=\S+ \(its contexts: leasehold\)/,
    );

    const [closed] = await freePorts(1);
    const nowhere = join(dir, 'nowhere.kubeconfig');
    await cluster().writeTokenKubeconfig(nowhere, 'x', `https://127.0.0.1:${closed}`);
    const t0 = performance.now();
    const unreachable = await run(['status', '--kubeconfig', nowhere], {});
    assert.equal(unreachable.code, 1);
    assert.match(
      unreachable.stderr,
      new RegExp(
        `^kubectl leasehold: cannot reach the API server https://127\\.0\\.0\\.1:${closed} \\(context leasehold\\): list sharemanagers\\.leasehold\\.dev in every namespace failed: .*ECONNREFUSED.*\\n$`,
      ),
    );
    assert.ok(performance.now() - t0 < 10_000, 'a refused connection fails at once');
  });

  it('the documented RBAC is read-only: the same identity may not write', async () => {
    const c = cluster();
    const asViewer = (args: string[]) => runTool(c.kubectl, ['--kubeconfig', viewer, ...args]);
    const patched = await asViewer([
      'patch',
      'sm',
      'vol-a',
      '-n',
      NS,
      '--type',
      'merge',
      '-p',
      '{"spec":{"lease":{"duration":"9s"}}}',
    ]);
    assert.notEqual(patched.code, 0);
    assert.match(patched.stderr, /forbidden/);
    for (const [verb, resource, want] of [
      ['list', 'sharemanagers.leasehold.dev', 'yes'],
      ['get', 'pods/log', 'yes'],
      ['list', 'events', 'yes'],
      ['patch', 'sharemanagers.leasehold.dev/status', 'no'],
      ['update', 'leases.coordination.k8s.io', 'no'],
      ['delete', 'pods', 'no'],
      ['create', 'events', 'no'],
      ['get', 'secrets', 'no'],
    ] as const) {
      const said = await asViewer(['auth', 'can-i', verb, resource, '-A']);
      assert.equal(said.stdout.trim(), want, `can-i ${verb} ${resource}: ${said.stdout}${said.stderr}`);
    }
  });
});
