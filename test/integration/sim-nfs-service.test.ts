/**
 * The shipped NFS server in simulated pods, reached the way a cluster's clients reach
 * it: pods of leasehold.dev/nfs-ganesha run Debian's real ganesha.nfsd with the
 * manager's preset container (its capabilities, its emptyDir run dir), and a real NFS
 * client (libnfs nfs-cp / nfs-cat, NFSv4.0) goes through the Service's stable address
 * (the simulator's kube-proxy stand-in following the real EndpointSlice controller):
 *  - with no endpoint a connection is reset at once;
 *  - two ganesha pods on one machine at once do not collide;
 *  - ganesha acts as a non-root client's user and enforces its permissions with exactly
 *    the preset's capabilities;
 *  - a file written through the address is read back through the SAME address from a
 *    replacement pod on another node after the first pod was deleted (the PV moved by
 *    the real attach-detach controller);
 *  - a read through the address while the backend's node is frozen waits and completes
 *    after the thaw;
 *  - an established connection hears the FIN/RST of a pod deleted on a healthy node,
 *    and hears nothing when the backend's node crashes, although the proxy saw the
 *    dead backend's socket close (it would fail if the proxy passed that on);
 *  - NFSv3 (spec.nfs.versions with 3, the preset's container exactly): two such pods on
 *    one machine at once each get their own rpcbind (the sandbox's stand-in for the
 *    pod's network namespace, in separate network namespaces, none on the host), the
 *    entrypoint uses it instead of starting one, a libnfs NFSv3 writer writes through
 *    the Service's `nfs` and `nfs-mount` addresses, and each rpcbind goes with its pod.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import type { V1Pod, V1Volume } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { buildWriter, startWriter } from '../../dev/nfs-client/writer-process.ts';
import { createTestVolume, NFS_SERVER_IMAGE, type Sim } from '../../dev/sim/sim.ts';
import { k8s } from '../../lib/kube-client.ts';
import {
  NFS_RUN_DIR,
  NFS_RUN_MOUNT,
  NFS_RUN_VOLUME,
  nfsServerContainer,
} from '../../manager/share-model/nfs-server-preset.ts';
import { eventually } from '../support/cluster.ts';
import { nfsUrl, processRuns, runNfsTool } from './nfs-ganesha-harness.ts';
import { startClusterAndSim, stopClusterAndSim } from './sim-harness.ts';

const NS = 'default';
const EXPORT = '/export';

let running: { cluster: Cluster; sim: Sim } | undefined;
before(
  async () => {
    running = await startClusterAndSim(
      { nodes: ['sim-a', 'sim-b'] },
      // The PV moves after a deletion: detach as soon as the node reports it unused.
      { attachDetachReconcileSyncPeriod: '2s' },
    );
  },
  { timeout: 300_000 },
);
after(() => stopClusterAndSim(running));
const sim = () => (running as { sim: Sim }).sim;
const core = () => (running as { cluster: Cluster }).cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);

/** The manager's default server container, exactly, plus what libnfs needs (NFSv4.0) and short timings. */
function nfsPod(name: string, node: string, app: string, data: V1Volume): V1Pod {
  const server = nfsServerContainer(`${NFS_SERVER_IMAGE}:dev`, EXPORT);
  return {
    metadata: { name, namespace: NS, labels: { app } },
    spec: {
      nodeName: node,
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          ...server,
          env: [
            ...(server.env ?? []),
            { name: 'LEASEHOLD_NFS_VERSIONS', value: '4.0,4.1' },
            { name: 'LEASEHOLD_NFS_GRACE_PERIOD', value: '2s' },
            { name: 'LEASEHOLD_NFS_LEASE_LIFETIME', value: '2s' },
          ],
          readinessProbe: { tcpSocket: { port: 'nfs' }, periodSeconds: 1 },
          volumeMounts: [
            { name: 'data', mountPath: EXPORT },
            { name: NFS_RUN_VOLUME, mountPath: NFS_RUN_DIR },
          ],
        },
      ],
      volumes: [data, { name: NFS_RUN_VOLUME, emptyDir: { medium: 'Memory' } }],
    },
  };
}

const claimVolume: V1Volume = { name: 'data', persistentVolumeClaim: { claimName: 'nfs-data' } };

async function waitReady(name: string): Promise<V1Pod> {
  return eventually(
    `pod ${name} Ready`,
    async () => {
      const p = await core().readNamespacedPod({ namespace: NS, name });
      return p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ? p : undefined;
    },
    60_000,
    200,
  );
}

