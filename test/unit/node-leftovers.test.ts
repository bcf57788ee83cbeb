/**
 * The real node's leftover check (dev/node/leftovers.ts) fails on each kind of
 * leftover: the pure judge on hand-made snapshots, then the host probe on a real stray
 * cgroup directory and a real stray process (as root, like the node itself), and it
 * passes once they are gone; a process in namespaces that reuse a stopped node's ids
 * (the kernel recycles them at once) is not that node's while the node holds them,
 * and one in the held namespaces is. The sweep of what a killed run left removes a dead
 * owner's node and keeps a live one. Also: the layout rejects bad names and indexes, the
 * rendered configs keep the node off the host's settings, and the node network's
 * addresses and the API server's egress configuration agree.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { test } from 'node:test';
import { egressSelectorConfig, nodeNetwork } from '../../dev/cluster/node-network.ts';
import { createCgroupRoot, existingCgroups, removeCgroupRoot } from '../../dev/node/cgroups.ts';
import { containerdConfig, kubeletConfiguration, kubeProxyConfiguration } from '../../dev/node/config.ts';
import { nodeLayout } from '../../dev/node/layout.ts';
import {
  findLeftovers,
  type HostSnapshot,
  holdNamespaces,
  hostProcesses,
  hostSnapshot,
  type NodeIdentity,
} from '../../dev/node/leftovers.ts';
import { childOf, namespaceSetupScript } from '../../dev/node/namespaces.ts';
import {
  isStale,
  NODE_DIR_PREFIX,
  OWNER_FILE,
  ownerText,
  parseOwner,
  processStart,
  sweepStaleNodes,
} from '../../dev/node/stale-nodes.ts';
import { sleep } from '../../lib/clock.ts';

const node: NodeIdentity = {
  dir: '/tmp/leasehold-node-abc',
  cgroupRoot: '/leasehold-node-abc',
  namespaces: ['pid:[4026532001]', 'net:[4026532002]', 'mnt:[4026532003]'],
  pids: [4242],
};
const hostNs = ['pid:[4026531836]', 'net:[4026531840]', 'mnt:[4026531841]'];
const init = { pid: 1, cmdline: '/sbin/init', cgroup: '4:pids:/\n', namespaces: hostNs };
const clean: HostSnapshot = {
  processes: [init],
  mountinfo: '31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n',
  cgroups: [],
};

test('a clean host has no leftovers', () => {
  assert.deepEqual(findLeftovers(node, clean), []);
});

test('each kind of leftover is found', () => {
  const cases: [string, Partial<HostSnapshot>, string][] = [
    ['a started pid', { processes: [{ ...init, pid: 4242 }] }, 'started by the node'],
    [
      'a process in the node netns',
      {
        processes: [
          { pid: 7, cmdline: 'sleep', cgroup: '', namespaces: ['pid:[4026531836]', 'net:[4026532002]'] },
        ],
      },
      'in a namespace of the node',
    ],
    [
      'a container in a pod cgroup',
      {
        processes: [
          {
            pid: 8,
            cmdline: '/pause',
            cgroup: '4:pids:/leasehold-node-abc/kubepods/besteffort/pod1/c1\n',
            namespaces: hostNs,
          },
        ],
      },
      'in a cgroup under',
    ],
    [
      'an escaped shim',
      {
        processes: [
          {
            pid: 9,
            cmdline: 'containerd-shim-runc-v2 -address /tmp/leasehold-node-abc/containerd.sock',
            cgroup: '4:pids:/\n',
            namespaces: hostNs,
          },
        ],
      },
      'command line names',
    ],
    ['a stray cgroup', { cgroups: ['/sys/fs/cgroup/pids/leasehold-node-abc/kubepods'] }, 'cgroup'],
    [
      'a mount under the dir',
      { mountinfo: '90 23 0:50 / /tmp/leasehold-node-abc/containerd/rootfs rw - overlay overlay rw\n' },
      'mount',
    ],
    [
      'a bound namespace',
      { mountinfo: '91 23 0:4 net:[4026532002] /run/netns/x rw - nsfs nsfs rw\n' },
      'mount',
    ],
  ];
  for (const [what, change, expected] of cases) {
    const found = findLeftovers(node, { ...clean, ...change });
    const [f, ...more] = found;
    assert.ok(f && more.length === 0, `${what}: exactly one leftover in ${JSON.stringify(found)}`);
    assert.ok(
      (f.kind === 'process' ? f.why : f.kind).includes(expected),
      `${what}: ${JSON.stringify(f)} should say ${expected}`,
    );
  }
  // Another node's cgroup with a name that starts the same is not this node's.
  assert.deepEqual(
    findLeftovers(node, {
      ...clean,
      processes: [
        { pid: 10, cmdline: 'x', cgroup: '4:pids:/leasehold-node-abcd/kubepods\n', namespaces: hostNs },
      ],
    }),
    [],
  );
});

test('the host probe finds a real stray cgroup directory and a real stray process', async () => {
  // Not the real nodes' prefix: a node starting meanwhile must not sweep it.
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-leftover-test-'));
  const identity: NodeIdentity = { dir, cgroupRoot: `/${basename(dir)}`, namespaces: [], pids: [] };
  // `sh -c CMD NAME`: NAME is $0, so the command line names the node's dir.
  // Its own process group: the kill below takes sh's sleep child with it (dash forks it).
  const stray = spawn('sh', ['-c', 'sleep 60', dir], { stdio: 'ignore', detached: true });
  const exited = new Promise((r) => stray.once('exit', r));
  try {
    createCgroupRoot(`${identity.cgroupRoot}/kubepods`);
    await sleep(100);
    const found = findLeftovers(identity, hostSnapshot(identity));
    assert.ok(
      found.some((l) => l.kind === 'process' && l.pid === stray.pid),
      `the stray process is found: ${JSON.stringify(found)}`,
    );
    assert.ok(
      found.some((l) => l.kind === 'cgroup' && l.path.endsWith(`${identity.cgroupRoot}/kubepods`)),
      `the stray cgroup is found: ${JSON.stringify(found)}`,
    );
  } finally {
    process.kill(-(stray.pid as number), 'SIGKILL');
    await exited;
    assert.deepEqual(removeCgroupRoot(identity.cgroupRoot), []);
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(existingCgroups(identity.cgroupRoot), []);
  assert.deepEqual(findLeftovers(identity, hostSnapshot(identity)), []);
});

function isZombie(pid: number): boolean {
  try {
    // state is the field after the parenthesised command name
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z') ?? false;
  } catch {
    return true; // gone
  }
}

/** `unshare` with a child (PID 1 of new pid, net and mnt namespaces) sleeping in them. */
async function namespacedSleeper() {
  const parent = spawn(
    'unshare',
    ['--pid', '--fork', '--net', '--mount', '--propagation', 'private', 'sleep', '60'],
    {
      stdio: 'ignore',
    },
  );
  const exited = new Promise((r) => parent.once('exit', r));
  let child: number | undefined;
  for (let i = 0; i < 100 && child === undefined; i++) {
    child = parent.pid ? childOf(parent.pid) : undefined;
    if (child === undefined) await sleep(20);
  }
  assert.ok(parent.pid && child, 'unshare forked its child');
  const kill = async () => {
    for (const pid of [child, parent.pid]) {
      try {
        process.kill(pid as number, 'SIGKILL');
      } catch {
        // gone
      }
    }
    await exited;
    // unshare (killed too) may exit before its child has finished dying: a process in
    // do_exit still shows its namespaces in /proc.
    for (let i = 0; i < 250 && existsSync(`/proc/${child}`) && !isZombie(child as number); i++)
      await sleep(20);
  };
  return { parent: parent.pid, child, kill };
}

