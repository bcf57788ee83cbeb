/**
 * The ground is real: the local control plane (etcd, kube-apiserver, scheduler,
 * controller-manager) serves Leases with compare-and-swap, watches, MicroTime,
 * ServiceAccount tokens under RBAC, and the node-lifecycle controller.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { eventually, useCluster } from '../support/cluster.ts';

const run = promisify(execFile);
const cluster = useCluster();

function statusOf(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

describe('Lease API on the real API server', () => {
  it('creates, reads, updates with compare-and-swap, watches and deletes a Lease', async () => {
    const kc = cluster().kubeConfig;
    const api = kc.makeApiClient(k8s.CoordinationV1Api);
    const namespace = 'default';
    const events: string[] = [];
    const watch = new k8s.Watch(kc);
    const req = await watch.watch(
      `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`,
      { fieldSelector: 'metadata.name=cas-demo' },
      (type, obj: k8s.V1Lease) => events.push(`${type}:${obj.spec?.holderIdentity ?? ''}`),
      () => {},
    );
    try {
      const renewTime = new k8s.V1MicroTime(Date.UTC(2026, 10, 29, 12, 0, 0, 123));
      const created = await api.createNamespacedLease({
        namespace,
        body: {
          metadata: { name: 'cas-demo' },
          spec: { holderIdentity: 'pod-a', leaseDurationSeconds: 6, renewTime, leaseTransitions: 0 },
        },
      });
      const read = await api.readNamespacedLease({ namespace, name: 'cas-demo' });
      assert.equal(read.spec?.holderIdentity, 'pod-a');
      assert.equal(
        new Date(read.spec?.renewTime as Date).getTime(),
        renewTime.getTime(),
        'MicroTime round-trips',
      );

      const staleVersion = created.metadata?.resourceVersion;
      const updated = await api.replaceNamespacedLease({
        namespace,
        name: 'cas-demo',
        body: { ...read, spec: { ...read.spec, holderIdentity: 'pod-b', leaseTransitions: 1 } },
      });
      assert.notEqual(updated.metadata?.resourceVersion, staleVersion);

      // A write carrying the old resourceVersion loses: 409 Conflict.
      const conflict = await api
        .replaceNamespacedLease({
          namespace,
          name: 'cas-demo',
          body: {
            ...read,
            metadata: { ...read.metadata, resourceVersion: staleVersion },
            spec: { ...read.spec, holderIdentity: 'pod-c' },
          },
        })
        .then(() => 200, statusOf);
      assert.equal(conflict, 409);
      assert.equal(
        (await api.readNamespacedLease({ namespace, name: 'cas-demo' })).spec?.holderIdentity,
        'pod-b',
      );

      await api.deleteNamespacedLease({ namespace, name: 'cas-demo' });
      const gone = await api.readNamespacedLease({ namespace, name: 'cas-demo' }).then(() => 200, statusOf);
      assert.equal(gone, 404);
      await eventually(
        'the watch to deliver all three events',
        async () => (events.length >= 3 ? true : undefined),
        10_000,
      );
      assert.deepEqual(events, ['ADDED:pod-a', 'MODIFIED:pod-b', 'DELETED:pod-b']);
    } finally {
      req.abort();
    }
  });

  it('rejects a MicroTime written with millisecond precision', async () => {
    const c = cluster();
    const manifest = JSON.stringify({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'ms-time', namespace: 'default' },
      spec: { holderIdentity: 'x', renewTime: '2026-11-29T12:00:00.123Z' },
    });
    const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(
        c.kubectl,
        ['--kubeconfig', c.kubeconfigPath, 'create', '-f', '-'],
        (err, _out, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stderr }),
      );
      child.stdin?.end(manifest);
    });
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /renewTime|parsing time|cannot parse/i);
  });

  it('answers /readyz through kubectl with the admin kubeconfig', async () => {
    const c = cluster();
    const { stdout } = await run(c.kubectl, ['--kubeconfig', c.kubeconfigPath, 'get', '--raw', '/readyz']);
    assert.equal(stdout.trim(), 'ok');
  });
});

describe('ServiceAccount tokens and RBAC', () => {
  it('accepts a TokenRequest token and denies what the role does not grant', async () => {
    const c = cluster();
    const core = c.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const rbac = c.kubeConfig.makeApiClient(k8s.RbacAuthorizationV1Api);
    const namespace = 'rbac-check';
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    await core.createNamespacedServiceAccount({ namespace, body: { metadata: { name: 'lease-reader' } } });
    await rbac.createNamespacedRole({
      namespace,
      body: {
        metadata: { name: 'lease-reader' },
        rules: [{ apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['get', 'list'] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace,
      body: {
        metadata: { name: 'lease-reader' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'lease-reader' },
        subjects: [{ kind: 'ServiceAccount', name: 'lease-reader', namespace }],
      },
    });
    const tokenRequest = await core.createNamespacedServiceAccountToken({
      namespace,
      name: 'lease-reader',
      body: { spec: { audiences: [], expirationSeconds: 600 } },
    });
    const token = tokenRequest.status?.token;
    assert.ok(token, 'TokenRequest returns a token');

    const kubeconfigPath = `${c.dir}/lease-reader.kubeconfig`;
    await c.writeTokenKubeconfig(kubeconfigPath, token);
    const kc = new k8s.KubeConfig();
    kc.loadFromFile(kubeconfigPath);
    const asReader = kc.makeApiClient(k8s.CoordinationV1Api);
    const asReaderCore = kc.makeApiClient(k8s.CoreV1Api);

    const leases = await asReader.listNamespacedLease({ namespace });
    assert.deepEqual(leases.items, []);
    const review = await kc.makeApiClient(k8s.AuthenticationV1Api).createSelfSubjectReview({ body: {} });
    assert.equal(review.status?.userInfo?.username, `system:serviceaccount:${namespace}:lease-reader`);

    const denied = await Promise.all([
      asReader
        .createNamespacedLease({ namespace, body: { metadata: { name: 'x' } } })
        .then(() => 200, statusOf),
      asReader.listNamespacedLease({ namespace: 'default' }).then(() => 200, statusOf),
      asReaderCore.listNamespacedSecret({ namespace }).then(() => 200, statusOf),
    ]);
    assert.deepEqual(denied, [403, 403, 403]);
  });
});

describe('node lifecycle', () => {
  it('turns a Node NotReady when its node Lease stops being renewed', async () => {
    const kc = cluster().kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const coordination = kc.makeApiClient(k8s.CoordinationV1Api);
    const name = 'lifecycle-node';
    const node = await core.createNode({
      body: { metadata: { name, labels: { 'kubernetes.io/hostname': name } } },
    });
    const now = new Date();
    // NB: the node-lifecycle controller may update the new Node first (taints), so the
    // status is written without a resourceVersion precondition.
    await core.replaceNodeStatus({
      name,
      body: {
        ...node,
        metadata: { ...node.metadata, resourceVersion: undefined },
        status: {
          conditions: [
            {
              type: 'Ready',
              status: 'True',
              reason: 'KubeletReady',
              message: 'test heartbeat',
              lastHeartbeatTime: now,
              lastTransitionTime: now,
            },
          ],
        },
      },
    });
    const lease = await coordination.createNamespacedLease({
      namespace: 'kube-node-lease',
      body: {
        metadata: {
          name,
          ownerReferences: [{ apiVersion: 'v1', kind: 'Node', name, uid: node.metadata?.uid ?? '' }],
        },
        spec: { holderIdentity: name, leaseDurationSeconds: 40, renewTime: new k8s.V1MicroTime() },
      },
    });
    const readyStatus = async () =>
      (await core.readNode({ name })).status?.conditions?.find((c) => c.type === 'Ready')?.status;

    // Renew for longer than the grace period (8 s): the node must stay Ready.
    let current = lease;
    const renewUntil = performance.now() + 12_000;
    while (performance.now() < renewUntil) {
      current = await coordination.replaceNamespacedLease({
        namespace: 'kube-node-lease',
        name,
        body: { ...current, spec: { ...current.spec, renewTime: new k8s.V1MicroTime() } },
      });
      await new Promise((r) => setTimeout(r, 1_000));
    }
    assert.equal(await readyStatus(), 'True', 'renewed node stays Ready');

    const stoppedAt = performance.now();
    await eventually(
      'the node to turn NotReady',
      async () => ((await readyStatus()) === 'Unknown' ? true : undefined),
      60_000,
      250,
    );
    const elapsed = performance.now() - stoppedAt;
    assert.ok(
      elapsed >= 5_000,
      `NotReady came ${elapsed} ms after the last renewal: sooner than the grace period allows`,
    );
    const taints = (await core.readNode({ name })).spec?.taints?.map((t) => t.key) ?? [];
    assert.ok(
      taints.includes('node.kubernetes.io/unreachable'),
      `unreachable taint present (got ${taints.join(',')})`,
    );
  });
});
