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
 * it and port-forward to it. Then the node faults (RealNode's): real-1 crashes with a
 * pod (its processes gone, its API connections left open and silent, NotReady by the
 * real node-lifecycle controller) and heal reboots it (Ready, the kubelet restarts the
 * old pod); across it the node network (dev/node/fabric.ts): before, real-1's pod
 * reaches the api-probe pod on real-2 by pod IP, a process in real-1's network
 * namespace (spawnInNetwork) reaches it by its Service's ClusterIP, and real-2 is reset
 * on a closed port of real-1's pod; after the crash real-2 gets no reset (a timeout or
 * EHOSTUNREACH); after the reboot it is reset again and real-1 reaches the Service. All
 * of this while real-2 runs the project's images (dev/image; their import began when
 * the nodes were Ready) under the project's securityContexts (real-node-images.ts says
 * what is checked: it is the longer branch, the import most of it); then a pod on
 * real-2 writes into a static PersistentVolume of the testbed's CSI driver (dev/csi:
 * attachRequired; the real attach-detach controller's VolumeAttachment, attached by the
 * real external-attacher before the pod runs; staged and published by the kubelet;
 * the file in the driver's backing dir; the VolumeAttachment gone after the pod; the
 * driver runs in its fencing mode, so even this static volume goes through the node's
 * own view); then, on real-2, share pods as the manager builds them (real-node-share-pod.ts
 * says what is checked: which agent may hold a lease by what the kernel gave it, its
 * fence of a server of another user and of nothing else, the kubelet's backstop of a
 * hung agent); then the fencing driver with dynamic provisioning (real-node-fencing.ts: a
 * PVC provisioned by the real external-provisioner, an ext4 image (the block kind)
 * written through real-1's view and loop device, real-1 frozen mid-write and its volume
 * handed to real-2; the revoke, on the host, precedes real-2's grant; a file handle of
 * real-1's opens the same file on real-2 and fails EIO on real-1; real-1's writes fail
 * with EIO after the thaw, real-2 reads what real-1 synced before; the node storage
 * check sees real-1's live view and loop device; the claim's delete removes the
 * volume); then
 * real-2 is frozen (freezer cgroups FROZEN, a spawnInNetwork process's too, its
 * Lease stops, its kernel still resets real-1 on a closed port) and thawed (renews),
 * then partitioned with `stall` (Lease stops, the container runs on, the fabric still
 * carries real-1's connects) and healed (renews). stop(), also of a frozen node,
 * leaves nothing behind, kills a process left in a node's network and stops the fabric
 * (the node's and the fabric's leftover checks throw otherwise;
 * test/unit/node-leftovers.test.ts proves the check fails on a stray cgroup and
 * process and does not take a stranger in recycled namespace ids for one), and no host sysctl the kubelet cares about, host link or host nftables
 * rule changed; the CSI controller's processes and dir are gone, and killing its driver
 * (SIGKILL) takes its fencefs views with it (parent-death signal: no view process or
 * mount left in any namespace). Bring the components and the images with
 * `bash dev/toolchain.sh --node --image ...` (without --image the first run here builds
 * the images, about 3 minutes).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { CoordinationV1Api, CoreV1Api, StorageV1Api, type V1VolumeAttachment } from '@kubernetes/client-node';
import { type CsiController, startCsiController } from '../../dev/csi/controller.ts';
import { viewLeftovers } from '../../dev/csi/view-leftovers.ts';
import { type LocalImage, localImages } from '../../dev/image/images.ts';
import { nodeBinaries } from '../../dev/node/binaries.ts';
import { KUBELET_SYSCTLS } from '../../dev/node/config.ts';
import { NODE_NET_SYSCTLS } from '../../dev/node/fabric-plan.ts';
import { freezerCgroupOf, freezerMount } from '../../dev/node/freezer.ts';
import { hostProcesses } from '../../dev/node/leftovers.ts';
import { type RealNode, startRealNode } from '../../dev/node/node.ts';
import { sleep } from '../../lib/clock.ts';
import { eventually, useCluster } from '../support/cluster.ts';
import { fencedHandoff } from './real-node-fencing.ts';
import { projectImagesRun } from './real-node-images.ts';
import { sharePodAgents } from './real-node-share-pod.ts';

const cluster = useCluster({ realNodes: true });

const run = promisify(execFile);

/** The host's values of the sysctls the kubelet checks and the nodes' network namespaces set. */
const hostSysctls = () =>
  Object.fromEntries(
    [...Object.keys(KUBELET_SYSCTLS), ...Object.keys(NODE_NET_SYSCTLS)].map((k) => [
      k,
      readFileSync(`/proc/sys/${k}`, 'utf8'),
    ]),
  );

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
  let csi: CsiController | undefined;
  let images: Record<string, LocalImage> = {};
  /** The images' import into real-2, under way while the first test runs; kept, not left unhandled. */
  let imported: Promise<{ ms: number } | { error: unknown }> | undefined;

  before(
    async () => {
      images = await localImages();
      const tc = performance.now();
      csi = await startCsiController(cluster(), { fencing: true, provisioning: true });
      console.log(
        `real node: CSI controller and external-attacher up ${Math.round(performance.now() - tc)} ms`,
      );
      const t0 = performance.now();
      const withCsi = { csi: { backingDir: csi.backingDir } };
      // Both at once; allSettled so that one failing still lets the other be stopped.
      const [one, two] = await Promise.allSettled([
        startRealNode(cluster(), { name: 'real-1', index: 1, ...withCsi }),
        startRealNode(cluster(), { name: 'real-2', index: 2, ...withCsi }),
      ]);
      if (one.status === 'fulfilled') node = one.value;
      if (two.status === 'fulfilled') node2 = two.value;
      for (const r of [one, two]) if (r.status === 'rejected') throw r.reason;
      console.log(`real node: two nodes start to Ready ${Math.round(performance.now() - t0)} ms`);
      const t1 = performance.now();
      const into = node2 as RealNode;
      // Both at once: 16.0 and 19.7 s against 17.2 and 26.5 s one after the other (two
      // fresh nodes in turn, both orders, on the busy 2 cores).
      imported = Promise.all(Object.values(images).map(({ tar }) => into.importImage(tar))).then(
        () => ({ ms: performance.now() - t1 }),
        (error: unknown) => ({ error }),
      );
    },
    { timeout: 180_000 },
  );
  after(async () => {
    await Promise.all([node?.stop(), node2?.stop()]);
    await csi?.stop();
  });

  it('register, run a pod of the local pause image and an in-cluster API client whose log the API server reads', {
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
  });

  it("node faults, while real-2 runs the project's images: real-1 crashes (NotReady, processes gone) and heal reboots it (the kubelet reconciles the pod)", {
    timeout: 240_000,
  }, async () => {
    assert.ok(node && node2 && imported, 'both nodes started and the import began');
    const [crashed, ran] = await Promise.allSettled([crashAndReboot(node, node2), imagesRun(node2)]);
    for (const r of [crashed, ran]) if (r.status === 'rejected') throw r.reason;
  });

  it('a CSI volume: attached (VolumeAttachment, ControllerPublish) before the pod runs, staged and published into it by the kubelet, detached after the pod is deleted', {
    timeout: 120_000,
  }, async () => {
    assert.ok(node2 && csi && imported, 'real-2 and the CSI controller started, the image import began');
    const done = await imported;
    if ('error' in done) throw done.error;
    await csiVolumeRoundTrip(node2, csi, images.leasehold as LocalImage);
  });

  it("the share pod's agent as the manager builds it: at the image's uid 65532 (even with add KILL) it never acquires; as uid 0 with CAP_KILL alone it fences a server of another user and nothing of a neighbour pod; an agent hung on a healthy node is backstopped by the kubelet", {
    timeout: 240_000,
  }, async () => {
    assert.ok(node2 && imported, 'real-2 started, the image import began');
    const done = await imported;
    if ('error' in done) throw done.error;
    await sharePodAgents(cluster(), node2, images.leasehold as LocalImage);
  });

  it("the fencing driver: a dynamically provisioned volume handed from frozen real-1 to real-2, real-1's view revoked first (EIO after), deleted with its claim", {
    timeout: 240_000,
  }, async () => {
    assert.ok(node && node2 && csi, 'both nodes and the CSI controller started');
    await fencedHandoff(cluster(), node, node2, csi);
  });

  it('node faults: freeze and partition stall stop real-2 renewing its lease, heal renews it', {
    timeout: 120_000,
  }, async () => {
    assert.ok(node && node2, 'both nodes started');
    await freezeAndStall(node2, node);
  });

  /** The import (begun in before) done, the images run on real-2 (real-node-images.ts). */
  async function imagesRun(into: RealNode): Promise<void> {
    const t0 = performance.now();
    const done = await imported;
    if (!done || 'error' in done) throw done?.error ?? new Error('the import never began');
    console.log(
      `real node: images imported ${Math.round(done.ms)} ms after Ready (waited ${Math.round(performance.now() - t0)} ms for it)`,
    );
    await projectImagesRun(cluster(), into, images);
  }

  it('stop leaves nothing, also of a frozen node', { timeout: 60_000 }, async () => {
    assert.ok(node && node2, 'both nodes started');
    // A host process in real-2's network is the machine's: stop ends it (frozen too).
    if (csi) {
      // A killed controller leaves no view: real-1's revoked view (still served, EIO)
      // dies with the driver, by its parent-death signal.
      const backing = csi.backingDir;
      assert.notDeepEqual(viewLeftovers(backing), [], "real-1's revoked view is still served before");
      const driver = hostProcesses().find(
        (p) => p.cmdline.includes('-mode=controller') && p.cmdline.includes(`-backing-dir=${backing}`),
      );
      assert.ok(driver, 'the driver controller runs');
      process.kill(driver.pid, 'SIGKILL');
      await eventually(
        'no view left after the driver was killed',
        async () => (viewLeftovers(backing).length === 0 ? true : undefined),
        20_000,
        100,
      );
    }
    const client = node2.spawnInNetwork(['sleep', '60'], { stdio: 'ignore' });
    const clientExit = once(client, 'exit');
    node2.freeze();
    await Promise.all([node.stop(), node2.stop()]);
    assert.deepEqual(await clientExit, [null, 'SIGKILL'], "stop killed the process in real-2's network");
    assert.throws(() => node2?.spawnInNetwork(['true']), { code: 'E_NODE_NETNS' });
    assert.deepEqual(node.leftovers(), [], 'nothing of real-1 is left on the host');
    assert.deepEqual(node2.leftovers(), [], 'nothing of real-2 is left on the host');
    if (csi) {
      await csi.stop(); // throws when one of its processes stays
      assert.equal(existsSync(csi.backingDir), false, "the CSI controller's dir is removed");
    }
    assert.deepEqual(hostSysctls(), sysctlsBefore, 'no host sysctl changed');
    assert.deepEqual(hostNetwork(), networkBefore, 'no host link or nftables rule added');
  });
});

