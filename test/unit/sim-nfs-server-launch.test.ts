/**
 * The simulated kubelet's launch of the shipped NFS server image (pure): the manager's
 * preset container becomes `node dist/server/nfs-ganesha/main.js` as root with exactly
 * the preset's capabilities, its NFS port a per-pod host port, ganesha bound to
 * loopback, its run dir the pod's emptyDir (or the container's own layer), and the
 * pseudo path (a client-side path) left untranslated.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { CAPABILITIES } from '../../dev/sim/runtime/capabilities.ts';
import {
  imageDefaultPorts,
  type Launch,
  type LaunchContext,
  NFS_SERVER_IMAGE,
  resolveLaunch,
} from '../../dev/sim/runtime/container-launch.ts';
import { NFS_RUN_DIR, nfsServerContainer } from '../../manager/share-model/nfs-server-preset.ts';

const ctx: LaunchContext = {
  repoRoot: '/repo',
  nodePath: '/sim/image/node',
  podIP: '10.244.0.7',
  hostIP: '127.0.0.1',
  kubeconfigPath: '/sim/pods/u1/kubeconfig',
  ports: new Map([
    [2049, 41049],
    [20048, 41048],
  ]),
  mounts: new Map([
    ['/export', '/sim/volumes/pv-a'],
    [NFS_RUN_DIR, '/sim/pods/u1/volumes/nfs-run'],
  ]),
  basePath: '/usr/bin',
  hostCaps: CAPABILITIES,
  rootfsDir: '/sim/pods/u1/rootfs/server',
};

const preset = (): V1Container => nfsServerContainer(`${NFS_SERVER_IMAGE}:dev`, '/export');
const pod = (c: V1Container): V1Pod => ({
  metadata: { name: 'sm-a-1', namespace: 'shares', uid: 'u1' },
  spec: { containers: [c] },
});

function processOf(launch: Launch): Extract<Launch, { kind: 'process' }> {
  assert.equal(launch.kind, 'process', JSON.stringify(launch));
  return launch as Extract<Launch, { kind: 'process' }>;
}

test("the preset container runs the entrypoint as root with exactly the preset's capabilities", () => {
  const launch = processOf(resolveLaunch(pod(preset()), preset(), ctx));
  assert.deepEqual(launch.args, ['/repo/dist/server/nfs-ganesha/main.js']);
  assert.equal(launch.script, 'dist/server/nfs-ganesha/main.js');
  assert.deepEqual([launch.identity.uid, launch.identity.gid, launch.identity.home], [0, 0, '/root']);
  assert.deepEqual(launch.identity.afterExec.effective, [
    'CAP_CHOWN',
    'CAP_DAC_OVERRIDE',
    'CAP_DAC_READ_SEARCH',
    'CAP_FOWNER',
    'CAP_FSETID',
    'CAP_SETGID',
    'CAP_SETUID',
  ]);
  assert.equal(launch.identity.noNewPrivs, true, 'allowPrivilegeEscalation: false');
});

test('ports are per pod, the bind address loopback, paths translated but the pseudo path', () => {
  const { env } = processOf(resolveLaunch(pod(preset()), preset(), ctx));
  assert.equal(env.LEASEHOLD_NFS_PORT, '41049', "the preset's 2049 becomes the pod's host port");
  assert.equal(env.LEASEHOLD_NFS_MOUNT_PORT, '41048', 'the unset NFSv3 MOUNT port gets one too');
  assert.equal(env.LEASEHOLD_NFS_BIND_ADDR, '127.0.0.1');
  assert.equal(env.LEASEHOLD_NFS_EXPORT_PATH, '/sim/volumes/pv-a');
  assert.equal(env.LEASEHOLD_NFS_RUN_DIR, '/sim/pods/u1/volumes/nfs-run', 'the emptyDir mounted there');
  assert.equal(env.LEASEHOLD_NFS_PSEUDO_PATH, '/export', 'what clients mount is not a host path');
  assert.deepEqual(imageDefaultPorts(pod(preset())), [2049, 20048]);
});

test('a wildcard or the pod IP binds loopback; another address is passed on', () => {
  const withBind = (value: string) => {
    const c = { ...preset(), env: [...(preset().env ?? []), { name: 'LEASEHOLD_NFS_BIND_ADDR', value }] };
    return processOf(resolveLaunch(pod(c), c, ctx)).env.LEASEHOLD_NFS_BIND_ADDR;
  };
  assert.equal(withBind('0.0.0.0'), '127.0.0.1');
  assert.equal(withBind('::'), '127.0.0.1');
  assert.equal(withBind('10.244.0.7'), '127.0.0.1', 'the pod IP is bound nowhere');
  assert.equal(withBind('192.0.2.1'), '192.0.2.1');
});

test('without a volume on the run dir it is the container’s own, never a shared host path', () => {
  const c: V1Container = {
    name: 'server',
    image: `${NFS_SERVER_IMAGE}:v1`,
    env: [{ name: 'LEASEHOLD_NFS_EXPORT_PATH', value: '/export' }],
  };
  const noRunMount = { ...ctx, mounts: new Map([['/export', '/sim/volumes/pv-a']]) };
  const unset = processOf(resolveLaunch(pod(c), c, noRunMount)).env;
  assert.equal(unset.LEASEHOLD_NFS_RUN_DIR, '/sim/pods/u1/rootfs/server/run/leasehold-nfs');
  const set = { ...c, env: [...(c.env ?? []), { name: 'LEASEHOLD_NFS_RUN_DIR', value: '/var/run/x' }] };
  assert.equal(
    processOf(resolveLaunch(pod(set), set, noRunMount)).env.LEASEHOLD_NFS_RUN_DIR,
    '/sim/pods/u1/rootfs/server/var/run/x',
  );
  // Unset, with the emptyDir mounted at the default: the emptyDir.
  assert.equal(
    processOf(resolveLaunch(pod(c), c, ctx)).env.LEASEHOLD_NFS_RUN_DIR,
    '/sim/pods/u1/volumes/nfs-run',
  );
});

test('an unknown image names the NFS image among those the nodes run', () => {
  const launch = resolveLaunch(pod(preset()), { name: 'x', image: 'ganesha/nfs:latest' }, ctx);
  assert.equal(launch.kind, 'error');
  assert.match((launch as { message: string }).message, /leasehold\.dev\/nfs-ganesha:<tag>/);
});
