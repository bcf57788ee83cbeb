/**
 * The shipped NFS server end to end on this machine: the compiled entrypoint runs Debian's
 * real ganesha.nfsd on 127.0.0.1 and a free port over a temp export; libnfs's user-space
 * client (NFSv4.0, hence LEASEHOLD_NFS_VERSIONS includes 4.0 where it writes) writes and
 * reads back a file; the recovery state lands on the export and a second incarnation on
 * the same volume reads it (and holds grace for the recorded clients until Grace_Period); SIGTERM
 * stops it cleanly and leaves no ganesha behind; bad starts exit 3 naming the cause; with
 * the lease gate (LEASEHOLD_NFS_LEASE_GATE_PORT at the agent's real endpoints) ganesha
 * waits for `lease held`, touching nothing on the volume, and is stopped when it lapses.
 * Timings are reported as test diagnostics.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { AgentHealth } from '../../agent/agent-health.ts';
import { AgentMetrics } from '../../agent/agent-metrics.ts';
import { systemClock } from '../../lib/clock.ts';
import { serveEndpoints } from '../../lib/http-endpoints.ts';
import {
  cleanup,
  freePort,
  type NfsServerProcess,
  nfsUrl,
  processRuns,
  runNfsTool,
  spawnNfsServer,
  tempDir,
} from './nfs-ganesha-harness.ts';

// Generous for a 2-core machine shared with other test runs; ganesha needs ~10 ms here.
const STOP_BOUND_MS = 10_000;
const RECOVERY = '.leasehold-ganesha-recovery';

async function volume(name: string): Promise<{ exportPath: string; runDir: string; base: string }> {
  const base = await tempDir(name);
  const exportPath = join(base, 'export');
  mkdirSync(exportPath);
  return { exportPath, runDir: join(base, 'run'), base };
}

function serverEnv(exportPath: string, runDir: string, port: number, extra: Record<string, string> = {}) {
  return {
    LEASEHOLD_NFS_EXPORT_PATH: exportPath,
    LEASEHOLD_NFS_PSEUDO_PATH: '/export',
    LEASEHOLD_NFS_RUN_DIR: runDir,
    LEASEHOLD_NFS_BIND_ADDR: '127.0.0.1',
    LEASEHOLD_NFS_PORT: String(port),
    ...extra,
  };
}

/** SIGTERM to the entrypoint; resolves with its exit and how long it took. */
async function stopBySigterm(server: NfsServerProcess) {
  const sentAt = performance.now();
  server.child.kill('SIGTERM');
  const exit = await Promise.race([
    server.exited,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`no exit within ${STOP_BOUND_MS} ms of SIGTERM`)), STOP_BOUND_MS),
    ),
  ]);
  return { ...exit, ms: exit.atMs - sentAt };
}

/** Processes whose command line names `configPath` (ganesha is started with -f <it>). */
function processesUsing(configPath: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv.includes(configPath) && processRuns(Number(entry))) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

function assertNoGaneshaLeft(server: NfsServerProcess, runDir: string): void {
  const pid = server.ganeshaPid();
  assert.ok(pid !== undefined, "the entrypoint logged ganesha's pid");
  assert.equal(processRuns(pid), false, `ganesha (pid ${pid}) still runs`);
  assert.deepEqual(processesUsing(join(runDir, 'ganesha.conf')), []);
}