/** A pause pod on the node, Running: its uid and the host pids of its two pause processes. */
async function runningPause(node: RealNode, name: string): Promise<{ uid: string; pids: number[] }> {
  const core = cluster().kubeConfig.makeApiClient(CoreV1Api);
  const { pauseImage } = await nodeBinaries();
  await core.createNamespacedPod({
    namespace: 'default',
    body: {
      metadata: { name },
      spec: {
        nodeSelector: { 'kubernetes.io/hostname': node.name },
        containers: [{ name: 'pause', image: pauseImage, imagePullPolicy: 'Never' }],
        terminationGracePeriodSeconds: 1,
      },
    },
  });
  return eventually(
    `pod ${name} Running on ${node.name}`,
    async () => {
      const pod = await core.readNamespacedPod({ namespace: 'default', name });
      if (pod.status?.phase !== 'Running' || !pod.status.containerStatuses?.[0]?.ready) return undefined;
      const uid = pod.metadata?.uid ?? '';
      const pids = podProcesses(node, uid, '/pause');
      return pids.length === 2 ? { uid, pids } : undefined;
    },
    60_000,
    200,
  );
}

const readyStatus = async (name: string) =>
  (await cluster().kubeConfig.makeApiClient(CoreV1Api).readNode({ name })).status?.conditions?.find(
    (c) => c.type === 'Ready',
  )?.status;

