/**
 * Two real nodes at once (dev/node: the real kubelet, kube-proxy and containerd, runc,
 * the bridge CNI network, each node in its own namespaces) against one real control
 * plane: the Nodes register and go Ready; real-1's kubelet API answers on host loopback
 * through the relay (client certificate of the cluster CA); a pod of the locally built
 * pause image, scheduled by the real scheduler, reaches Running with its container a
 * real process in the node's cgroups; deleting the pod stops that process. Meanwhile on
 * real-2 a pod of the api-probe image calls the API server the in-cluster way (the
 * `kubernetes` Service's ClusterIP through kube-proxy, its projected service-account
 * token) and is told who it is; the API server reaches real-2's kubelet through its
 * egress proxy into real-2's namespace to read that pod's log, exec the call again in
 * it and port-forward to it. stop()
 * leaves nothing behind (its leftover check throws otherwise;
 * test/unit/node-leftovers.test.ts proves the check fails on a stray cgroup and
 * process), and no host sysctl the kubelet cares about, host link or host nftables
 * rule changed. Bring the components with `bash dev/toolchain.sh --node ...`.
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CoreV1Api } from '@kubernetes/client-node';
import { nodeBinaries } from '../../dev/node/binaries.ts';
import { KUBELET_SYSCTLS } from '../../dev/node/config.ts';
import { hostProcesses } from '../../dev/node/leftovers.ts';
import { type RealNode, startRealNode } from '../../dev/node/node.ts';
import { eventually, useCluster } from '../support/cluster.ts';

const cluster = useCluster({ realNodes: true });
const run = promisify(execFile);

const hostSysctls = () =>
  Object.fromEntries(Object.keys(KUBELET_SYSCTLS).map((k) => [k, readFileSync(`/proc/sys/${k}`, 'utf8')]));

/** The host's network links and nftables rules: the node must add none. */
const hostNetwork = () => ({
  links: readdirSync('/sys/class/net').sort(),
  nftables: execFileSync('nft', ['list', 'ruleset'], { encoding: 'utf8' }),
});

