/**
 * The real nodes' fabric (dev/node/fabric.ts, fabric-plan.ts): the pure plan (addresses,
 * routes, the holder's script, bad input named), the pure leftover judge on hand-made
 * snapshots, then one real fabric with two stand-in nodes (network namespaces made by
 * `unshare --net`, set up by the nodes' own setup lines, as root like the nodes):
 * TCP from one node IP to the other over the bridge; no node answers ARP for the
 * control plane's address (and one would without arp_ignore); a second attach of an
 * index is refused; a detached node gets no RST (the peer times out or is told EHOSTUNREACH);
 * and the stop's check fails on a stray process in the fabric's namespace and a port
 * left on its bridge, and passes on a clean fabric. About 3.5 s (1 s of it the detached
 * node's silence, 0.5 s an unanswered ARP).
 */
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { FabricLeftoverError, startFabric } from '../../dev/node/fabric.ts';
import {
  fabricAttachBatch,
  fabricSetupScript,
  NODE_NET_SYSCTLS,
  nodeAttachBatch,
  nodeNetSetupLines,
} from '../../dev/node/fabric-plan.ts';
import { findFabricLeftovers, type HostSnapshot } from '../../dev/node/leftovers.ts';
import { sleep } from '../../lib/clock.ts';

test('the plan: node 2 on eth0 with 10.201.0.3/24, a default route, every other pod range via its node IP', () => {
  const lines = nodeAttachBatch(2);
  assert.deepEqual(lines.slice(0, 3), [
    'addr add 10.201.0.3/24 dev eth0',
    'link set eth0 up',
    'route add default dev eth0 src 10.201.0.3',
  ]);
  const routes = lines.slice(3);
  assert.equal(routes.length, 249, 'indexes 1..250 but its own');
  assert.ok(routes.includes('route add 10.244.1.0/24 via 10.201.0.2 dev eth0 src 10.201.0.3'));
  assert.ok(routes.includes('route add 10.244.250.0/24 via 10.201.0.251 dev eth0 src 10.201.0.3'));
  assert.ok(!routes.some((r) => r.includes('10.244.2.0/24')), 'not its own range');
  assert.deepEqual(fabricAttachBatch(7, '/proc/42/ns/net'), [
    'link add node7 type veth peer name eth0 netns /proc/42/ns/net',
    'link set node7 master fabric0',
    'link set node7 up',
  ]);
  const setup = nodeNetSetupLines('10.201.0.254');
  assert.ok(setup.includes('ip addr add 10.201.0.254/32 dev lo'), "the control plane's address on lo");
  assert.equal(NODE_NET_SYSCTLS['net/ipv4/conf/all/arp_ignore'], '1', 'no node answers ARP for it on eth0');
  assert.match(
    fabricSetupScript(['/x/pause']),
    /ip link add fabric0 type bridge stp_state 0\n[\s\S]*exec '\/x\/pause'\n$/,
  );
});

test('the plan names bad input', () => {
  for (const index of [0, 251, 1.5])
    assert.throws(() => nodeAttachBatch(index), {
      code: 'E_NODE_INDEX',
      message: new RegExp(`index ${index} `),
    });
  assert.throws(() => fabricAttachBatch(1, 'relative/ns'), { code: 'E_NODE_NETNS' });
  assert.throws(() => fabricAttachBatch(1, '/proc/1/ns/net x'), { code: 'E_NODE_NETNS' });
  assert.throws(() => fabricSetupScript([]), { code: 'E_NODE_FABRIC' });
});

const fabricNs = 'net:[4026532999]';
const hostNs = ['pid:[4026531836]', 'net:[4026531840]', 'mnt:[4026531841]'];
const clean: Pick<HostSnapshot, 'processes' | 'mountinfo'> = {
  processes: [{ pid: 1, cmdline: '/sbin/init', cgroup: '', namespaces: hostNs }],
  mountinfo: '31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n',
};