/**
 * Crash real-1 running a pod: the node-lifecycle controller marks it NotReady; heal
 * reboots it. Across it, the fabric (the api-probe pod and its Service on `peer`,
 * real-2, from inClusterProbe): before the crash real-1's pod reaches the probe by pod
 * IP, a process in real-1's network namespace reaches it by the Service's ClusterIP,
 * and real-2 reaching real-1's pod on a port nobody listens on is reset (a live
 * kernel's RST: what the check after the crash must not see); after the crash the same
 * attempt gets no RST (it times out, or EHOSTUNREACH once ARP fails); after the reboot
 * the pod's new IP is reset again (reachable) and the rebooted node reaches the Service.
 */
async function crashAndReboot(node: RealNode, peer: RealNode): Promise<void> {
  const core = cluster().kubeConfig.makeApiClient(CoreV1Api);
  const svc = await core.readNamespacedService({ namespace: 'default', name: 'api-probe' });
  const clusterIp = svc.spec?.clusterIP ?? '';
  const serviceFrom = (what: string) =>
    eventually(
      `the Service reached from ${what}`,
      async () => {
        const seen = await tcpProbe((argv) => node.spawnInNetwork(argv), clusterIp, 80, 5_000);
        return PROBE_LINE.test(seen) ? seen : undefined;
      },
      20_000,
      200,
    );
  // While the pod starts: the Service (its endpoint on real-2) from real-1's network.
  const viaService = serviceFrom('real-1');
  viaService.catch(() => {}); // awaited below
  const before = await runningPause(node, 'crash-me');
  const podIp = async (name: string) =>
    (await core.readNamespacedPod({ namespace: 'default', name })).status?.podIP ?? '';
  const [meIp, probeIp] = await Promise.all([podIp('crash-me'), podIp('api-probe')]);
  const tf = performance.now();
  const fromPod = (host: string, port: number) =>
    tcpProbe(
      (argv) =>
        spawn('setpriv', [
          '--pdeathsig',
          'KILL',
          '--',
          'nsenter',
          `--net=/proc/${before.pids[0]}/ns/net`,
          '--',
          ...argv,
        ]),
      host,
      port,
      5_000,
    );
  const [podToPod, refused] = await Promise.all([
    fromPod(probeIp, 8080),
    tcpProbe((argv) => peer.spawnInNetwork(argv), meIp, 8080, 5_000),
  ]);
  assert.match(podToPod, PROBE_LINE, `real-1's pod reaches real-2's pod ${probeIp}:8080 over the fabric`);
  assert.match(await viaService, PROBE_LINE);
  assert.equal(
    refused,
    'ECONNREFUSED',
    `real-2 reaches real-1's pod ${meIp}: a live kernel resets a closed port`,
  );
  console.log(
    `real node: fabric pod to pod, Service and reset checks ${Math.round(performance.now() - tf)} ms`,
  );
  const t0 = performance.now();
  const open = node.apiLink.connections().open;
  assert.ok(open > 0, 'the kubelet and kube-proxy hold connections to the API server');
  await node.crash();
  assert.equal(node.state, 'crashed');
  assert.equal(node.apiLink.mode, 'down');
  assert.equal(
    node.apiLink.connections().open,
    open,
    'the dead node’s connections stay open at the API server: no FIN, no RST from a dead machine',
  );
  assert.deepEqual(podProcesses(node, before.uid, '/pause'), [], 'the pod’s processes died with the node');
  assert.deepEqual(node.leftovers(), [], 'no process, cgroup or mount of the node is left while it is down');
  assert.equal(node.netnsPath, undefined, 'a crashed node has no network namespace');
  assert.throws(() => node.spawnInNetwork(['true']), { code: 'E_NODE_NETNS' });
  const tc = performance.now();
  let silentMs = 0;
  const [silent] = await Promise.all([
    tcpProbe((argv) => peer.spawnInNetwork(argv), meIp, 8080, 3_000).finally(() => {
      silentMs = performance.now() - tc;
    }),
    eventually(
      'real-1 NotReady (Unknown) by the node-lifecycle controller',
      async () => ((await readyStatus(node.name)) === 'Unknown' ? true : undefined),
      60_000,
      250,
    ),
  ]);
  assert.ok(
    silent === 'ETIMEDOUT' || silent === 'EHOSTUNREACH',
    `a crashed node is off the fabric: no RST from it (got ${silent} in ${Math.round(silentMs)} ms)`,
  );
  console.log(`real node: real-2 to the crashed real-1's pod: ${silent} after ${Math.round(silentMs)} ms`);
  console.log(`real node: crash to NotReady ${Math.round(performance.now() - t0)} ms`);
  const t1 = performance.now();
  await node.heal();
  assert.equal(await readyStatus(node.name), 'True', 'heal resolves when the rebooted node is Ready');
  // While the kubelet restarts the old pod: the Service from the rebooted real-1.
  const serviceAgain = serviceFrom('the rebooted real-1');
  serviceAgain.catch(() => {}); // awaited below
  console.log(`real node: heal (reboot) to Ready ${Math.round(performance.now() - t1)} ms`);
  const after = await eventually(
    'the kubelet restarted the old pod’s containers after the reboot',
    async () => {
      const pod = await core.readNamespacedPod({ namespace: 'default', name: 'crash-me' });
      const status = pod.status?.containerStatuses?.[0];
      const pids = podProcesses(node, before.uid, '/pause');
      return pod.status?.phase === 'Running' && status?.ready && pids.length === 2
        ? { restarts: status.restartCount, pids }
        : undefined;
    },
    60_000,
    250,
  );
  console.log(`real node: heal to the old pod running again ${Math.round(performance.now() - t1)} ms`);
  const t2 = performance.now();
  const meAgain = await podIp('crash-me');
  const back = await tcpProbe((argv) => peer.spawnInNetwork(argv), meAgain, 8080, 5_000);
  assert.equal(back, 'ECONNREFUSED', `the rebooted real-1 is on the fabric again (its pod at ${meAgain})`);
  assert.match(await serviceAgain, PROBE_LINE);
  console.log(`real node: fabric checks after the reboot ${Math.round(performance.now() - t2)} ms`);
  await Promise.all([
    core.deleteNamespacedService({ namespace: 'default', name: 'api-probe' }),
    core.deleteNamespacedPod({ namespace: 'default', name: 'api-probe', gracePeriodSeconds: 0 }),
  ]);
  assert.ok(
    after.restarts >= 1,
    `the kubelet counts the reboot as a restart (restartCount ${after.restarts})`,
  );
  assert.ok(
    after.pids.every((p) => !before.pids.includes(p)),
    'new processes, not the ones before the crash',
  );
  assert.deepEqual(
    node.faults.map((f) => f.fault),
    ['crash', 'heal'],
  );
  await core.deleteNamespacedPod({ namespace: 'default', name: 'crash-me', gracePeriodSeconds: 0 });
}