/** GET on the kubelet's API with the admin's client certificate: [status, body]. */
function kubeletGet(node: RealNode, path: string): Promise<[number, string]> {
  const user = cluster().kubeConfig.getCurrentUser();
  return new Promise((resolve, reject) => {
    const req = request(`${node.kubeletUrl}${path}`, {
      cert: readFileSync(user?.certFile ?? ''),
      key: readFileSync(user?.keyFile ?? ''),
      rejectUnauthorized: false, // the kubelet's self-signed serving certificate
      timeout: 10_000,
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c) => {
        body += c;
      });
      res.on('end', () => resolve([res.statusCode ?? 0, body]));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Host pids of processes in the pod's cgroup whose command line is `cmd`. */
const podProcesses = (node: RealNode, podUid: string, cmd: string) =>
  hostProcesses()
    .filter((p) => p.cmdline === cmd && p.cgroup.includes(`${node.layout.cgroupRoot}/`))
    .filter((p) => p.cgroup.includes(`pod${podUid}`))
    .map((p) => p.pid);

describe('real nodes', () => {
  let node: RealNode | undefined;
  let node2: RealNode | undefined;
  const sysctlsBefore = hostSysctls();
  const networkBefore = hostNetwork();

  before(
    async () => {
      const t0 = performance.now();
      // Both at once; allSettled so that one failing still lets the other be stopped.
      const [one, two] = await Promise.allSettled([
        startRealNode(cluster(), { name: 'real-1', index: 1 }),
        startRealNode(cluster(), { name: 'real-2', index: 2 }),
      ]);
      if (one.status === 'fulfilled') node = one.value;
      if (two.status === 'fulfilled') node2 = two.value;
      for (const r of [one, two]) if (r.status === 'rejected') throw r.reason;
      console.log(`real node: two nodes start to Ready ${Math.round(performance.now() - t0)} ms`);
    },
    { timeout: 180_000 },
  );
  after(async () => {
    await Promise.all([node?.stop(), node2?.stop()]);
  });

  it('register, run a pod of the local pause image and an in-cluster API client whose log the API server reads, and leave nothing', {
    timeout: 180_000,
  }, async () => {
    assert.ok(node, 'the node started');
    const core = cluster().kubeConfig.makeApiClient(CoreV1Api);
    const { pauseImage } = await nodeBinaries();
    const registered = await core.readNode({ name: 'real-1' });
    assert.equal(registered.status?.nodeInfo?.containerRuntimeVersion, 'containerd://2.3.7');
    assert.equal(registered.status?.nodeInfo?.kubeletVersion, 'v1.36.3');

    assert.ok(node2, 'the second node started');
    const probe = inClusterProbe(node2);
    const t0 = performance.now();
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: 'pause' },
        spec: {
          nodeSelector: { 'kubernetes.io/hostname': 'real-1' },
          containers: [{ name: 'pause', image: pauseImage, imagePullPolicy: 'Never' }],
          terminationGracePeriodSeconds: 10,
        },
      },
    });
    const running = await eventually(
      'the pause pod Running on real-1',
      async () => {
        const pod = await core.readNamespacedPod({ namespace: 'default', name: 'pause' });
        return pod.status?.phase === 'Running' && pod.status.containerStatuses?.[0]?.ready ? pod : undefined;
      },
      120_000,
      200,
    );
    console.log(`real node: pod create to Running ${Math.round(performance.now() - t0)} ms`);
    assert.equal(running.spec?.nodeName, 'real-1', 'the scheduler placed it on the real node');
    assert.match(running.status?.podIP ?? '', /^10\.244\.1\.\d+$/, 'an address of the node’s bridge network');
    const uid = running.metadata?.uid ?? '';
    const [status, pods] = await kubeletGet(node, '/pods');
    assert.equal(status, 200, `the kubelet's API through the relay: ${pods.slice(0, 200)}`);
    assert.ok(pods.includes(uid), 'the kubelet lists the pod');
    // The sandbox's pause and the container's pause: two real processes in the pod's cgroup.
    assert.equal(podProcesses(node, uid, '/pause').length, 2, 'sandbox and container run');

    const t1 = performance.now();
    await core.deleteNamespacedPod({ namespace: 'default', name: 'pause' });
    await eventually(
      'the pod object gone and its processes ended',
      async () => {
        const gone = await core.readNamespacedPod({ namespace: 'default', name: 'pause' }).then(
          () => false,
          (err: { code?: number }) => err.code === 404,
        );
        return gone && podProcesses(node as RealNode, uid, '/pause').length === 0 ? true : undefined;
      },
      60_000,
      200,
    );
    console.log(`real node: pod delete to processes gone ${Math.round(performance.now() - t1)} ms`);
    await probe;

    // The same probe sees the running node (so an empty answer after stop means something).
    const live = node.leftovers();
    for (const part of ['/kubelet ', '/kube-proxy ', '/containerd ', 'leasehold-netns-relay ', '/pause'])
      assert.ok(
        live.some((l) => l.kind === 'process' && l.cmdline.includes(part)),
        `the probe sees ${part.trim()} while the node runs`,
      );
    assert.ok(live.some((l) => l.kind === 'cgroup' && l.path.endsWith('/kubepods')));

    await Promise.all([node.stop(), node2.stop()]);
    assert.deepEqual(node.leftovers(), [], 'nothing of real-1 is left on the host');
    assert.deepEqual(node2.leftovers(), [], 'nothing of real-2 is left on the host');
    assert.deepEqual(hostSysctls(), sysctlsBefore, 'no host sysctl changed');
    assert.deepEqual(hostNetwork(), networkBefore, 'no host link or nftables rule added');
  });
});

const PROBE_LINE = /^api-probe: authenticated as system:serviceaccount:default:default via 10\.0\.0\.1:443$/m;