test('a stranger in namespaces made after the node stopped is not its leftover; its own still is', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-leftover-test-'));
  const first = await namespacedSleeper();
  const hold = holdNamespaces(first.child);
  const stranger: Awaited<ReturnType<typeof namespacedSleeper>>[] = [];
  try {
    const identity: NodeIdentity = { dir, cgroupRoot: `/${basename(dir)}`, namespaces: hold.ids, pids: [] };
    const own = findLeftovers(identity, hostSnapshot(identity));
    assert.ok(
      own.some(
        (l) => l.kind === 'process' && l.pid === first.child && l.why === 'in a namespace of the node',
      ),
      `the node's own process is a leftover: ${JSON.stringify(own)}`,
    );
    // The node's processes end; its namespaces are held, as startRealNode holds them
    // until its leftover check is done. Other namespaces made now (by another node,
    // maybe another test process) would get the freed ids if nothing held them.
    await first.kill();
    assert.deepEqual(findLeftovers(identity, hostSnapshot(identity)), [], 'nothing left once they are gone');
    for (let i = 0; i < 3; i++) stranger.push(await namespacedSleeper());
    const procs = hostProcesses();
    const strangers = procs.filter((p) => stranger.some((s) => p.pid === s.child));
    assert.equal(strangers.length, 3, 'the strangers run in their namespaces');
    for (const p of strangers)
      assert.deepEqual(
        p.namespaces.filter((ns) => hold.ids.includes(ns)),
        [],
        `a held namespace id is not given to another (${p.namespaces.join(', ')})`,
      );
    assert.deepEqual(findLeftovers(identity, { ...hostSnapshot(identity), processes: procs }), []);
  } finally {
    hold.release();
    await first.kill();
    for (const s of stranger) await s.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the layout rejects a bad name or index, naming it', () => {
  assert.throws(() => nodeLayout('/tmp/x', 'Node_1', 1), /node name 'Node_1' is not a DNS label/);
  assert.throws(() => nodeLayout('/tmp/x', 'node-1', 0), /node index 0 must be an integer from 1 to 250/);
});

