/**
 * One real node (dev/node: the real kubelet and containerd, runc, the bridge CNI
 * network, in the node's own namespaces) against the real control plane: the Node
 * registers and goes Ready; its kubelet API answers on host loopback through the relay
 * (client certificate of the cluster CA); a pod of the locally built pause image, scheduled by the
 * real scheduler, reaches Running with its container a real process in the node's
 * cgroups; deleting the pod stops that process; stop() leaves nothing behind (its
 * leftover check throws otherwise; test/unit/node-leftovers.test.ts proves the check
 * fails on a stray cgroup and process), and no host sysctl the kubelet cares about,
 * host link or host nftables rule changed. Bring the components with `bash dev/toolchain.sh --node ...`.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { after, before, describe, it } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { nodeBinaries } from '../../dev/node/binaries.ts';
import { KUBELET_SYSCTLS } from '../../dev/node/config.ts';
import { hostProcesses } from '../../dev/node/leftovers.ts';
import { type RealNode, startRealNode } from '../../dev/node/node.ts';
import { eventually, useCluster } from '../support/cluster.ts';

const cluster = useCluster();

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

describe('a real node', () => {
  let node: RealNode | undefined;
  const sysctlsBefore = hostSysctls();
  const networkBefore = hostNetwork();

  before(
    async () => {
      const t0 = performance.now();
      node = await startRealNode(cluster(), { name: 'real-1' });
      console.log(`real node: start to Ready ${Math.round(performance.now() - t0)} ms`);
    },
    { timeout: 180_000 },
  );
  after(async () => {
    await node?.stop();
  });

  it('registers, runs a pod of the local pause image, stops its container, and leaves nothing', {
    timeout: 180_000,
  }, async () => {
    assert.ok(node, 'the node started');
    const core = cluster().kubeConfig.makeApiClient(CoreV1Api);
    const { pauseImage } = await nodeBinaries();
    const registered = await core.readNode({ name: 'real-1' });
    assert.equal(registered.status?.nodeInfo?.containerRuntimeVersion, 'containerd://2.3.7');
    assert.equal(registered.status?.nodeInfo?.kubeletVersion, 'v1.36.3');

    const t0 = performance.now();
    await core.createNamespacedPod({
      namespace: 'default',
      body: {
        metadata: { name: 'pause' },
        spec: {
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

    // The same probe sees the running node (so an empty answer after stop means something).
    const live = node.leftovers();
    for (const part of ['/kubelet ', '/containerd ', 'leasehold-netns-relay ', '/pause'])
      assert.ok(
        live.some((l) => l.kind === 'process' && l.cmdline.includes(part)),
        `the probe sees ${part.trim()} while the node runs`,
      );
    assert.ok(live.some((l) => l.kind === 'cgroup' && l.path.endsWith('/kubepods')));

    await node.stop();
    assert.deepEqual(node.leftovers(), [], 'nothing of the node is left on the host');
    assert.deepEqual(hostSysctls(), sysctlsBefore, 'no host sysctl changed');
    assert.deepEqual(hostNetwork(), networkBefore, 'no host link or nftables rule added');
  });
});
