/**
 * The Helm chart against the real API server: it lints, its rendered manifests pass a
 * server-side dry run, and its RBAC and ValidatingAdmissionPolicy keep an agent to its
 * own volume's Lease and both components away from secrets.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import * as k8s from '@kubernetes/client-node';
import { eventually, useCluster } from '../support/cluster.ts';
import { chartDir, helm, runTool } from '../support/tools.ts';

const cluster = useCluster({ scheduler: false });
const c = cluster;
const namespace = 'leasehold-system';

function statusOf(err: unknown): number | undefined {
  return (err as { code?: number }).code;
}

function messageOf(err: unknown): string {
  return String((err as { body?: unknown }).body ?? err);
}

async function kubectl(args: string[], input?: string) {
  const c = cluster();
  return runTool(
    c.kubectl,
    ['--kubeconfig', c.kubeconfigPath, ...args],
    input === undefined ? {} : { input },
  );
}

async function tokenKubeConfig(serviceAccount: string, boundPod?: k8s.V1Pod): Promise<k8s.KubeConfig> {
  const c = cluster();
  const core = c.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const request = await core.createNamespacedServiceAccountToken({
    namespace,
    name: serviceAccount,
    body: {
      spec: {
        audiences: [],
        expirationSeconds: 600,
        ...(boundPod
          ? {
              boundObjectRef: {
                apiVersion: 'v1',
                kind: 'Pod',
                name: boundPod.metadata?.name ?? '',
                uid: boundPod.metadata?.uid ?? '',
              },
            }
          : {}),
      },
    },
  });
  const path = `${c.dir}/${serviceAccount}-${boundPod?.metadata?.name ?? 'unbound'}.kubeconfig`;
  await c.writeTokenKubeconfig(path, request.status?.token ?? '');
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

function lease(name: string, holder: string, node: string, resourceVersion?: string): k8s.V1Lease {
  return {
    metadata: {
      name,
      namespace,
      labels: { 'leasehold.dev/share-manager': name },
      annotations: { 'leasehold.dev/holder-node': node },
      ...(resourceVersion ? { resourceVersion } : {}),
    },
    spec: {
      holderIdentity: holder,
      leaseDurationSeconds: 6,
      renewTime: new k8s.V1MicroTime(),
      leaseTransitions: 1,
    },
  };
}

describe('Helm chart', () => {
  it('passes helm lint', async () => {
    const result = await helm(['lint', chartDir]);
    assert.equal(result.code, 0, result.stdout + result.stderr);
  });

  it('rejects values that break the schema, naming the value', async () => {
    const result = await helm(['template', 'x', chartDir, '--set', 'manager.antiAffinity=sometimes']);
    assert.notEqual(result.code, 0);
    assert.match(result.stderr, /antiAffinity/);
  });

  it('passes nfsServer.image to the manager as LEASEHOLD_NFS_SERVER_IMAGE (tag: appVersion by default)', async () => {
    const custom = await helm([
      'template',
      'x',
      chartDir,
      '--set',
      'nfsServer.image.repository=registry.example/nfs-ganesha',
      '--set',
      'nfsServer.image.tag=1.2',
    ]);
    assert.equal(custom.code, 0, custom.stderr);
    assert.match(
      custom.stdout,
      /name: LEASEHOLD_NFS_SERVER_IMAGE, value: "registry\.example\/nfs-ganesha:1\.2"/,
    );
    const byDefault = await helm(['template', 'x', chartDir]);
    assert.match(
      byDefault.stdout,
      /name: LEASEHOLD_NFS_SERVER_IMAGE, value: "leasehold\.dev\/nfs-ganesha:\d+\.\d+\.\d+"/,
    );
    const bad = await helm(['template', 'x', chartDir, '--set', 'nfsServer.image.repository=a b']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /nfsServer\/image\/repository/);
  });

  it('manager.witnesses.nodes: the names to the manager, its HTTP port published on the node; off by default (issue 28)', async () => {
    const on = await helm(['template', 'x', chartDir, '--set', 'manager.witnesses.nodes={n1,n2,n3}']);
    assert.equal(on.code, 0, on.stderr);
    assert.match(on.stdout, /name: LEASEHOLD_WITNESS_NODES, value: "n1,n2,n3"/);
    assert.match(on.stdout, /name: http, containerPort: 8090, protocol: TCP, hostPort: 8090 /);
    const off = await helm(['template', 'x', chartDir]);
    assert.match(off.stdout, /name: LEASEHOLD_WITNESS_NODES, value: ""/);
    assert.doesNotMatch(off.stdout, /hostPort: \d/);
    const bad = await helm(['template', 'x', chartDir, '--set', 'manager.witnesses.nodes={Bad_Node}']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /witnesses\/nodes/);
  });

  it('renders manifests the API server accepts (server-side dry run), then installs them', async () => {
    const created = await kubectl(['create', 'namespace', namespace]);
    assert.equal(created.code, 0, created.stderr);
    const rendered = await helm([
      'template',
      'leasehold',
      chartDir,
      '--namespace',
      namespace,
      '--include-crds',
      '--set',
      'serviceMonitor.enabled=false',
    ]);
    assert.equal(rendered.code, 0, rendered.stderr);
    assert.match(rendered.stdout, /kind: DaemonSet/);
    assert.match(rendered.stdout, /kind: ValidatingAdmissionPolicy\n/);
    const dryRun = await kubectl(['apply', '--server-side', '--dry-run=server', '-f', '-'], rendered.stdout);
    assert.equal(dryRun.code, 0, dryRun.stderr);
    const applied = await kubectl(['apply', '--server-side', '-f', '-'], rendered.stdout);
    assert.equal(applied.code, 0, applied.stderr);
  });
});

describe('least privilege', () => {
  it('an agent token not bound to a pod cannot write Leases at all', async () => {
    const kc = await tokenKubeConfig('leasehold-agent');
    // NB: the API server loads a new policy within a few seconds; until then it admits.
    const denied = await eventually(
      'the admission policy to take effect',
      async () => {
        const outcome = await kc
          .makeApiClient(k8s.CoordinationV1Api)
          .createNamespacedLease({ namespace, body: lease('vol-c', '', '') })
          .then(() => 'allowed', messageOf);
        if (outcome === 'allowed') {
          await c()
            .kubeConfig.makeApiClient(k8s.CoordinationV1Api)
            .deleteNamespacedLease({ namespace, name: 'vol-c' });
          return undefined;
        }
        return outcome;
      },
      30_000,
      500,
    );
    assert.match(denied, /pod-bound service-account token/);
  });

  it('lets an agent write only its own Lease, as itself, and nothing else', async () => {
    const c = cluster();
    const core = c.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNode({ body: { metadata: { name: 'node-a' } } });
    const pod = await core.createNamespacedPod({
      namespace,
      body: {
        metadata: { name: 'vol-a-x7k2p', labels: { 'leasehold.dev/share-manager': 'vol-a' } },
        spec: {
          nodeName: 'node-a',
          serviceAccountName: 'leasehold-agent',
          containers: [{ name: 'agent', image: 'leasehold.dev/leasehold:dev' }],
        },
      },
    });
    const kc = await tokenKubeConfig('leasehold-agent', pod);
    const review = await kc.makeApiClient(k8s.AuthenticationV1Api).createSelfSubjectReview({ body: {} });
    assert.deepEqual(review.status?.userInfo?.extra?.['authentication.kubernetes.io/pod-name'], [
      'vol-a-x7k2p',
    ]);
    assert.deepEqual(review.status?.userInfo?.extra?.['authentication.kubernetes.io/node-name'], ['node-a']);

    const asAgent = kc.makeApiClient(k8s.CoordinationV1Api);
    const admin = c.kubeConfig.makeApiClient(k8s.CoordinationV1Api);
    await admin.createNamespacedLease({ namespace, body: lease('vol-b', 'vol-b-q9w8e', 'node-b') });

    // Its own Lease: create, renew, release.
    const own = await asAgent.createNamespacedLease({
      namespace,
      body: lease('vol-a', 'vol-a-x7k2p', 'node-a'),
    });
    const renewed = await asAgent.replaceNamespacedLease({
      namespace,
      name: 'vol-a',
      body: lease('vol-a', 'vol-a-x7k2p', 'node-a', own.metadata?.resourceVersion),
    });

    // Denied by the admission policy (it holds RBAC update on leases in the namespace).
    const other = await admin.readNamespacedLease({ namespace, name: 'vol-b' });
    const steal = await asAgent
      .replaceNamespacedLease({
        namespace,
        name: 'vol-b',
        body: lease('vol-b', 'vol-a-x7k2p', 'node-a', other.metadata?.resourceVersion),
      })
      .then(() => 'allowed', messageOf);
    assert.match(steal, /may only write the Lease of its own share manager/);
    const renewOther = await asAgent
      .replaceNamespacedLease({
        namespace,
        name: 'vol-b',
        body: lease('vol-b', 'vol-b-q9w8e', 'node-b', other.metadata?.resourceVersion),
      })
      .then(() => 'allowed', messageOf);
    assert.match(renewOther, /may only write the Lease of its own share manager/);
    const handOver = await asAgent
      .replaceNamespacedLease({
        namespace,
        name: 'vol-a',
        body: lease('vol-a', 'vol-a-zzzzz', 'node-a', renewed.metadata?.resourceVersion),
      })
      .then(() => 'allowed', messageOf);
    assert.match(handOver, /may only hold a Lease itself or release one it holds/);
    const wrongNode = await asAgent
      .replaceNamespacedLease({
        namespace,
        name: 'vol-a',
        body: lease('vol-a', 'vol-a-x7k2p', 'node-b', renewed.metadata?.resourceVersion),
      })
      .then(() => 'allowed', messageOf);
    assert.match(wrongNode, /may only hold a Lease itself/);

    // Denied by RBAC.
    const forbidden = await Promise.all([
      asAgent.deleteNamespacedLease({ namespace, name: 'vol-a' }).then(() => 200, statusOf),
      asAgent.listNamespacedLease({ namespace }).then(() => 200, statusOf),
      kc
        .makeApiClient(k8s.CoreV1Api)
        .listNamespacedSecret({ namespace })
        .then(() => 200, statusOf),
      kc
        .makeApiClient(k8s.CoreV1Api)
        .listNamespacedPod({ namespace })
        .then(() => 200, statusOf),
    ]);
    assert.deepEqual(forbidden, [403, 403, 403, 403]);

    // Release: the holder emptied by the holder itself.
    const released = await asAgent.replaceNamespacedLease({
      namespace,
      name: 'vol-a',
      body: lease('vol-a', '', 'node-a', renewed.metadata?.resourceVersion),
    });
    assert.equal(released.spec?.holderIdentity, '');
    assert.equal(
      (await admin.readNamespacedLease({ namespace, name: 'vol-b' })).spec?.holderIdentity,
      'vol-b-q9w8e',
    );
  });

  it('gives the manager what it needs and no secrets', async () => {
    const kc = await tokenKubeConfig('leasehold-manager');
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const allowed = await Promise.all([
      kc
        .makeApiClient(k8s.CoordinationV1Api)
        .listLeaseForAllNamespaces()
        .then(() => 200, statusOf),
      core.listPodForAllNamespaces().then(() => 200, statusOf),
      core.listNode().then(() => 200, statusOf),
      kc
        .makeApiClient(k8s.StorageV1Api)
        .listVolumeAttachment()
        .then(() => 200, statusOf),
      // The opt-in out-of-service taint: a merge patch on the Node.
      core
        .patchNode(
          { name: 'node-a', body: { metadata: { annotations: { 'leasehold.dev/out-of-service-by': 'x' } } } },
          k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
        )
        .then(() => 200, statusOf),
      // The volume handoff (volumes-in-use): a JSON patch of nodes/status (here a no-op test).
      core
        .patchNodeStatus(
          { name: 'node-a', body: [{ op: 'test', path: '/metadata/name', value: 'node-a' }] },
          k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.JsonPatch),
        )
        .then(() => 200, statusOf),
    ]);
    assert.deepEqual(allowed, [200, 200, 200, 200, 200, 200]);
    // The storage-fencing gate: get one CSIDriver by name (404: allowed, and none by that
    // name), but neither list nor write them.
    const storage = kc.makeApiClient(k8s.StorageV1Api);
    assert.equal(await storage.readCSIDriver({ name: 'csi.example.com' }).then(() => 200, statusOf), 404);
    const denied = await Promise.all([
      storage.listCSIDriver().then(() => 200, statusOf),
      storage.deleteCSIDriver({ name: 'csi.example.com' }).then(() => 200, statusOf),
      core.listSecretForAllNamespaces().then(() => 200, statusOf),
      core.listNamespacedSecret({ namespace }).then(() => 200, statusOf),
      core.listConfigMapForAllNamespaces().then(() => 200, statusOf),
      core.deleteNode({ name: 'node-a' }).then(() => 200, statusOf),
      // patch only: never a whole-object write of a Node's status.
      core
        .readNode({ name: 'node-a' })
        .then((node) => core.replaceNodeStatus({ name: 'node-a', body: node }))
        .then(() => 200, statusOf),
    ]);
    assert.deepEqual(denied, [403, 403, 403, 403, 403, 403, 403]);
  });
});