describe('nfs-ganesha server (real ganesha.nfsd, libnfs client)', () => {
  after(cleanup);

  it('serves a written file back byte for byte, keeps recovery state on the volume, and a new incarnation reclaims it', async (t) => {
    const { exportPath, runDir, base } = await volume('roundtrip');
    const port = await freePort();
    const env = serverEnv(exportPath, runDir, port, { LEASEHOLD_NFS_VERSIONS: '4.0,4.1,4.2' });
    const server = spawnNfsServer(env);
    const serving = await server.waitForLog('serving');
    t.diagnostic(`ganesha answered NFS NULL ${serving.startMs} ms after spawn`);
    assert.ok(!server.raw.some((l) => /:CONFIG :(CRIT|MAJ|FATAL)/.test(l)), 'ganesha accepted its config');

    // NB: libnfs 4.0's NFSv4 writes fail above ~3.9 KB (issue 9): 1 KiB stays below.
    const payload = randomBytes(1024);
    const local = join(base, 'payload.bin');
    writeFileSync(local, payload);
    const cp = await runNfsTool('nfs-cp', [local, nfsUrl(port, '/export', 'payload.bin')]);
    assert.equal(cp.code, 0, `nfs-cp failed: ${cp.stderr}`);
    const cat = await runNfsTool('nfs-cat', [nfsUrl(port, '/export', 'payload.bin')]);
    assert.equal(cat.code, 0, `nfs-cat failed: ${cat.stderr}`);
    t.diagnostic(`NFSv4 round trip: nfs-cp ${cp.ms.toFixed(0)} ms, nfs-cat ${cat.ms.toFixed(0)} ms`);
    assert.ok(cat.stdout.equals(payload), 'read back what was written');
    assert.ok(readFileSync(join(exportPath, 'payload.bin')).equals(payload), 'the file is on the volume');

    // Recovery state: in the export, on its file system, one entry per client that held
    // state, named after the client owner alone (native/recovery-tag.c): without the shim
    // ganesha names it `127.0.0.1-(...)`, and a client whose address changed across a
    // failover could not reclaim.
    const recovery = join(exportPath, RECOVERY);
    assert.equal(statSync(recovery).dev, statSync(exportPath).dev);
    const clients = readdirSync(join(recovery, 'v4recov'));
    assert.ok(
      clients.length > 0 && clients.every((c) => /^_-\(\d+:Libnfs /.test(c)),
      `v4recov records each client by its owner, without its address: ${clients.join(', ')}`,
    );
    const started = server.lines.find((l) => l.msg === 'ganesha started');
    assert.equal(started?.serverOwnerSource, 'created');
    assert.equal(readFileSync(join(recovery, 'server-owner'), 'utf8').trim(), started?.serverOwner);

    const stop = await stopBySigterm(server);
    t.diagnostic(`SIGTERM after a client wrote: entrypoint exited in ${stop.ms.toFixed(0)} ms`);
    assert.deepEqual([stop.code, stop.signal], [0, null], `stderr: ${server.stderr()}`);
    assert.ok(server.lines.some((l) => l.msg === 'stopped: ganesha exited cleanly'));
    assertNoGaneshaLeft(server, runDir);

    // The replacement: another run dir and port (another node), the same volume.
    const runDir2 = join(base, 'run2');
    const port2 = await freePort();
    const second = spawnNfsServer(
      serverEnv(exportPath, runDir2, port2, { LEASEHOLD_NFS_VERSIONS: '4.0,4.1,4.2' }),
    );
    await second.waitForLog('serving');
    const started2 = second.lines.find((l) => l.msg === 'ganesha started');
    assert.equal(started2?.serverOwnerSource, 'volume');
    assert.equal(started2?.serverOwner, started?.serverOwner, 'the same server identity');
    const loaded = second.raw.map((l) => /clid count\((\d+)\)/.exec(l)?.[1]).find((n) => n !== undefined);
    assert.ok(Number(loaded) >= 1, `the new incarnation loaded the recorded clients (clid count ${loaded})`);
    assert.ok(second.raw.some((l) => l.includes('NFS Server Now IN GRACE, duration 15')));
    // Those v4.0 clients never send RECLAIM_COMPLETE, so grace holds: a new open waits.
    const during = await runNfsTool('nfs-cp', [local, nfsUrl(port2, '/export', 'new.bin')]);
    assert.notEqual(during.code, 0);
    assert.match(during.stderr, /NFS4ERR_GRACE/);
    // Every OPEN waits, reads too (libnfs opens with CLAIM_NULL; only a reclaimed open
    // would read or write through grace), until Grace_Period ends it.
    const servingAt = (second.lines.find((l) => l.msg === 'serving') as { atMs: number }).atMs;
    let reread = await runNfsTool('nfs-cat', [nfsUrl(port2, '/export', 'payload.bin')]);
    assert.match(reread.stderr, /NFS4ERR_GRACE/);
    const giveUpAt = performance.now() + 15_000 + 5_000 + 15_000; // grace + reaper period + slack
    while (reread.code !== 0 && performance.now() < giveUpAt) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      reread = await runNfsTool('nfs-cat', [nfsUrl(port2, '/export', 'payload.bin')]);
    }
    assert.equal(reread.code, 0, `nfs-cat failed after grace: ${reread.stderr}`);
    t.diagnostic(
      `grace with recorded clients that never returned: opens refused for ${((performance.now() - servingAt) / 1000).toFixed(1)} s after serving`,
    );
    assert.ok(reread.stdout.equals(payload), 'the replacement serves the same bytes');
    assert.ok(second.raw.some((l) => l.includes('NFS Server Now NOT IN GRACE')));

    const stop2 = await stopBySigterm(second);
    t.diagnostic(`SIGTERM after a client read: entrypoint exited in ${stop2.ms.toFixed(0)} ms`);
    assert.deepEqual([stop2.code, stop2.signal], [0, null], `stderr: ${second.stderr()}`);
    assertNoGaneshaLeft(second, runDir2);
  });

  it('the grace-kick shim runs in ganesha and a SIGTERM right after serving still stops it cleanly, as without the shim', async () => {
    // What the shim changes (grace lifted within 250 ms of the last reclaim) needs NFSv4.1
    // clients that reclaim: the kernel-client e2e measures it. Here: that ganesha runs
    // with it, and that its thread leaves signals to ganesha (a first version did not:
    // the SIGTERM below killed ganesha, exit by signal, instead of its clean shutdown).
    for (const shim of [undefined, 'none']) {
      const { exportPath, runDir } = await volume(`grace-kick-${shim ?? 'on'}`);
      const server = spawnNfsServer(
        serverEnv(exportPath, runDir, await freePort(), shim ? { LEASEHOLD_NFS_GRACE_KICK_SHIM: shim } : {}),
      );
      await server.waitForLog('serving');
      const pid = server.ganeshaPid();
      assert.ok(pid !== undefined);
      const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      const preload = environ.find((e) => e.startsWith('LD_PRELOAD=')) ?? '';
      if (shim === 'none') assert.doesNotMatch(preload, /grace-kick/);
      else {
        assert.match(preload, /grace-kick\.so/);
        assert.ok(
          environ.includes('LEASEHOLD_NFS_GRACE_KICK_SECONDS=25'),
          'the window: grace 15 s + lease 10 s',
        );
      }
      const stop = await stopBySigterm(server);
      assert.deepEqual(
        [stop.code, stop.signal],
        [0, null],
        `shim ${shim ?? 'on'}: ${JSON.stringify(server.lines.at(-1))}`,
      );
      assertNoGaneshaLeft(server, runDir);
    }
  });

  it('the export root owner and mode let a non-root client write; a squashed root client becomes the anonymous ids', async () => {
    // Two fresh volumes: a second incarnation on the first would hold grace for its client.
    const port = await freePort();
    const url = (name: string, uid?: number) =>
      `${nfsUrl(port, '/export', name)}${uid === undefined ? '' : `&uid=${uid}&gid=${uid}`}`;
    let exportPath = '';
    let runDir = '';
    let local = '';
    const start = async (name: string, extra: Record<string, string>) => {
      const v = await volume(name);
      ({ exportPath, runDir } = v);
      local = join(v.base, 'small.bin');
      writeFileSync(local, randomBytes(256));
      const server = spawnNfsServer(
        serverEnv(exportPath, runDir, port, { LEASEHOLD_NFS_VERSIONS: '4.0,4.1,4.2', ...extra }),
      );
      await server.waitForLog('serving');
      return server;
    };
    // As the volume comes (root, 0755): a client running as uid 1000 cannot write.
    let server = await start('owner-unset', {});
    const refused = await runNfsTool('nfs-cp', [local, url('as-1000.bin', 1000)]);
    assert.notEqual(refused.code, 0, 'uid 1000 wrote into a root-owned 0755 export');
    assert.match(refused.stderr, /ACCES|PERM/);
    assert.deepEqual((await stopBySigterm(server)).code, 0);

    server = await start('owner-set', {
      LEASEHOLD_NFS_EXPORT_UID: '1000',
      LEASEHOLD_NFS_EXPORT_GID: '1000',
      LEASEHOLD_NFS_EXPORT_MODE: '2770',
      LEASEHOLD_NFS_SQUASH: 'root_squash',
      LEASEHOLD_NFS_ANONYMOUS_UID: '1000',
      LEASEHOLD_NFS_ANONYMOUS_GID: '1000',
    });
    const root = statSync(exportPath);
    assert.deepEqual([root.uid, root.gid, root.mode & 0o7777], [1000, 1000, 0o2770]);
    const written = await runNfsTool('nfs-cp', [local, url('as-1000.bin', 1000)]);
    assert.equal(written.code, 0, `uid 1000 could not write: ${written.stderr}`);
    assert.equal(statSync(join(exportPath, 'as-1000.bin')).uid, 1000);
    const other = await runNfsTool('nfs-cp', [local, url('as-2000.bin', 2000)]);
    assert.notEqual(other.code, 0, 'uid 2000 wrote into a 2770 export it is not in the group of');
    const squashed = await runNfsTool('nfs-cp', [local, url('as-root.bin', 0)]);
    assert.equal(squashed.code, 0, `squashed root could not write: ${squashed.stderr}`);
    const file = statSync(join(exportPath, 'as-root.bin'));
    assert.deepEqual([file.uid, file.gid], [1000, 1000], 'root became the anonymous ids');
    assert.deepEqual((await stopBySigterm(server)).code, 0);
    assertNoGaneshaLeft(server, runDir);
  });

  it('serves NFSv4.1/4.2 only by default: a v4.0 client is refused', async (t) => {
    const { exportPath, runDir } = await volume('default');
    const port = await freePort();
    const server = spawnNfsServer(serverEnv(exportPath, runDir, port));
    const serving = await server.waitForLog('serving');
    t.diagnostic(`ganesha answered NFS NULL ${serving.startMs} ms after spawn`);
    assert.match(readFileSync(join(runDir, 'ganesha.conf'), 'utf8'), /Minor_Versions = 1, 2;/);
    const ls = await runNfsTool('nfs-ls', [nfsUrl(port, '/export')]);
    assert.notEqual(ls.code, 0);
    assert.match(ls.stderr, /NFS4ERR_MINOR_VERS_MISMATCH/);
    const stop = await stopBySigterm(server);
    t.diagnostic(`SIGTERM without client state: entrypoint exited in ${stop.ms.toFixed(0)} ms`);
    assert.deepEqual([stop.code, stop.signal], [0, null], `stderr: ${server.stderr()}`);
    assertNoGaneshaLeft(server, runDir);
  });

  it("with the lease gate: waits on the agent's 503 without touching the volume, starts on `lease held`, exits 1 once the proof lapsed 2 s", async (t) => {
    const { exportPath, runDir } = await volume('gate');
    // The agent's own endpoints (lib/http-endpoints.ts + agent-health.ts), phases set by hand.
    const metrics = new AgentMetrics(systemClock);
    const health = new AgentHealth(metrics, 4_000);
    health.enter('acquiring');
    const agent = await serveEndpoints({
      host: '127.0.0.1',
      port: 0,
      registry: metrics.registry,
      healthz: health.healthz,
      readyz: health.readyz,
    });
    try {
      const server = spawnNfsServer(
        serverEnv(exportPath, runDir, await freePort(), {
          LEASEHOLD_NFS_LEASE_GATE_PORT: String(agent.port),
        }),
      );
      await server.waitForLog('lease not held yet: ganesha waits');
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(server.ganeshaPid(), undefined, 'no ganesha while the agent says 503');
      assert.deepEqual(readdirSync(exportPath), [], 'nothing written to the volume before the lease');
      const heldAt = performance.now();
      metrics.renewed(systemClock.now(), 0, false);
      health.enter('holding');
      const serving = await server.waitForLog('serving');
      t.diagnostic(`serving ${(serving.atMs - heldAt).toFixed(0)} ms after the agent held the lease`);
      const lapsedAt = performance.now();
      health.enter('fenced');
      const exit = await server.exited;
      t.diagnostic(`exited ${(exit.atMs - lapsedAt).toFixed(0)} ms after the proof lapsed`);
      assert.deepEqual([exit.code, exit.signal], [1, null], server.lines.map((l) => l.msg).join(' | '));
      assert.ok(exit.atMs - lapsedAt >= 1_500, 'not before the 2 s tolerance (less one poll)');
      assert.ok(
        server.lines.some((l) => String(l.msg).startsWith('stopped: the lease proof lapsed')),
        server.lines.map((l) => l.msg).join(' | '),
      );
      assertNoGaneshaLeft(server, runDir);
    } finally {
      await agent.close();
    }
  });

  it('exits 1 when ganesha is killed under it (a fence by process name)', async () => {
    const { exportPath, runDir } = await volume('fenced');
    const server = spawnNfsServer(serverEnv(exportPath, runDir, await freePort()));
    await server.waitForLog('serving');
    const pid = server.ganeshaPid();
    assert.ok(pid !== undefined);
    process.kill(pid, 'SIGKILL');
    const exit = await server.exited;
    assert.deepEqual([exit.code, exit.signal], [1, null]);
    assert.ok(server.lines.some((l) => l.msg === 'ganesha was killed by SIGKILL while serving'));
    assertNoGaneshaLeft(server, runDir);
  });

  it("exits 3 quoting ganesha's log when the port is taken", async () => {
    const { exportPath, runDir } = await volume('port-taken');
    // NB: drop what connects (the entrypoint's probe): close() waits for open connections.
    const blocker = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    try {
      const address = blocker.address();
      assert.ok(address !== null && typeof address === 'object');
      const server = spawnNfsServer(serverEnv(exportPath, runDir, address.port));
      const exit = await server.exited;
      assert.deepEqual([exit.code, exit.signal], [3, null], server.lines.map((l) => l.msg).join(' | '));
      const fatal = server.lines.find((l) => String(l.msg).startsWith('could not start: '));
      assert.match(
        String(fatal?.msg),
        /ganesha\.nfsd exited with code \d+ before serving; its log: .*Address already in use/,
      );
      assertNoGaneshaLeft(server, runDir);
    } finally {
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }
  });

  it('exits 3 naming the setting when the export directory is missing, without starting ganesha', async () => {
    const { base, runDir } = await volume('no-export');
    const server = spawnNfsServer(serverEnv(join(base, 'not-mounted'), runDir, await freePort()));
    const exit = await server.exited;
    assert.deepEqual([exit.code, exit.signal], [3, null]);
    assert.ok(
      server.lines.some((l) =>
        String(l.msg).includes(
          `LEASEHOLD_NFS_EXPORT_PATH=${join(base, 'not-mounted')}: the directory does not exist`,
        ),
      ),
      server.lines.map((l) => l.msg).join(' | '),
    );
    assert.equal(server.ganeshaPid(), undefined);
  });

  it('exits 3 when the recovery directory is on another file system (an emptyDir mounted there)', async (t) => {
    const { exportPath, runDir } = await volume('recovery-elsewhere');
    // /dev/shm is a tmpfs, unlike the temp dir: a symlink stands in for a mount.
    const elsewhere = mkdtempSync('/dev/shm/leasehold-nfs-recovery-');
    t.after(() => rmSync(elsewhere, { recursive: true, force: true }));
    assert.notEqual(statSync(elsewhere).dev, statSync(exportPath).dev, 'needs two file systems');
    symlinkSync(elsewhere, join(exportPath, RECOVERY));
    const server = spawnNfsServer(serverEnv(exportPath, runDir, await freePort()));
    const exit = await server.exited;
    assert.deepEqual([exit.code, exit.signal], [3, null]);
    assert.ok(
      server.lines.some((l) =>
        /LEASEHOLD_NFS_RECOVERY_DIR: .* is on another file system .* client recovery state would not move with the volume/.test(
          String(l.msg),
        ),
      ),
      server.lines.map((l) => l.msg).join(' | '),
    );
    assert.equal(server.ganeshaPid(), undefined);
  });

  it('exits 3 when the stored server identity is damaged, and never replaces it', async () => {
    const { exportPath, runDir } = await volume('bad-identity');
    mkdirSync(join(exportPath, RECOVERY));
    writeFileSync(join(exportPath, RECOVERY, 'server-owner'), 'not an identity\n');
    const server = spawnNfsServer(serverEnv(exportPath, runDir, await freePort()));
    const exit = await server.exited;
    assert.deepEqual([exit.code, exit.signal], [3, null]);
    assert.ok(
      server.lines.some((l) => String(l.msg).includes('holds "not an identity"')),
      server.lines.map((l) => l.msg).join(' | '),
    );
    assert.equal(readFileSync(join(exportPath, RECOVERY, 'server-owner'), 'utf8'), 'not an identity\n');
  });

  it('exits 3 naming the setting when ganesha cannot be run', async () => {
    const { exportPath, runDir } = await volume('no-binary');
    const server = spawnNfsServer(
      serverEnv(exportPath, runDir, await freePort(), {
        LEASEHOLD_NFS_GANESHA_BIN: '/nonexistent/ganesha.nfsd',
      }),
    );
    const exit = await server.exited;
    assert.deepEqual([exit.code, exit.signal], [3, null]);
    assert.ok(
      server.lines.some((l) =>
        String(l.msg).includes(
          'LEASEHOLD_NFS_GANESHA_BIN=/nonexistent/ganesha.nfsd: cannot run it: spawn /nonexistent/ganesha.nfsd ENOENT',
        ),
      ),
      server.lines.map((l) => l.msg).join(' | '),
    );
  });
});