/** An open TCP connection through the Service address, recording how it ended. */
async function openConnection(port: number): Promise<{ socket: Socket; ended: () => string | undefined }> {
  const socket = connect({ host: '127.0.0.1', port });
  let how: string | undefined;
  socket.on('end', () => {
    how ??= 'FIN';
  });
  socket.on('error', (err: NodeJS.ErrnoException) => {
    how ??= `error ${err.code}`;
  });
  socket.on('close', () => {
    how ??= 'close';
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  return { socket, ended: () => how };
}

test('nfs-ganesha pods serve one file through one Service address across a replacement; crash semantics of the proxy', async (t) => {
  const startedAt = performance.now();
  const mark = (what: string) =>
    t.diagnostic(`${what} at ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
  const kc = (running as { cluster: Cluster }).cluster.kubeConfig;
  await createTestVolume(kc, { pvName: 'pv-nfs', namespace: NS, claimName: 'nfs-data' });
  await core().createNamespacedService({
    namespace: NS,
    body: {
      metadata: { name: 'nfs' },
      spec: { selector: { app: 'nfs' }, ports: [{ name: 'nfs', port: 2049, targetPort: 'nfs' }] },
    },
  });
  const address = await sim().serviceAddress(NS, 'nfs', 'nfs');
  assert.deepEqual(await sim().serviceAddress(NS, 'nfs', 2049), address, 'by name or number: one address');
  assert.equal(address.host, '127.0.0.1');

  // No endpoint yet: reset at once, as kube-proxy's REJECT rule.
  const refusedAt = performance.now();
  const early = await openConnection(address.port).catch((err: NodeJS.ErrnoException) => ({
    error: err.code,
  }));
  const earlyEnd =
    'error' in early ? `error ${early.error}` : await eventually('reset', async () => early.ended());
  assert.match(earlyEnd, /ECONNRESET|close/, 'a connection without endpoints is reset');
  assert.ok(performance.now() - refusedAt < 2_000, 'and at once');

  // Two ganesha pods on one machine at once: the share's and another with its own export.
  await core().createNamespacedPod({ namespace: NS, body: nfsPod('nfs-a', 'sim-a', 'nfs', claimVolume) });
  await core().createNamespacedPod({
    namespace: NS,
    body: nfsPod('nfs-x', 'sim-a', 'other', { name: 'data', emptyDir: {} }),
  });
  await Promise.all([waitReady('nfs-a'), waitReady('nfs-x')]);
  mark('nfs-a and nfs-x ready');
  const portA = sim().hostPort(NS, 'nfs-a', 2049);
  const portX = sim().hostPort(NS, 'nfs-x', 2049);
  assert.ok(portA && portX && portA !== portX, `each pod has its own NFS host port (${portA}, ${portX})`);
  const other = await runNfsTool('nfs-ls', [nfsUrl(portX as number, EXPORT)]);
  assert.equal(other.code, 0, `the second ganesha serves too: ${other.stderr}`);

  // Write through the Service address (retried until the proxy sees the ready endpoint).
  const content = randomBytes(2048);
  const local = join(sim().root, 'record.bin');
  writeFileSync(local, content);
  const url = nfsUrl(address.port, EXPORT, 'record.bin');
  await eventually(
    'nfs-cp through the Service address',
    async () => ((await runNfsTool('nfs-cp', [local, url])).code === 0 ? true : undefined),
    30_000,
    300,
  );
  mark('written through the Service');
  const readA = await runNfsTool('nfs-cat', [url]);
  assert.equal(readA.code, 0, readA.stderr);
  assert.ok(readA.stdout.equals(content), 'read back through the Service address from nfs-a');

  // ganesha acts as the client's user with the preset's SETUID/SETGID and checks its
  // permissions (no DAC_OVERRIDE for it): a uid-1000 client creates a file owned by it
  // in a world-writable directory and may not create one in the root-owned export root.
  const shared = join(sim().volumeDir('pv-nfs'), 'shared');
  mkdirSync(shared);
  chmodSync(shared, 0o777);
  const asUser = '&uid=1000&gid=1001';
  const userWrite = await runNfsTool('nfs-cp', [
    local,
    `${nfsUrl(address.port, EXPORT, 'shared/u.bin')}${asUser}`,
  ]);
  assert.equal(userWrite.code, 0, userWrite.stderr);
  const owner = statSync(join(shared, 'u.bin'));
  assert.deepEqual([owner.uid, owner.gid], [1000, 1001], 'created as the client user');
  const denied = await runNfsTool('nfs-cp', [local, `${nfsUrl(address.port, EXPORT, 'u.bin')}${asUser}`]);
  assert.notEqual(denied.code, 0, 'uid 1000 may not write the root-owned export root');
  assert.match(denied.stderr, /NFS4ERR_ACCESS/);

  // An established connection to nfs-a hears its end when the pod is deleted (healthy node).
  const toA = await openConnection(address.port);
  const viewA = sim()
    .serviceProxy.connections()
    .find((c) => c.pod === `${NS}/nfs-a` && c.state === 'passing');
  assert.ok(viewA, 'the connection went to nfs-a');
  await core().deleteNamespacedPod({ namespace: NS, name: 'nfs-a' });
  const endA = await eventually('the client hears nfs-a close', async () => toA.ended(), 20_000);
  mark(`nfs-a deleted; its client heard ${endA}`);
  toA.socket.destroy();

  // The replacement on another node serves the same file through the same address.
  await core().createNamespacedPod({ namespace: NS, body: nfsPod('nfs-b', 'sim-b', 'nfs', claimVolume) });
  await waitReady('nfs-b');
  mark('nfs-b ready (PV moved)');
  assert.deepEqual(await sim().serviceAddress(NS, 'nfs', 'nfs'), address, 'the address did not change');
  const readB = await eventually(
    'nfs-cat through the Service address from nfs-b',
    async () => {
      const r = await runNfsTool('nfs-cat', [url]);
      return r.code === 0 ? r : undefined;
    },
    30_000,
    300,
  );
  assert.ok(readB.stdout.equals(content), 'the same bytes, served by the replacement');
  mark('read back from nfs-b');

  // A frozen node answers nothing, and carries on after the thaw: a read started while
  // sim-b is frozen completes once it is healed.
  await sim().node('sim-b').freeze();
  let frozenRead: Awaited<ReturnType<typeof runNfsTool>> | undefined;
  const reading = runNfsTool('nfs-cat', [url]).then((r) => {
    frozenRead = r;
    return r;
  });
  await new Promise((r) => setTimeout(r, 1_500));
  assert.equal(frozenRead, undefined, 'no answer while the node is frozen');
  sim().node('sim-b').heal();
  const thawed = await reading;
  assert.equal(thawed.code, 0, thawed.stderr);
  assert.ok(thawed.stdout.equals(content), 'the read held during the freeze completes after it');
  mark(`read across a 1.5 s freeze of sim-b took ${(thawed.ms / 1000).toFixed(1)} s`);

  // Crash nfs-b's node under an established connection: the dead machine sends nothing.
  const toB = await openConnection(address.port);
  await eventually('the connection is spliced to nfs-b', async () =>
    sim()
      .serviceProxy.connections()
      .some((c) => c.pod === `${NS}/nfs-b` && c.state === 'passing')
      ? true
      : undefined,
  );
  await sim().node('sim-b').crash();
  const seen = await eventually(
    "the proxy saw nfs-b's socket end (the process is dead)",
    async () =>
      sim()
        .serviceProxy.connections()
        .find((c) => c.pod === `${NS}/nfs-b` && c.upstreamEvent),
    10_000,
  );
  assert.equal(seen.state, 'silent');
  await new Promise((r) => setTimeout(r, 3_000));
  assert.equal(
    toB.ended(),
    undefined,
    `the client heard nothing in 3 s (the backend's ${seen.upstreamEvent} was withheld)`,
  );
  mark(`sim-b crashed; backend ${seen.upstreamEvent}, client silent`);

  // The machine boots again: it knows no connection, so the client is reset.
  sim().node('sim-b').heal();
  const afterReboot = await eventually(
    'the client is reset after the reboot',
    async () => toB.ended(),
    10_000,
  );
  assert.match(afterReboot, /ECONNRESET|close/);
  toB.socket.destroy();
  mark('sim-b healed: the client was reset');
  await core().deleteNamespacedPod({ namespace: NS, name: 'nfs-x', gracePeriodSeconds: 0 });
});

/** The preset's NFSv3 server container exactly (KILL added, MOUNT port, run emptyDir on /run), over an emptyDir export. */
function nfsV3Pod(name: string, app: string): V1Pod {
  const server = nfsServerContainer(`${NFS_SERVER_IMAGE}:dev`, EXPORT, { versions: ['3', '4.1'] });
  return {
    metadata: { name, namespace: NS, labels: { app } },
    spec: {
      nodeName: 'sim-a',
      restartPolicy: 'Never',
      terminationGracePeriodSeconds: 5,
      containers: [
        {
          ...server,
          readinessProbe: { tcpSocket: { port: 'nfs' }, periodSeconds: 1 },
          volumeMounts: [
            { name: 'data', mountPath: EXPORT },
            { name: NFS_RUN_VOLUME, mountPath: NFS_RUN_MOUNT },
          ],
        },
      ],
      volumes: [
        { name: 'data', emptyDir: {} },
        { name: NFS_RUN_VOLUME, emptyDir: { medium: 'Memory' } },
      ],
    },
  };
}

/** The pod's rpcbind: a process of its sandbox running `rpcbind -f`. */
function rpcbindOf(pod: string): { pid: number; netns: string } | undefined {
  const worker = sim()
    .node('sim-a')
    .pods()
    .find((w) => w.key === `${NS}/${pod}`);
  for (const pid of worker?.processes() ?? []) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] === 'rpcbind')
        return { pid, netns: readlinkSync(`/proc/${pid}/ns/net`) };
    } catch {
      // exited meanwhile
    }
  }
  return undefined;
}

