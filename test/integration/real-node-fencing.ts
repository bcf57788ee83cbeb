/**
 * The fencing CSI driver on real nodes, for real-node.test.ts (dev/csi with `fencing`
 * and `provisioning`): a PVC of the driver's StorageClass is provisioned by the real
 * external-provisioner (CreateVolume: a backing directory holding the volume's ext4
 * image, the block kind; the capacity recorded) and bound; a PVC asking ReadWriteMany is refused by CreateVolume, naming the mode. A
 * pod on `a` gets the volume through a's own view (ControllerPublish granted it, the
 * VolumeAttachment's publish context names it; NodeStage mounted the image's ext4 through
 * a loop device over the view) and a writer in a's namespaces appends numbered lines
 * through the pod's volume on a descriptor it keeps open, each synced (fdatasync: an
 * acknowledged write, as an NFS COMMIT). a's storage access is seen by the node's
 * storage leftover check while a runs (its fencefs and loop device: the check can fail).
 * A file handle of the file taken on a (name_to_handle_at, dev/fuse leasehold-fhandle)
 * opens the same file on b's mount after the move (open_by_handle_at: what ganesha's
 * handles need), and fails with EIO on a after the revoke (a direct read, while a is still frozen). Then `a` is
 * frozen mid-write, its pod force-deleted and the volume dropped from a's
 * status.volumesInUse (the manager's `volumes-in-use` handoff,
 * manager/failover/volume-handoff.ts): the real attach-detach controller detaches, the
 * attacher's ControllerUnpublish revokes a's view — on the host, while a is frozen —
 * and only then is the volume attached to `b` (a pod there). Thawed, a's writer gets
 * EIO on its open descriptor and on a fresh open (its syncs), and writes nothing more; b reads
 * every line a synced before it froze, at most the one in flight besides, and nothing
 * of a after the revoke; the driver's access log passes the order
 * check (test/unit/csi-fencing.test.ts proves it fails on a violation). Deleting the
 * PVC deletes the volume (DeleteVolume: the directory gone).
 * Not checked here: a crashed or partitioned `a` (the revoke never needs the node: the
 * same path as frozen); leftovers (the caller's stop test: csi.stop() fails on a view's
 * process or mount, and it kills the driver to see its views die by parent-death signal).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { CoreV1Api, PatchStrategy, StorageV1Api, setHeaderOptions } from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/types.ts';
import { accessOrderViolations, revokeBeforeGrantElsewhere } from '../../dev/csi/access-log.ts';
import { STORAGE_CLASS } from '../../dev/csi/config.ts';
import type { CsiController } from '../../dev/csi/controller.ts';
import { fencefsBinary } from '../../dev/csi/fencefs-binary.ts';
import { nodeStorageLeftovers } from '../../dev/csi/view-leftovers.ts';
import { nodeBinaries } from '../../dev/node/binaries.ts';
import type { RealNode } from '../../dev/node/node.ts';
import { sleep } from '../../lib/clock.ts';
import { eventually } from '../support/cluster.ts';

const NS = 'default';
const CLAIM = 'fence-claim';

/** The node's PID 1 on the host (its netns path is /proc/<pid1>/ns/net). */
function pid1Of(node: RealNode): number {
  const pid = Number(/^\/proc\/(\d+)\/ns\/net$/.exec(node.netnsPath ?? '')?.[1]);
  assert.ok(pid > 0, `${node.name} is running (netns ${node.netnsPath})`);
  return pid;
}

/** The pod's mount of the CSI volume `pv`, a path in its node's mount namespace. */
const podVolumePath = (node: RealNode, podUid: string, pv: string) =>
  join(node.layout.kubeletRoot, 'pods', podUid, 'volumes', 'kubernetes.io~csi', pv, 'mount');

/**
 * A shell in the node's pid and mount namespaces (so the node's freeze stops it)
 * appending `n` lines to `file` every 50 ms on one descriptor held open, each synced
 * (`sync -d`: fdatasync, so "ok" is a write on the storage, not in a's page cache):
 * "ok n" or "err n" on stdout per line; after 5 errors a fresh open and sync is tried
 * once ("reopen ok" / "reopen err"), then it exits; killing the returned process kills it too. Its stderr
 * carries the shell's error messages.
 */