test('the rendered configs keep the node off host-wide settings', () => {
  const layout = nodeLayout('/tmp/leasehold-node-abc', 'node-1', 3);
  assert.equal(layout.cgroupRoot, '/leasehold-node-abc');
  const kubelet = JSON.parse(kubeletConfiguration(layout, { caPath: '/ca.crt' }));
  assert.equal(kubelet.protectKernelDefaults, true, 'the kubelet checks sysctls instead of writing them');
  assert.equal(kubelet.failCgroupV1, false);
  assert.equal(kubelet.cgroupDriver, 'cgroupfs');
  assert.equal(kubelet.cgroupRoot, layout.cgroupRoot);
  const containerd = containerdConfig(layout, '/bin-dir', 'localhost/leasehold/pause:x');
  assert.match(containerd, /'io\.containerd\.nri\.v1\.nri'/, 'NRI (a socket under the host /run) is off');
  assert.match(containerd, /netns_mounts_under_state_dir = true/);
  assert.match(containerd, /sandbox = 'localhost\/leasehold\/pause:x'/);
  const script = namespaceSetupScript(layout, '/bin-dir/pause');
  for (const key of ['vm/overcommit_memory', 'kernel/panic', 'kernel/panic_on_oops'])
    assert.match(script, new RegExp(`mount --bind .* /proc/sys/${key}\\n`), `${key} has a per-node view`);
  assert.ok(script.indexOf('mount -t proc') < script.indexOf('/proc/sys/'), 'views go on the node /proc');
  const proxy = JSON.parse(kubeProxyConfiguration(layout));
  assert.equal(proxy.mode, 'nftables');
  assert.equal(proxy.conntrack.maxPerCore, 0, 'kube-proxy leaves the host-wide nf_conntrack_max alone');
  assert.equal(proxy.clientConnection.kubeconfig, layout.kubeProxyKubeconfig);
  assert.equal(
    proxy.clusterCIDR,
    '10.244.0.0/16',
    "every node's pod range: pods' Service traffic is not masqueraded",
  );
});

test('the node network: the control plane address is on each node, the egress goes to the relay', () => {
  const layout = nodeLayout('/tmp/leasehold-node-abc', 'node-1', 3);
  assert.equal(layout.nodeIp, '10.201.0.4');
  const script = namespaceSetupScript(layout, '/bin-dir/pause');
  assert.match(
    script,
    /ip addr add 10\.201\.0\.254\/32 dev lo\n/,
    'the API relay address, inside the node, on lo (not answered on the fabric: fabric-plan.ts)',
  );
  assert.ok(
    script.indexOf('mount -t proc') < script.indexOf('/proc/sys/net/'),
    "the node's net sysctls are written through its own /proc, in its namespace",
  );
  assert.ok(!script.includes('eth0'), 'eth0 comes from the fabric (fabric.ts), not the setup script');
  const net = nodeNetwork('/tmp/leasehold-cluster-x', 6443);
  assert.equal(net.apiAddress, '10.201.0.254:6443');
  const egress = JSON.parse(egressSelectorConfig(net));
  assert.deepEqual(egress.egressSelections, [
    {
      name: 'cluster',
      connection: {
        proxyProtocol: 'HTTPConnect',
        transport: { uds: { udsName: '/tmp/leasehold-cluster-x/node-egress.sock' } },
      },
    },
  ]);
});

test('a node is stale only when its owner is gone or only its cgroups are left', () => {
  const owner = { pid: 123, start: '456' };
  assert.equal(isStale({ dirExists: true, owner, ownerStartNow: '456' }), false, 'owner runs');
  assert.equal(isStale({ dirExists: true, owner, ownerStartNow: undefined }), true, 'owner gone');
  assert.equal(isStale({ dirExists: true, owner, ownerStartNow: '999' }), true, 'pid reused');
  assert.equal(isStale({ dirExists: true, owner: undefined, ownerStartNow: undefined }), false, 'being made');
  assert.equal(isStale({ dirExists: false, hasCgroups: true }), true, 'cgroups without a dir');
  assert.equal(parseOwner(ownerText(owner))?.start, '456');
});

test('the sweep removes what a killed run left (cgroups and dir), not a live node', async () => {
  const dead = spawn('true');
  await new Promise((r) => dead.once('exit', r));
  const killed = mkdtempSync(join(tmpdir(), NODE_DIR_PREFIX));
  const live = mkdtempSync(join(tmpdir(), NODE_DIR_PREFIX));
  try {
    writeFileSync(join(killed, OWNER_FILE), ownerText({ pid: dead.pid ?? 0, start: 'gone' }));
    writeFileSync(
      join(live, OWNER_FILE),
      ownerText({ pid: process.pid, start: processStart(process.pid) ?? '' }),
    );
    createCgroupRoot(`/${basename(killed)}/kubepods`);
    createCgroupRoot(`/${basename(live)}/kubepods`);
    const swept = sweepStaleNodes();
    assert.ok(swept.removed.includes(basename(killed)), JSON.stringify(swept));
    assert.ok(!swept.removed.includes(basename(live)), 'a node whose owner runs stays');
    assert.deepEqual(existingCgroups(`/${basename(killed)}`), []);
    assert.equal(existsSync(killed), false);
    assert.ok(existingCgroups(`/${basename(live)}`).length > 0);
  } finally {
    removeCgroupRoot(`/${basename(killed)}`);
    removeCgroupRoot(`/${basename(live)}`);
    rmSync(killed, { recursive: true, force: true });
    rmSync(live, { recursive: true, force: true });
  }
});