/**
 * A pod of the api-probe image calls the API server the in-cluster way (the
 * `kubernetes` Service's ClusterIP through kube-proxy, its projected token); the API
 * server then reaches the kubelet through its egress proxy into the node's namespace
 * three ways: pods/log reads that line, `kubectl exec` runs the call again in the
 * container, and `kubectl port-forward` fetches the line from the probe's :8080.
 */
async function inClusterProbe(node: RealNode): Promise<void> {
  const core = cluster().kubeConfig.makeApiClient(CoreV1Api);
  const { probeTar, probeImage } = await nodeBinaries();
  const endpoints = await core.readNamespacedEndpoints({ namespace: 'default', name: 'kubernetes' });
  assert.equal(
    `${endpoints.subsets?.[0]?.addresses?.[0]?.ip}:${endpoints.subsets?.[0]?.ports?.[0]?.port}`,
    cluster().nodeNetwork?.apiAddress,
    'the kubernetes Service points at the control plane’s address on the node network',
  );
  await node.importImage(probeTar);
  const t0 = performance.now();
  await core.createNamespacedPod({
    namespace: 'default',
    body: {
      metadata: { name: 'api-probe' },
      spec: {
        nodeSelector: { 'kubernetes.io/hostname': node.name },
        containers: [{ name: 'probe', image: probeImage, imagePullPolicy: 'Never' }],
        restartPolicy: 'Never',
        terminationGracePeriodSeconds: 5,
      },
    },
  });
  const log = await eventually(
    'the api-probe pod’s first line, read through the API server',
    async () => {
      const pod = await core.readNamespacedPod({ namespace: 'default', name: 'api-probe' });
      if (pod.status?.phase === 'Pending') return undefined;
      const text = await core.readNamespacedPodLog({ namespace: 'default', name: 'api-probe' });
      assert.notEqual(pod.status?.phase, 'Failed', `the probe's call failed: ${text}`);
      assert.equal(pod.spec?.nodeName, node.name);
      assert.match(pod.status?.podIP ?? '', new RegExp(`^10\\.244\\.${node.layout.index}\\.\\d+$`));
      return text.includes('\n') ? text : undefined;
    },
    120_000,
    200,
  );
  console.log(`real node: api-probe create to its log line ${Math.round(performance.now() - t0)} ms`);
  assert.match(log, PROBE_LINE);

  const t1 = performance.now();
  const kubectl = [cluster().kubectl, `--kubeconfig=${cluster().kubeconfigPath}`] as const;
  const { stdout: execOut } = await run(
    kubectl[0],
    [kubectl[1], 'exec', 'api-probe', '--', '/api-probe', '-once'],
    {
      timeout: 30_000,
    },
  );
  assert.match(execOut, PROBE_LINE, 'kubectl exec ran the call again in the container');
  assert.match(await portForwardGet(kubectl, 'api-probe', 8080), PROBE_LINE);
  console.log(`real node: kubectl exec and port-forward ${Math.round(performance.now() - t1)} ms`);
  await core.deleteNamespacedPod({ namespace: 'default', name: 'api-probe', gracePeriodSeconds: 0 });
}

/** `kubectl port-forward pod/NAME :PORT`, one GET / through it, then the kubectl ends. */
async function portForwardGet(
  kubectl: readonly [string, string],
  pod: string,
  port: number,
): Promise<string> {
  const child = spawn(kubectl[0], [kubectl[1], 'port-forward', `pod/${pod}`, `:${port}`], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    let out = '';
    child.stdout.on('data', (c) => {
      out += c;
    });
    child.stderr.on('data', (c) => {
      out += c;
    });
    const local = await eventually(
      'kubectl port-forward listening',
      async () => {
        assert.equal(child.exitCode, null, `kubectl port-forward exited: ${out}`);
        return /Forwarding from 127\.0\.0\.1:(\d+)/.exec(out)?.[1];
      },
      30_000,
      100,
    );
    const res = await fetch(`http://127.0.0.1:${local}/`, { signal: AbortSignal.timeout(20_000) });
    return await res.text();
  } finally {
    const exited = child.exitCode === null ? once(child, 'exit') : Promise.resolve();
    child.kill('SIGTERM');
    await exited;
  }
}