test("the fabric's leftover judge: holder, a process in its namespace, a mount of it, a port on its bridge", () => {
  const fabric = { namespaces: [fabricNs], pids: [777] };
  assert.deepEqual(findFabricLeftovers(fabric, { ...clean, ports: [] }), []);
  const left = findFabricLeftovers(fabric, {
    processes: [
      ...clean.processes,
      { pid: 777, cmdline: '/x/pause', cgroup: '', namespaces: hostNs },
      {
        pid: 778,
        cmdline: 'sleep 60',
        cgroup: '',
        namespaces: [hostNs[0] as string, fabricNs, hostNs[2] as string],
      },
    ],
    mountinfo: `${clean.mountinfo}40 31 0:4 ${fabricNs} /run/netns/f rw - nsfs nsfs rw\n`,
    ports: ['node1'],
  });
  assert.deepEqual(
    left.map((l) => l.kind),
    ['process', 'process', 'mount', 'link'],
  );
  assert.match(String(left[1]?.kind === 'process' && left[1].why), /fabric's network namespace/);
  // Released (no id held): a stranger that got the id is not judged the fabric's.
  assert.deepEqual(
    findFabricLeftovers(
      { namespaces: [], pids: [777] },
      {
        processes: [{ pid: 900, cmdline: 'x', cgroup: '', namespaces: [fabricNs] }],
        mountinfo: '',
        ports: [],
      },
    ),
    [],
  );
});

const started: ChildProcess[] = [];
after(() => {
  for (const c of started) if (c.exitCode === null) c.kill('SIGKILL');
});

/** A stand-in node: a process in a new network namespace, set up by the nodes' own lines. */
async function standInNode(
  lines = nodeNetSetupLines('10.201.0.254'),
): Promise<{ netns: string; child: ChildProcess }> {
  const script = `set -eu\n${lines.join('\n')}\nexec sleep 60\n`;
  const child = spawn('unshare', ['--net', '--', 'sh', '-c', script], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  started.push(child);
  // unshare execs sh in place (no --fork): the pid is the namespace's process.
  for (let i = 0; i < 100; i++) {
    if (readFileSync(`/proc/${child.pid}/comm`, 'utf8').trim() === 'sleep')
      return { netns: `/proc/${child.pid}/ns/net`, child };
    await sleep(20);
  }
  throw new Error('the stand-in node did not set up');
}

/**
 * One TCP connect from `netns` to host:port (bash's /dev/tcp: no Node start per probe),
 * then what the peer sends: that text, or ECONNREFUSED (reset), EHOSTUNREACH (ARP
 * failed) or ETIMEDOUT (nothing within `ms`).
 */
async function connectFrom(netns: string, host: string, ms: number, port = 8080): Promise<string> {
  const child = spawn(
    'nsenter',
    [
      `--net=${netns}`,
      '--',
      'timeout',
      `${ms / 1000}`,
      'bash',
      '-c',
      `exec 3<>/dev/tcp/${host}/${port} && exec cat <&3`,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  started.push(child);
  let out = '';
  let err = '';
  child.stdout.on('data', (c) => {
    out += c;
  });
  child.stderr.on('data', (c) => {
    err += c;
  });
  const [code] = (await once(child, 'close')) as [number | null];
  if (code === 0) return out.trim();
  if (code === 124) return 'ETIMEDOUT';
  if (/Connection refused/.test(err)) return 'ECONNREFUSED';
  if (/No route to host/.test(err)) return 'EHOSTUNREACH';
  return `exit ${code}: ${err.trim()}`;
}

test('a real fabric: node to node over the bridge, a taken index refused, no RST from a detached node, the stop check', {
  timeout: 30_000,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-fabric-test-'));
  const fabric = await startFabric({ logPath: join(dir, 'fabric.log'), holder: ['sleep', '60'], owner: dir });
  try {
    const [one, two] = await Promise.all([standInNode(), standInNode()]);
    await Promise.all([fabric.attach(1, one.netns), fabric.attach(2, two.netns)]);
    await assert.rejects(fabric.attach(2, one.netns), { code: 'E_NODE_FABRIC', message: /index 2 is taken/ });
    const server = spawn(
      'nsenter',
      [
        `--net=${two.netns}`,
        '--',
        process.execPath,
        '-e',
        `require('node:net').createServer((s) => s.end('hello from node 2')).listen(8080, '10.201.0.3', () => console.log('up'))`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    started.push(server);
    await once(server.stdout, 'data');
    assert.equal(await connectFrom(one.netns, '10.201.0.3', 5000), 'hello from node 2');
    // What the check below would see from a live kernel: a port nobody listens on is reset.
    assert.equal(await connectFrom(one.netns, '10.201.0.3', 5000, 8081), 'ECONNREFUSED');

    // A host on the fabric without the control plane's address asks ARP for it: no node
    // answers (each has it on lo, arp_ignore 1); with node 1's arp_ignore 0 it would.
    const outsider = await standInNode(['ip link set lo up']);
    await fabric.attach(9, outsider.netns);
    const arpFor254 = async () => {
      await connectFrom(outsider.netns, '10.201.0.254', 500);
      return execFileSync(
        'nsenter',
        [`--net=${outsider.netns}`, '--', 'ip', 'neigh', 'show', '10.201.0.254'],
        {
          encoding: 'utf8',
        },
      );
    };
    assert.doesNotMatch(await arpFor254(), /lladdr/, "no node answers ARP for the control plane's address");
    execFileSync('nsenter', [
      `--net=${one.netns}`,
      '--',
      'sh',
      '-c',
      'echo 0 > /proc/sys/net/ipv4/conf/all/arp_ignore',
    ]);
    execFileSync('nsenter', [`--net=${outsider.netns}`, '--', 'ip', 'neigh', 'flush', 'all']);
    assert.match(await arpFor254(), /lladdr/, 'the violation: node 1 answers with arp_ignore 0');
    await fabric.detach(9);

    await fabric.detach(2);
    await fabric.detach(2); // idempotent
    const t0 = performance.now();
    const seen = await connectFrom(one.netns, '10.201.0.3', 1000);
    assert.ok(
      seen === 'ETIMEDOUT' || seen === 'EHOSTUNREACH',
      `a detached node sends nothing, no RST: got ${seen} after ${Math.round(performance.now() - t0)} ms`,
    );
    server.kill('SIGKILL');

    // A stray in the fabric's namespace and node 1's port still on the bridge: the check fails.
    const stray = spawn('nsenter', [`--net=${fabric.netnsPath}`, '--', 'sleep', '60'], { stdio: 'ignore' });
    started.push(stray);
    await sleep(100);
    const err = await fabric.stop().then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof FabricLeftoverError, `stop throws FabricLeftoverError: ${err}`);
    assert.ok(err.leftovers.some((l) => l.kind === 'process' && l.pid === stray.pid));
    assert.ok(err.leftovers.some((l) => l.kind === 'link' && l.name === 'node1'));
    stray.kill('SIGKILL');
    await once(stray, 'exit');
    assert.deepEqual(fabric.leftovers(), [], 'nothing once the stray is gone');
  } finally {
    await fabric.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  }

  const dir2 = mkdtempSync(join(tmpdir(), 'leasehold-fabric-test-'));
  const clean = await startFabric({
    logPath: join(dir2, 'fabric.log'),
    holder: ['sleep', '60'],
    owner: dir2,
  });
  const node = await standInNode();
  await clean.attach(3, node.netns);
  await clean.detach(3);
  await clean.stop(); // throws on any leftover
  assert.deepEqual(clean.leftovers(), []);
  rmSync(dir2, { recursive: true, force: true });
});