/** renewTime of the node's Lease in kube-node-lease, in ms (the client parses the MicroTime to a Date). */
const leaseRenewed = async (name: string) => {
  const lease = await cluster().kubeConfig.makeApiClient(CoordinationV1Api).readNamespacedLease({
    namespace: 'kube-node-lease',
    name,
  });
  const at = lease.spec?.renewTime;
  assert.ok(at, `${name}'s lease has a renewTime`);
  return new Date(at).getTime();
};

/** The lease does not move for `ms` (two renew periods) from 0.5 s after the fault. */
async function leaseStands(name: string, ms: number): Promise<void> {
  await sleep(500); // a renewal in flight when the fault came may still land
  const at = await leaseRenewed(name);
  await sleep(ms);
  assert.equal(await leaseRenewed(name), at, `${name}'s lease is not renewed during the fault`);
}

async function leaseMoves(name: string): Promise<void> {
  const at = await leaseRenewed(name);
  await eventually(
    `${name}'s lease renewed after heal`,
    async () => ((await leaseRenewed(name)) !== at ? true : undefined),
    20_000,
    200,
  );
}

const processState = (pid: number) =>
  /^State:\s+(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];

/** Freeze real-2 running a pod, heal, partition it (stall), heal. */
async function freezeAndStall(node: RealNode, peer: RealNode): Promise<void> {
  const pod = await runningPause(node, 'freeze-me');
  const podIp =
    (
      await cluster()
        .kubeConfig.makeApiClient(CoreV1Api)
        .readNamespacedPod({ namespace: 'default', name: 'freeze-me' })
    ).status?.podIP ?? '';
  // Frozen or partitioned, the node's kernel is on the fabric: a closed port is reset.
  const kernelAnswers = async (fault: string) =>
    assert.equal(
      await tcpProbe((argv) => peer.spawnInNetwork(argv), podIp, 8080, 5_000),
      'ECONNREFUSED',
      `${fault}: ${node.name}'s kernel still answers ${peer.name} over the fabric`,
    );
  const [container] = pod.pids as [number];
  const kubelet = hostProcesses().find(
    (p) => p.cmdline.includes(node.layout.kubeletConfig) && !p.cmdline.startsWith('nsenter'),
  );
  assert.ok(kubelet, 'the kubelet process');
  // A host process in the node's network namespace (spawnInNetwork) freezes with the node.
  const client = node.spawnInNetwork(['sleep', '60'], { stdio: 'ignore' });
  assert.ok(client.pid);
  // NB: no check that the lease moves before the fault: leaseMoves after each heal
  // proves the kubelet renews, so a lease that never moved cannot pass.

  node.freeze();
  await eventually(
    'the pod’s, the kubelet’s and the spawned process’s freezer cgroups FROZEN',
    async () =>
      [container, kubelet.pid, client.pid as number].every(
        (p) => readFileSync(`${freezerDirOf(p)}/freezer.state`, 'utf8').trim() === 'FROZEN',
      )
        ? true
        : undefined,
    10_000,
    100,
  );
  console.log(
    `real node: frozen: container ${processState(container)}, kubelet ${processState(kubelet.pid)}`,
  );
  await Promise.all([leaseStands(node.name, 4_000), kernelAnswers('frozen')]);
  const t0 = performance.now();
  await node.heal();
  assert.equal(readFileSync(`${freezerDirOf(container)}/freezer.state`, 'utf8').trim(), 'THAWED');
  // NB: a thawed task leaves the freezer's D state when it is next scheduled: on the
  // loaded machine not always by the time heal() returns (seen once: still D).
  await eventually(
    'the spawned process thawed (sleeping, S)',
    async () => (/^S /.test(processState(client.pid as number) ?? '') ? true : undefined),
    5_000,
    50,
  );
  client.kill('SIGKILL');
  await leaseMoves(node.name);
  console.log(`real node: thaw to lease renewed ${Math.round(performance.now() - t0)} ms`);

  node.partition('stall');
  await Promise.all([leaseStands(node.name, 4_000), kernelAnswers('partitioned')]);
  assert.match(
    processState(container) ?? '',
    /^S /,
    'the container runs on (sleeping, not frozen) in the partition',
  );
  assert.deepEqual(podProcesses(node, pod.uid, '/pause').sort(), [...pod.pids].sort(), 'the same processes');
  const t1 = performance.now();
  await node.heal();
  await leaseMoves(node.name);
  console.log(`real node: partition heal to lease renewed ${Math.round(performance.now() - t1)} ms`);
  assert.deepEqual(
    node.faults.map((f) => `${f.fault}${f.detail ? `:${f.detail}` : ''}`),
    ['freeze', 'heal', 'partition:stall', 'heal'],
  );
}

