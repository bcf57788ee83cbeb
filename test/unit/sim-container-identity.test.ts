/**
 * The simulated kubelet's pure model of a container's identity on a real node
 * (kubelet + containerd 2.x + runc, see dev/sim/runtime/container-identity.ts): uid, gid and
 * groups from image and securityContext, runAsNonRoot refusals, the capability sets
 * containerd writes and what the kernel leaves after execve, and the setpriv options.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Container, V1Pod, V1PodSecurityContext } from '@kubernetes/client-node';
import { emptyDirMode, tokenFileMode } from '../../dev/sim/runtime/container-files.ts';
import {
  CAPABILITIES,
  CONTAINERD_DEFAULT_CAPS,
  type ContainerIdentity,
  capsFromMask,
  capsToMask,
  type IdentityResult,
  type ImageUser,
  resolveIdentity,
  setprivArgs,
} from '../../dev/sim/runtime/container-identity.ts';
import { type LaunchContext, resolveLaunch } from '../../dev/sim/runtime/container-launch.ts';

// The simulator's own caps on the test machine may lack some; the model takes them as input.
const HOST_CAPS = CAPABILITIES.filter((c) => c !== 'CAP_SYS_RESOURCE');
const DEFAULTS_BY_BIT = CAPABILITIES.filter((c) => CONTAINERD_DEFAULT_CAPS.includes(c));

const ctx: LaunchContext = {
  repoRoot: '/repo',
  nodePath: '/sim/image/node',
  podIP: '10.244.0.9',
  hostIP: '127.0.0.1',
  kubeconfigPath: '/sim/pods/u1/kubeconfig',
  ports: new Map(),
  mounts: new Map(),
  basePath: '/usr/bin',
  hostCaps: HOST_CAPS,
  rootfsDir: '/sim/pods/u1/rootfs/c',
};

function pod(containers: V1Container[], securityContext?: V1PodSecurityContext): V1Pod {
  return {
    metadata: { name: 'sm-a', namespace: 'shares', uid: 'u1' },
    spec: { containers, ...(securityContext ? { securityContext } : {}) },
  };
}

const agent = (securityContext?: V1Container['securityContext']): V1Container => ({
  name: 'agent',
  image: 'leasehold.dev/leasehold:dev',
  args: ['agent'],
  ...(securityContext ? { securityContext } : {}),
});
const server = (securityContext?: V1Container['securityContext']): V1Container => ({
  name: 'server',
  image: 'leasehold.dev/demo-share-server:dev',
  ...(securityContext ? { securityContext } : {}),
});

/** The identity the launch of the pod's only container carries (through resolveLaunch). */
function identityOf(p: V1Pod): ContainerIdentity {
  const launch = resolveLaunch(p, p.spec?.containers[0] as V1Container, ctx);
  assert.equal(launch.kind, 'process', JSON.stringify(launch));
  return (launch as { identity: ContainerIdentity }).identity;
}

function errorOf(result: IdentityResult | ReturnType<typeof resolveLaunch>): {
  reason: string;
  message: string;
} {
  assert.equal(result.kind, 'error', JSON.stringify(result));
  return result as { reason: string; message: string };
}

test("containerd's default set is the mask a stock container shows (a80425fb)", () => {
  assert.equal(capsToMask(CONTAINERD_DEFAULT_CAPS), '00000000a80425fb');
  assert.deepEqual(capsFromMask('00000000a80425fb'), DEFAULTS_BY_BIT);
  assert.deepEqual(capsFromMask('0000000000000020'), ['CAP_KILL']);
  assert.equal(CAPABILITIES[40], 'CAP_CHECKPOINT_RESTORE');
});

test('the agent image runs as 65532:65532 with the default bounding set and no effective caps', () => {
  const id = identityOf(pod([agent()]));
  assert.equal(id.uid, 65532);
  assert.equal(id.gid, 65532);
  assert.deepEqual(id.groups, [65532]);
  assert.equal(id.home, '/home/nonroot');
  assert.deepEqual(id.spec.effective, [...CONTAINERD_DEFAULT_CAPS], 'containerd writes the defaults');
  assert.deepEqual(id.afterExec.bounding, DEFAULTS_BY_BIT);
  assert.deepEqual(id.afterExec.effective, [], 'a non-root uid keeps nothing across execve');
  assert.deepEqual(id.afterExec.permitted, []);
  assert.equal(id.noNewPrivs, false);
});

test("the chart's restricted securityContext: no caps at all, no_new_privs", () => {
  const id = identityOf(
    pod([
      agent({
        runAsNonRoot: true,
        runAsUser: 65532,
        runAsGroup: 65532,
        allowPrivilegeEscalation: false,
        readOnlyRootFilesystem: true,
        capabilities: { drop: ['ALL'] },
      }),
    ]),
  );
  assert.deepEqual([id.uid, id.gid, id.groups], [65532, 65532, [65532]]);
  assert.deepEqual(id.afterExec.bounding, []);
  assert.deepEqual(id.afterExec.effective, []);
  assert.equal(id.noNewPrivs, true);
});