test('NFSv3 pods: one rpcbind per pod (no clash on one machine), v3 writes through the Service, rpcbind goes with the pod', async (t) => {
  const startedAt = performance.now();
  const mark = (what: string) =>
    t.diagnostic(`${what} at ${((performance.now() - startedAt) / 1000).toFixed(1)} s`);
  const hostSocketBefore = existsSync('/run/rpcbind.sock');
  await core().createNamespacedService({
    namespace: NS,
    body: {
      metadata: { name: 'nfs3' },
      spec: {
        selector: { app: 'nfs3' },
        ports: [
          { name: 'nfs', port: 2049, targetPort: 'nfs' },
          { name: 'nfs-mount', port: 20048, targetPort: 'nfs-mount' },
        ],
      },
    },
  });
  const writerBin = buildWriter();
  await core().createNamespacedPod({ namespace: NS, body: nfsV3Pod('nfs3-a', 'nfs3') });
  await core().createNamespacedPod({ namespace: NS, body: nfsV3Pod('nfs3-x', 'other3') });
  const pods = await Promise.all([waitReady('nfs3-a'), waitReady('nfs3-x')]);
  mark('two NFSv3 pods ready on sim-a');

  const rpcA = rpcbindOf('nfs3-a');
  const rpcX = rpcbindOf('nfs3-x');
  assert.ok(rpcA && rpcX, 'each pod has its rpcbind');
  const hostNet = readlinkSync('/proc/self/ns/net');
  assert.ok(
    rpcA.netns !== hostNet && rpcX.netns !== hostNet && rpcA.netns !== rpcX.netns,
    `each rpcbind in a network namespace of its own (${rpcA.netns}, ${rpcX.netns}; host ${hostNet})`,
  );
  assert.equal(existsSync('/run/rpcbind.sock'), hostSocketBefore, "the host's /run is untouched");
  for (const p of pods) {
    const log = readFileSync(
      join(sim().root, 'pods', p.metadata?.uid as string, 'logs', 'server.log'),
      'utf8',
    );
    const line = log.split('\n').find((l) => l.includes('rpcbind not started'));
    assert.match(String(line), /"reason":"rpcbind answers"/, "the entrypoint used the pod's rpcbind");
  }

  const nfs = await sim().serviceAddress(NS, 'nfs3', 'nfs');
  const mount = await sim().serviceAddress(NS, 'nfs3', 'nfs-mount');
  assert.notEqual(nfs.port, mount.port);
  const writer = startWriter(await writerBin, {
    version: 3,
    host: nfs.host,
    port: nfs.port,
    mountPort: mount.port,
    exportPath: EXPORT,
    file: 'v3.bin',
    count: 20,
  });
  await writer.waitForAck(20, 30_000);
  await writer.exited;
  mark('20 NFSv3 records acknowledged through the Service (nfs + nfs-mount)');
  const dataA = join(sim().root, 'pods', pods[0].metadata?.uid as string, 'volumes', 'data', 'v3.bin');
  assert.equal(readFileSync(dataA).length, 20 * 64, "the records are in nfs3-a's export");
  // The other pod serves v3 too, beside it.
  const other = startWriter(await writerBin, {
    version: 3,
    host: '127.0.0.1',
    port: sim().hostPort(NS, 'nfs3-x', 2049) as number,
    mountPort: sim().hostPort(NS, 'nfs3-x', 20048) as number,
    exportPath: EXPORT,
    file: 'x.bin',
    count: 3,
  });
  await other.waitForAck(3, 30_000);
  await other.exited;

  await core().deleteNamespacedPod({ namespace: NS, name: 'nfs3-a' });
  await eventually(
    'nfs3-a gone from sim-a',
    async () => (rpcbindOf('nfs3-a') ? undefined : true),
    20_000,
    100,
  );
  assert.equal(processRuns(rpcA.pid), false, "nfs3-a's rpcbind went with its pod");
  assert.ok(processRuns(rpcX.pid), "nfs3-x's rpcbind still runs");
  await core().deleteNamespacedPod({ namespace: NS, name: 'nfs3-x', gracePeriodSeconds: 0 });
  await eventually(
    'nfs3-x rpcbind gone',
    async () => (processRuns(rpcX.pid) ? undefined : true),
    20_000,
    100,
  );
  mark('both pods deleted, their rpcbinds gone');
});