/**
 * A static PersistentVolume of the testbed's CSI driver (attachRequired) bound to a
 * claim; a pod of the leasehold image on `node` writes the time into it. Polled every
 * 100 ms: the real attach-detach controller's VolumeAttachment, the real
 * external-attacher's attached=true with the driver's publish context, and the pod.
 * The write's time is after the controller part recorded ControllerPublish (one host
 * clock); the file is in the driver's backing dir (stage and publish bind-mounted it
 * into the pod); deleting the pod removes the VolumeAttachment (NodeUnpublish and
 * NodeUnstage, the kubelet's volumesInUse, then ControllerUnpublish) and the record.
 */
async function csiVolumeRoundTrip(node: RealNode, csi: CsiController, image: LocalImage): Promise<void> {
  const core = cluster().kubeConfig.makeApiClient(CoreV1Api);
  const storage = cluster().kubeConfig.makeApiClient(StorageV1Api);
  const handle = 'csi-vol-1';
  const volumeDir = await csi.makeVolume(handle, { uid: 65532, gid: 65532 });
  await core.createPersistentVolume({
    body: {
      metadata: { name: 'csi-pv' },
      spec: {
        capacity: { storage: '1Gi' },
        accessModes: ['ReadWriteOnce'],
        persistentVolumeReclaimPolicy: 'Retain',
        storageClassName: '',
        claimRef: { namespace: 'default', name: 'csi-claim' },
        csi: { driver: csi.driverName, volumeHandle: handle },
      },
    },
  });
  await core.createNamespacedPersistentVolumeClaim({
    namespace: 'default',
    body: {
      metadata: { name: 'csi-claim' },
      spec: {
        accessModes: ['ReadWriteOnce'],
        storageClassName: '',
        volumeName: 'csi-pv',
        resources: { requests: { storage: '1Gi' } },
      },
    },
  });
  const ourAttachment = async () =>
    (await storage.listVolumeAttachment()).items.find(
      (va) => va.spec?.source?.persistentVolumeName === 'csi-pv',
    );
  const t0 = performance.now();
  await core.createNamespacedPod({
    namespace: 'default',
    body: {
      metadata: { name: 'csi-writer' },
      spec: {
        nodeSelector: { 'kubernetes.io/hostname': node.name },
        containers: [
          {
            name: 'writer',
            image: image.ref,
            imagePullPolicy: 'Never',
            command: ['/nodejs/bin/node', '-e', WRITER],
            volumeMounts: [{ name: 'data', mountPath: '/data' }],
          },
        ],
        volumes: [{ name: 'data', persistentVolumeClaim: { claimName: 'csi-claim' } }],
        terminationGracePeriodSeconds: 2,
      },
    },
  });
  let attached: { va: V1VolumeAttachment; ms: number } | undefined;
  const runningMs = await eventually(
    'the writer pod Running, its VolumeAttachment attached',
    async () => {
      const [va, pod] = await Promise.all([
        ourAttachment(),
        core.readNamespacedPod({ namespace: 'default', name: 'csi-writer' }),
      ]);
      if (!attached && va?.status?.attached) attached = { va, ms: performance.now() - t0 };
      const running = pod.status?.phase === 'Running' && pod.status.containerStatuses?.[0]?.ready;
      if (!running) return undefined;
      assert.ok(attached, 'the VolumeAttachment was attached when the pod was first seen Running');
      return performance.now() - t0;
    },
    90_000,
    100,
  );
  assert.ok(attached);
  console.log(
    `real node: CSI pod create to VolumeAttachment attached ${Math.round(attached.ms)} ms, to Running ${Math.round(runningMs)} ms (attach to running ${Math.round(runningMs - attached.ms)} ms)`,
  );
  const va = attached.va;
  assert.equal(va.spec?.attacher, csi.driverName, 'made for the driver by the attach-detach controller');
  assert.equal(va.spec?.nodeName, node.name);
  assert.equal(va.status?.attachmentMetadata?.attachedNode, node.name, "ControllerPublish's context");
  assert.match(
    va.status?.attachmentMetadata?.view ?? '',
    new RegExp(`/views/${handle}/${node.name}\\.\\d+$`),
    "a static volume too goes through the node's own view (the fencing mode)",
  );
  const records = await csi.attachments(handle);
  assert.deepEqual(
    records.map((r) => r.node),
    [node.name],
    'the controller part recorded the attach',
  );

  const written = await eventually(
    "the pod's file in the driver's backing dir",
    async () => {
      const text = existsSync(join(volumeDir, 'hello')) ? readFileSync(join(volumeDir, 'hello'), 'utf8') : '';
      return text.endsWith('\n') ? text.trim() : undefined;
    },
    20_000,
    100,
  );
  const at = Number(/^written at (\d+)$/.exec(written)?.[1]);
  assertCalled(join(csi.logDir, 'driver-controller.log'), ['Controller/ControllerPublishVolume']);
  assertCalled(join(node.layout.logDir, 'csi-driver.log'), [
    'Node/NodeStageVolume',
    'Node/NodePublishVolume',
  ]);
  const publishedAt = records[0]?.atMs ?? Number.NaN;
  assert.ok(
    at >= publishedAt,
    `written (${at}) after ControllerPublish recorded the attach (${publishedAt})`,
  );

  const t1 = performance.now();
  await core.deleteNamespacedPod({ namespace: 'default', name: 'csi-writer' });
  await eventually(
    'the VolumeAttachment gone after the pod',
    async () => ((await ourAttachment()) === undefined ? true : undefined),
    60_000,
    100,
  );
  console.log(`real node: CSI pod delete to VolumeAttachment gone ${Math.round(performance.now() - t1)} ms`);
  assert.deepEqual(await csi.attachments(handle), [], 'ControllerUnpublish removed the record');
  assertCalled(join(node.layout.logDir, 'csi-driver.log'), [
    'Node/NodeUnpublishVolume',
    'Node/NodeUnstageVolume',
  ]);
  assertCalled(join(csi.logDir, 'driver-controller.log'), ['Controller/ControllerUnpublishVolume']);
  assert.equal(
    readFileSync(join(volumeDir, 'hello'), 'utf8').trim(),
    written,
    'the data stays on the volume',
  );
  await core.deleteNamespacedPersistentVolumeClaim({ namespace: 'default', name: 'csi-claim' });
  await core.deletePersistentVolume({ name: 'csi-pv' });
}