function startWriter(node: RealNode, file: string): { proc: ChildProcess; out: string[]; err: string[] } {
  const script = [
    `exec 3>>'${file}' || exit 3`,
    'i=0; e=0',
    'while [ $i -lt 2400 ] && [ $e -lt 5 ]; do',
    '  i=$((i+1))',
    `  if echo $i >&3 && sync -d '${file}'; then echo "ok $i"; else e=$((e+1)); echo "err $i"; fi`,
    '  sleep 0.05',
    'done',
    `if echo again >>'${file}' && sync -d '${file}'; then echo "reopen ok"; else echo "reopen err"; fi`,
  ].join('\n');
  // setpriv's parent-death signal: killing nsenter (its parent, on the host) ends the
  // shell, which is in the node's pid namespace and would otherwise live on.
  const argv = ['--target', String(pid1Of(node)), '--pid', '--mount', '--', 'setpriv', '--pdeathsig', 'KILL'];
  const proc = spawn('nsenter', [...argv, 'sh', '-c', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  const out: string[] = [];
  const err: string[] = [];
  proc.stdout?.on('data', (b: Buffer) => out.push(...b.toString().split('\n').filter(Boolean)));
  proc.stderr?.on('data', (b: Buffer) => err.push(...b.toString().split('\n').filter(Boolean)));
  return { proc, out, err };
}

/** A file's text as a process in the node's mount namespace reads it. */
const readInNode = (node: RealNode, file: string) =>
  execFileSync('nsenter', ['--target', String(pid1Of(node)), '--mount', '--', 'cat', file], {
    encoding: 'utf8',
    timeout: 10_000,
  });

/** leasehold-fhandle (dev/fuse) run in the node's mount namespace: its stdout, or its error line. */
function fhandleInNode(node: RealNode, args: readonly string[]): { out: string } | { err: string } {
  const bin = join(dirname(fencefsBinary()), 'leasehold-fhandle');
  try {
    return {
      out: execFileSync('nsenter', ['--target', String(pid1Of(node)), '--mount', '--', bin, ...args], {
        encoding: 'utf8',
        timeout: 10_000,
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    };
  } catch (err) {
    return { err: String((err as { stderr?: string }).stderr ?? err).trim() };
  }
}

const lastOk = (out: readonly string[]) =>
  Math.max(0, ...out.filter((l) => l.startsWith('ok ')).map((l) => Number(l.slice(3))));

export async function fencedHandoff(
  cluster: Cluster,
  a: RealNode,
  b: RealNode,
  csi: CsiController,
): Promise<void> {
  const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
  const storage = cluster.kubeConfig.makeApiClient(StorageV1Api);
  const { pauseImage } = await nodeBinaries();
  const claim = (name: string, mode: string) =>
    core.createNamespacedPersistentVolumeClaim({
      namespace: NS,
      body: {
        metadata: { name },
        spec: {
          accessModes: [mode],
          storageClassName: STORAGE_CLASS,
          resources: { requests: { storage: '64Mi' } },
        },
      },
    });
  const pod = (name: string, node: RealNode) =>
    core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name },
        spec: {
          nodeSelector: { 'kubernetes.io/hostname': node.name },
          containers: [
            {
              name: 'pause',
              image: pauseImage,
              imagePullPolicy: 'Never',
              volumeMounts: [{ name: 'data', mountPath: '/data' }],
            },
          ],
          volumes: [{ name: 'data', persistentVolumeClaim: { claimName: CLAIM } }],
          terminationGracePeriodSeconds: 1,
        },
      },
    });
  const running = (name: string) =>
    eventually(
      `pod ${name} Running`,
      async () => {
        const p = await core.readNamespacedPod({ namespace: NS, name });
        return p.status?.phase === 'Running' && p.status.containerStatuses?.[0]?.ready ? p : undefined;
      },
      90_000,
      200,
    );
  const attachmentOn = async (pv: string, node: string) =>
    (await storage.listVolumeAttachment()).items.find(
      (va) => va.spec?.source?.persistentVolumeName === pv && va.spec.nodeName === node,
    );

  // Provisioned and bound; a multi-node writer refused by CreateVolume.
  const t0 = performance.now();
  await Promise.all([claim(CLAIM, 'ReadWriteOnce'), claim('fence-rwx', 'ReadWriteMany')]);
  const pv = await eventually(
    `PVC ${CLAIM} Bound`,
    async () => {
      const c = await core.readNamespacedPersistentVolumeClaim({ namespace: NS, name: CLAIM });
      return c.status?.phase === 'Bound' ? c.spec?.volumeName : undefined;
    },
    60_000,
    100,
  );
  console.log(`real node fencing: PVC create to Bound ${Math.round(performance.now() - t0)} ms`);
  const provisioned = await core.readPersistentVolume({ name: pv });
  const handle = provisioned.spec?.csi?.volumeHandle ?? '';
  assert.equal(provisioned.spec?.csi?.driver, csi.driverName);
  assert.deepEqual(await csi.volume(handle), {
    dir: join(csi.backingDir, handle),
    capacityBytes: 64 * 1024 * 1024,
  });
  const refused = await eventually(
    'the RWX claim refused by CreateVolume',
    async () =>
      (await core.listNamespacedEvent({ namespace: NS })).items.find(
        (e) => e.involvedObject.name === 'fence-rwx' && e.reason === 'ProvisioningFailed',
      )?.message,
    30_000,
    200,
  );
  assert.match(refused, /access mode MULTI_NODE_MULTI_WRITER is not served/);
  await core.deleteNamespacedPersistentVolumeClaim({ namespace: NS, name: 'fence-rwx' });

  // a's pod gets a's own view; a writer there writes through it.
  await pod('fence-a', a);
  const podA = await running('fence-a');
  const vaA = await attachmentOn(pv, a.name);
  const viewA = vaA?.status?.attachmentMetadata?.view ?? '';
  assert.match(viewA, new RegExp(`/views/${handle}/${a.name}\\.\\d+$`), "the publish context names a's view");
  const mountA = podVolumePath(a, podA.metadata?.uid ?? '', pv);
  const writer = startWriter(a, join(mountA, 'log'));
  try {
    await eventually(
      'a writes through its view',
      async () => (lastOk(writer.out) >= 10 ? true : undefined),
      20_000,
    );
    // The storage leftover check of a's crash and stop sees a's access while it lasts.
    const access = nodeStorageLeftovers(csi.backingDir, a.name);
    assert.ok(
      access.some((l) => l.startsWith('leasehold-fencefs process')) &&
        access.some((l) => l.startsWith('loop device')),
      `the node storage check sees a's view and loop device: ${access.join('; ')}`,
    );
    const fh = fhandleInNode(a, ['get', join(mountA, 'log')]);
    assert.ok('out' in fh, `a file handle on a: ${JSON.stringify(fh)}`);

    // Frozen mid-write; the handoff as the manager does it.
    a.freeze();
    await sleep(300);
    const beforeFreeze = lastOk(writer.out);
    const t1 = performance.now();
    await core.deleteNamespacedPod({ namespace: NS, name: 'fence-a', gracePeriodSeconds: 0 });
    const nodeA = await core.readNode({ name: a.name });
    const entry = `kubernetes.io/csi/${csi.driverName}^${handle}`;
    const index = nodeA.status?.volumesInUse?.indexOf(entry) ?? -1;
    if (index >= 0)
      await core.patchNodeStatus(
        {
          name: a.name,
          body: [
            { op: 'test', path: `/status/volumesInUse/${index}`, value: entry },
            { op: 'remove', path: `/status/volumesInUse/${index}` },
          ],
        },
        setHeaderOptions('Content-Type', PatchStrategy.JsonPatch),
      );
    await pod('fence-b', b);
    await eventually(
      'a detached (its VolumeAttachment gone)',
      async () => ((await attachmentOn(pv, a.name)) === undefined ? true : undefined),
      60_000,
      200,
    );
    const detachedMs = performance.now() - t1;
    const podB = await running('fence-b');
    console.log(
      `real node fencing: frozen a's pod force-deleted to detached (revoked) ${Math.round(detachedMs)} ms, to b's pod Running ${Math.round(performance.now() - t1)} ms`,
    );
    assert.equal(lastOk(writer.out), beforeFreeze, 'nothing was written while a was frozen');
    // a's handle opens the same file on b's mount (a direct read: what the storage holds).
    const mountB = podVolumePath(b, podB.metadata?.uid ?? '', pv);
    const onB = fhandleInNode(b, ['read', mountB, fh.out.trim()]);
    // Every synced line, and at most the one in flight at the freeze besides (its
    // write(2) in a's page cache, written back by the host kernel's threads, which the
    // freezer does not stop, before the revoke; never acknowledged).
    const lines = (n: number) => Array.from({ length: n }, (_, i) => `${i + 1}\n`).join('');
    const onBNow = readInNode(b, join(mountB, 'log'));
    assert.ok(
      [lines(beforeFreeze), lines(beforeFreeze + 1)].includes(onBNow),
      `b reads every line a synced (${beforeFreeze}), at most one more: ${JSON.stringify(onBNow)}`,
    );
    assert.deepEqual(onB, { out: onBNow }, "a's file handle opens the same file on b after the move");
    // On a (still frozen; its mounts as it left them), the same handle reaches nothing.
    const onA = fhandleInNode(a, ['read', mountA, fh.out.trim()]);
    assert.ok(
      'err' in onA && /pread: EIO|open_by_handle_at: EIO/.test(onA.err),
      `the handle fails with EIO on a after the revoke (frozen): ${JSON.stringify(onA)}`,
    );

    const log = await csi.accessLog();
    assert.deepEqual(accessOrderViolations(log), [], 'no grant elsewhere while a view was live');
    const order = revokeBeforeGrantElsewhere(log, handle, a.name);
    assert.ok(order, `a's revoke precedes b's grant: ${JSON.stringify(log)}`);
    assert.equal(order.grant.node, b.name);
    assert.equal(order.revoke.view, viewA);

    // Thawed, a's writer is refused: EIO on its open descriptor, and on a fresh open.
    await a.heal();
    await eventually(
      'a writer refused after the thaw',
      async () => (writer.out.includes('reopen err') || writer.out.includes('reopen ok') ? true : undefined),
      30_000,
      100,
    );
    assert.equal(writer.out.includes('reopen ok'), false, 'a fresh open on a failed');
    // Every write a acknowledged is on the volume b reads, so none succeeded after the
    // revoke. NB: not `beforeFreeze` itself: the ack of the line in flight at the freeze may
    // reach the test only after the thaw (a CI run: 12 of 11), and that line is on b.
    const onBLines = onBNow === lines(beforeFreeze + 1) ? beforeFreeze + 1 : beforeFreeze;
    assert.ok(
      lastOk(writer.out) <= onBLines,
      `no write of a succeeded after the revoke: a acknowledged ${lastOk(writer.out)} lines, b reads ${onBLines}`,
    );
    assert.ok(
      writer.err.some((l) => /Input\/output error|I\/O error/.test(l)),
      `a's writes failed with EIO: ${writer.err.join(' | ')}`,
    );

    // b sees what a wrote before the revoke, nothing of a after it.
    assert.equal(readInNode(b, join(mountB, 'log')), onBNow);
  } finally {
    writer.proc.kill('SIGKILL');
  }

  // Delete: the VolumeAttachment first (b unpublished), then the volume itself.
  await core.deleteNamespacedPod({ namespace: NS, name: 'fence-b', gracePeriodSeconds: 0 });
  await eventually(
    'b detached',
    async () => ((await attachmentOn(pv, b.name)) === undefined ? true : undefined),
    60_000,
    200,
  );
  await core.deleteNamespacedPersistentVolumeClaim({ namespace: NS, name: CLAIM });
  await eventually(
    'the PV deleted with its volume',
    async () =>
      (await core.listPersistentVolume()).items.some((p) => p.metadata?.name === pv) ||
      (await csi.volume(handle)) !== undefined
        ? undefined
        : true,
    60_000,
    200,
  );
  assert.deepEqual(
    (await csi.accessLog()).filter((e) => e.pv === handle).map((e) => `${e.op} ${e.node}`),
    [`grant ${a.name}`, `revoke ${a.name}`, `grant ${b.name}`, `revoke ${b.name}`],
  );
}