test('the share server image runs as root with the default set effective', () => {
  const id = identityOf(pod([server()]));
  assert.deepEqual([id.uid, id.gid, id.groups, id.home], [0, 0, [0], '/root']);
  assert.deepEqual(id.afterExec.effective, DEFAULTS_BY_BIT);
  assert.deepEqual(id.afterExec.permitted, DEFAULTS_BY_BIT);
  assert.deepEqual(id.afterExec.inheritable, []);
  assert.deepEqual(id.afterExec.ambient, []);
});

test('root with drop ALL, add KILL holds exactly CAP_KILL; a non-root uid with add KILL holds nothing', () => {
  const root = identityOf(pod([server({ capabilities: { drop: ['ALL'], add: ['KILL'] } })]));
  assert.deepEqual(root.afterExec.effective, ['CAP_KILL']);
  assert.deepEqual(root.afterExec.bounding, ['CAP_KILL']);
  const nonRoot = identityOf(pod([agent({ capabilities: { drop: ['ALL'], add: ['KILL'] } })]));
  assert.deepEqual(nonRoot.spec.effective, ['CAP_KILL'], 'containerd puts it into the spec ...');
  assert.deepEqual(nonRoot.afterExec.effective, [], '... and execve clears it (kubernetes#56374)');
  assert.deepEqual(nonRoot.afterExec.bounding, ['CAP_KILL']);
});

test('add/drop names: case-insensitive, drops win over adds, a CAP_ prefix is doubled and ignored as runc does', () => {
  const lower = identityOf(pod([server({ capabilities: { drop: ['all'], add: ['kill', 'Net_Admin'] } })]));
  assert.deepEqual(lower.afterExec.effective, ['CAP_KILL', 'CAP_NET_ADMIN']);
  const dropWins = identityOf(
    pod([server({ capabilities: { add: ['NET_ADMIN'], drop: ['NET_ADMIN', 'KILL'] } })]),
  );
  assert.ok(!dropWins.afterExec.effective.includes('CAP_NET_ADMIN'));
  assert.ok(!dropWins.afterExec.effective.includes('CAP_KILL'));
  assert.ok(dropWins.afterExec.effective.includes('CAP_CHOWN'), 'the other defaults stay');
  const prefixed = identityOf(pod([server({ capabilities: { drop: ['ALL'], add: ['CAP_KILL'] } })]));
  assert.deepEqual(prefixed.spec.effective, ['CAP_CAP_KILL']);
  assert.deepEqual(prefixed.ignoredCaps, ['CAP_CAP_KILL']);
  assert.deepEqual(prefixed.afterExec.effective, [], 'CAP_KILL written with its prefix grants nothing');
  const prefixedDrop = identityOf(pod([server({ capabilities: { drop: ['CAP_KILL'] } })]));
  assert.ok(prefixedDrop.afterExec.effective.includes('CAP_KILL'), 'nor does a prefixed drop remove it');
});

test('add ALL gives the runtime its own caps; privileged gives them whatever was dropped', () => {
  const all = identityOf(pod([server({ capabilities: { add: ['ALL'], drop: ['CHOWN'] } })]));
  assert.deepEqual(
    all.afterExec.effective,
    HOST_CAPS.filter((c) => c !== 'CAP_CHOWN'),
  );
  const privileged = identityOf(pod([server({ privileged: true, capabilities: { drop: ['ALL'] } })]));
  assert.deepEqual(privileged.afterExec.effective, HOST_CAPS);
  assert.deepEqual(privileged.afterExec.inheritable, []);
  // A cap the simulator itself lacks cannot be granted: a clear error, not a silent gap.
  const tooMuch = server({ capabilities: { add: ['SYS_RESOURCE'] } });
  const refused = errorOf(resolveLaunch(pod([tooMuch]), tooMuch, ctx));
  assert.equal(refused.reason, 'RunContainerError');
  assert.match(refused.message, /CAP_SYS_RESOURCE not held by the simulator/);
});