/** The driver's log (it logs each call and its outcome) shows each of `calls` answered ok. */
function assertCalled(log: string, calls: readonly string[]): void {
  const text = readFileSync(log, 'utf8');
  for (const call of calls)
    assert.match(text, new RegExp(`/csi\\.v1\\.${call}: ok `), `${call} answered ok (${log})`);
}

/** The writer container's script: the write's time (ms, host clock) into the volume, then idle. */
const WRITER = [
  "const fs = require('node:fs');",
  "const fd = fs.openSync('/data/hello', 'w');",
  "fs.writeSync(fd, 'written at ' + Date.now() + '\\n');",
  'fs.fsyncSync(fd);',
  'fs.closeSync(fd);',
  'setInterval(() => {}, 1 << 30);',
].join(' ');

/** /sys/fs/cgroup/freezer/<the process's freezer cgroup>. */
const freezerDirOf = (pid: number) => `${freezerMount()}${freezerCgroupOf(pid)}`;

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
      metadata: { name: 'api-probe', labels: { app: 'api-probe' } },
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
  // Kept for the fabric's checks across real-1's crash (crashAndReboot), with a Service.
  await core.createNamespacedService({
    namespace: 'default',
    body: {
      metadata: { name: 'api-probe' },
      spec: { selector: { app: 'api-probe' }, ports: [{ port: 80, targetPort: 8080 }] },
    },
  });
}

/**
 * One TCP connection to host:port from wherever `start` runs the argv (a pod's or a
 * node's network namespace; bash's /dev/tcp, no Node start per probe), an HTTP GET /
 * on it: the reply's body, or ECONNREFUSED (reset), EHOSTUNREACH (ARP failed) or
 * ETIMEDOUT (nothing within `ms`).
 */
async function tcpProbe(
  start: (argv: string[]) => ChildProcess,
  host: string,
  port: number,
  ms: number,
): Promise<string> {
  const get = `exec 3<>/dev/tcp/${host}/${port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && exec cat <&3`;
  const child = start(['timeout', `${ms / 1000}`, 'bash', '-c', get]);
  let out = '';
  let err = '';
  child.stdout?.on('data', (c) => {
    out += c;
  });
  child.stderr?.on('data', (c) => {
    err += c;
  });
  const [code] = (await once(child, 'close')) as [number | null];
  if (code === 0) return out.slice(out.indexOf('\r\n\r\n') + 4).trim();
  if (code === 124) return 'ETIMEDOUT';
  if (/Connection refused/.test(err)) return 'ECONNREFUSED';
  if (/No route to host/.test(err)) return 'EHOSTUNREACH';
  return `probe exit ${code}: ${err.trim()}`;
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
