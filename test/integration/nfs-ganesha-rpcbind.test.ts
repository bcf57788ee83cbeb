/**
 * The entrypoint's own rpcbind for NFSv3 (server/nfs-ganesha/rpcbind.ts), as in a pod:
 * the entrypoint runs in a network namespace of its own (the pod's) with a private
 * tmpfs on /run (the container's), as root with exactly the capability sets the preset
 * gives an NFSv3 server (manager/share-model/nfs-server-preset.ts nfsServerSecurityContext, applied
 * with setpriv) and no_new_privs. Proves: it starts
 * Debian's rpcbind, ganesha registers through it and answers a v3 NULL call, SIGTERM
 * stops ganesha and then rpcbind (gone before the entrypoint exits); without CAP_KILL
 * the stop fails loudly (exit 1, naming CAP_KILL) — why the preset adds it; an rpcbind
 * that cannot run is exit 3 naming LEASEHOLD_NFS_RPCBIND. Nothing touches the host's
 * port 111 or /run.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { nfsServerSecurityContext } from '../../manager/share-model/nfs-server-preset.ts';
import {
  cleanup,
  type NfsServerProcess,
  processRuns,
  spawnNfsServer,
  tempDir,
} from './nfs-ganesha-harness.ts';

const leftovers: number[] = [];
after(async () => {
  for (const pid of leftovers) if (processRuns(pid)) process.kill(pid, 'SIGKILL');
  await cleanup();
});

const V3_CAPS = nfsServerSecurityContext({ versions: ['3', '4.1'] }).capabilities?.add ?? [];

/**
 * The pod: own netns and /run, then root with only `caps` (bounding = permitted). The
 * netns gets loopback with one more address (10.255.0.1, standing for the pod IP of eth0): ganesha
 * resolves Bind_addr 0.0.0.0 with AI_ADDRCONFIG, which finds nothing in a namespace with
 * loopback only ("No IP address found for 0.0.0.0").
 */
function podWrapper(caps: readonly string[]): string[] {
  const bounding = `-all,${caps.map((c) => `+${c.toLowerCase()}`).join(',')}`;
  return [
    'unshare',
    '--net',
    '--mount',
    '--propagation',
    'private',
    '--',
    'sh',
    '-c',
    `mount -t tmpfs -o size=1m,mode=755 leasehold-test-run /run && ip link set lo up && ip addr add 10.255.0.1/32 dev lo && exec setpriv --inh-caps=-all --ambient-caps=-all --bounding-set=${bounding} --no-new-privs -- "$@"`,
    'pod',
  ];
}

async function startV3(name: string, caps: readonly string[], extra: Record<string, string> = {}) {
  const base = await tempDir(name);
  const exportPath = join(base, 'export');
  mkdirSync(exportPath);
  const server = spawnNfsServer(
    {
      LEASEHOLD_NFS_EXPORT_PATH: exportPath,
      LEASEHOLD_NFS_PSEUDO_PATH: '/export',
      LEASEHOLD_NFS_RUN_DIR: join(base, 'run'),
      LEASEHOLD_NFS_VERSIONS: '3,4.1',
      ...extra,
    },
    podWrapper(caps),
  );
  const started = await server.waitForLog('rpcbind started').catch(() => undefined);
  if (typeof started?.rpcbindPid === 'number') leftovers.push(started.rpcbindPid);
  return server;
}

function rpcbindPid(server: NfsServerProcess): number {
  const pid = server.lines.find((l) => l.msg === 'rpcbind started')?.rpcbindPid;
  assert.equal(typeof pid, 'number', 'the entrypoint logs the rpcbind it started');
  return pid as number;
}

describe('nfs-ganesha entrypoint rpcbind (NFSv3)', () => {
  it('starts rpcbind, serves v3 with the preset capabilities, stops rpcbind after ganesha', async (t) => {
    assert.ok(V3_CAPS.includes('KILL') && !V3_CAPS.includes('NET_BIND_SERVICE'));
    const startedAt = performance.now();
    const server = await startV3('rpcbind-ok', V3_CAPS);
    const serving = await server.waitForLog('serving');
    t.diagnostic(
      `rpcbind + ganesha answered NFSv3 NULL ${Math.round(performance.now() - startedAt)} ms after spawn`,
    );
    const pid = rpcbindPid(server);
    assert.ok(processRuns(pid));
    assert.ok(
      server.lines.indexOf(server.lines.find((l) => l.msg === 'rpcbind started') as never) <
        server.lines.indexOf(serving),
    );
    server.child.kill('SIGTERM');
    const exit = await server.exited;
    assert.equal(exit.code, 0, server.stderr());
    const msgs = server.lines.map((l) => l.msg);
    assert.ok(
      msgs.indexOf('stopped: ganesha exited cleanly') < msgs.indexOf('rpcbind stopped'),
      msgs.join(' | '),
    );
    assert.equal(processRuns(pid), false, 'rpcbind is gone when the entrypoint has exited');
  });

  it('without CAP_KILL it cannot stop rpcbind (it runs as _rpc): exit 1 naming CAP_KILL', async () => {
    const server = await startV3(
      'rpcbind-nokill',
      V3_CAPS.filter((c) => c !== 'KILL'),
    );
    await server.waitForLog('serving');
    const pid = rpcbindPid(server);
    server.child.kill('SIGTERM');
    const exit = await server.exited;
    assert.equal(exit.code, 1);
    const failed = server.lines.find((l) => l.msg.startsWith('stop failed: cannot stop rpcbind'));
    assert.match(String(failed?.msg), /EPERM.*CAP_KILL/);
    assert.ok(processRuns(pid), 'the kernel refused the signal: rpcbind still runs (killed by the test)');
  });

  it('an rpcbind that cannot run stops the start: exit 3 naming LEASEHOLD_NFS_RPCBIND', async () => {
    const server = await startV3('rpcbind-missing', V3_CAPS, {
      LEASEHOLD_NFS_RPCBIND_BIN: '/nonexistent/rpcbind',
    });
    const exit = await server.exited;
    assert.equal(exit.code, 3);
    const fatal = server.lines.find((l) => l.msg.startsWith('could not start'));
    assert.match(
      String(fatal?.msg),
      /LEASEHOLD_NFS_RPCBIND=auto: could not start rpcbind \(LEASEHOLD_NFS_RPCBIND_BIN=\/nonexistent\/rpcbind\): cannot run it: spawn \/nonexistent\/rpcbind ENOENT/,
    );
    assert.match(String(fatal?.msg), /LEASEHOLD_NFS_RPCBIND=external/);
    assert.equal(
      server.lines.find((l) => l.msg === 'ganesha started'),
      undefined,
      'ganesha never started',
    );
  });
});