test("runAsNonRoot: the kubelet's refusals, with its messages", () => {
  const root = errorOf(
    resolveLaunch(pod([server({ runAsNonRoot: true })]), server({ runAsNonRoot: true }), ctx),
  );
  assert.equal(root.reason, 'CreateContainerConfigError');
  assert.equal(
    root.message,
    'container has runAsNonRoot and image will run as root (pod: "sm-a_shares(u1)", container: server)',
  );
  const podLevel = pod([server()], { runAsNonRoot: true });
  assert.match(errorOf(resolveLaunch(podLevel, server(), ctx)).message, /image will run as root/);
  const explicitZero = errorOf(
    resolveLaunch(pod([agent()]), agent({ runAsNonRoot: true, runAsUser: 0 }), ctx),
  );
  assert.match(
    explicitZero.message,
    /^container's runAsUser breaks non-root policy \(pod: "sm-a_shares\(u1\)"/,
  );
  const named: ImageUser = {
    user: 'nonroot',
    passwd: [{ name: 'nonroot', uid: 65532, gid: 65532, home: '/home/nonroot' }],
    groups: [],
  };
  const nonNumeric = errorOf(resolveIdentity(pod([]), agent({ runAsNonRoot: true }), named, HOST_CAPS));
  assert.match(nonNumeric.message, /image has non-numeric user \(nonroot\), cannot verify user is non-root/);
  // Without runAsNonRoot the name resolves through the image's passwd.
  const byName = resolveIdentity(pod([]), agent(), named, HOST_CAPS);
  assert.equal(byName.kind === 'identity' && byName.identity.uid, 65532);
  // runAsNonRoot with a non-root image user, or an explicit non-root runAsUser, runs.
  assert.equal(identityOf(pod([agent({ runAsNonRoot: true })])).uid, 65532);
  assert.equal(identityOf(pod([server({ runAsNonRoot: true, runAsUser: 1000 })])).uid, 1000);
});

test('groups: gid from passwd or 0, runAsGroup wins, fsGroup and supplementalGroups merged and sorted', () => {
  const stranger = identityOf(
    pod([server()], { runAsUser: 1000, fsGroup: 2000, supplementalGroups: [3000, 2000] }),
  );
  assert.deepEqual([stranger.uid, stranger.gid], [1000, 0], 'a uid without a passwd entry gets gid 0');
  assert.deepEqual(stranger.groups, [0, 2000, 3000]);
  assert.equal(stranger.home, '/');
  const containerWins = identityOf(
    pod([server({ runAsUser: 65532, runAsGroup: 4000 })], { runAsUser: 1000, runAsGroup: 1000 }),
  );
  assert.deepEqual([containerWins.uid, containerWins.gid, containerWins.groups], [65532, 4000, [4000]]);
  const imageUidOnly = identityOf(pod([agent()], { runAsGroup: 5000 }));
  assert.deepEqual([imageUidOnly.uid, imageUidOnly.gid], [65532, 5000]);
  const member: ImageUser = {
    user: '1001',
    passwd: [{ name: 'app', uid: 1001, gid: 1001, home: '/app' }],
    groups: [
      { name: 'app', gid: 1001, members: ['app'] },
      { name: 'video', gid: 44, members: ['app', 'x'] },
    ],
  };
  const merged = resolveIdentity(pod([], { supplementalGroups: [7] }), agent(), member, HOST_CAPS);
  assert.deepEqual(merged.kind === 'identity' && merged.identity.groups, [7, 44, 1001]);
  const strict = resolveIdentity(
    pod([], { supplementalGroups: [7], supplementalGroupsPolicy: 'Strict' }),
    agent(),
    member,
    HOST_CAPS,
  );
  assert.deepEqual(strict.kind === 'identity' && strict.identity.groups, [7, 1001]);
});

test('setpriv options: uid, gid, groups, no inheritable or ambient caps, the bounding set, no_new_privs', () => {
  const id = identityOf(
    pod([server({ capabilities: { drop: ['ALL'], add: ['KILL', 'NET_BIND_SERVICE'] } })]),
  );
  assert.deepEqual(setprivArgs(id), [
    '--reuid=0',
    '--regid=0',
    '--groups=0',
    '--inh-caps=-all',
    '--ambient-caps=-all',
    '--bounding-set=-all,+kill,+net_bind_service',
  ]);
  const restricted = identityOf(
    pod([agent({ allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } })], { fsGroup: 2000 }),
  );
  assert.deepEqual(setprivArgs(restricted), [
    '--reuid=65532',
    '--regid=65532',
    '--groups=2000,65532',
    '--inh-caps=-all',
    '--ambient-caps=-all',
    '--bounding-set=-all',
    '--no-new-privs',
  ]);
});

test('token kubeconfig and emptyDir modes follow the kubelet: fsUser 0600, fsGroup 0640, else 0644; emptyDir 0777', () => {
  assert.deepEqual(tokenFileMode(pod([agent(), server()])), { uid: 0, gid: 0, mode: 0o644 });
  assert.deepEqual(tokenFileMode(pod([agent(), server()], { runAsUser: 65532 })), {
    uid: 65532,
    gid: 0,
    mode: 0o600,
  });
  // Two different runAsUsers: no fsUser, the default mode.
  assert.deepEqual(tokenFileMode(pod([agent({ runAsUser: 1 }), server({ runAsUser: 2 })])).mode, 0o644);
  assert.deepEqual(tokenFileMode(pod([agent()], { fsGroup: 2000 })), { uid: 0, gid: 2000, mode: 0o640 });
  assert.deepEqual(emptyDirMode(pod([agent()])), { uid: 0, gid: 0, mode: 0o777 });
  assert.deepEqual(emptyDirMode(pod([agent()], { fsGroup: 2000 })), { uid: 0, gid: 2000, mode: 0o2777 });
});
