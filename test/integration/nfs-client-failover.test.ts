/**
 * The client's view of a server crash, with real parts: Debian's ganesha 4.3 through the
 * shipped entrypoint on 127.0.0.1, and two long-lived libnfs writers (dev/nfs-client:
 * NFSv3 and NFSv4.0) appending synced, numbered records. ganesha and its entrypoint are
 * SIGKILLed mid-run and a new incarnation starts on the same export directory and the
 * same address ~1 s later (what a replacement pod behind a stable Service address is).
 * Writes must resume, no acknowledged record may be lost (read back byte for byte from
 * the export directory), no file handle may go stale; the measured gaps are reported as
 * diagnostics. A second test first hangs ganesha (SIGSTOP: calls go unanswered, as with
 * a node that vanished) so the per-call timeout fires, then restarts it with another
 * Export_Id and shows the stale-handle check fires.
 *
 * NFSv3 needs an rpcbind (ganesha exits otherwise): each incarnation gets a private one
 * (dev/nfs-client/private-rpcbind.ts), never one on the host's port 111. Grace and
 * lease are 5 s here (not the 15 s default) to keep the test short; with v4.0 enabled
 * ganesha always runs the full grace period.
 */
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { type PrivateRpcbind, startPrivateRpcbind } from '../../dev/nfs-client/private-rpcbind.ts';
import { analyzeWriteRun, type WriteRunReport } from '../../dev/nfs-client/write-analysis.ts';
import type { WriterEvent } from '../../dev/nfs-client/writer-lines.ts';
import { buildWriter, startWriter, type WriterProcess } from '../../dev/nfs-client/writer-process.ts';
import { monotonicMs, sleep } from '../../lib/clock.ts';
import {
  cleanup,
  freePort,
  type NfsServerProcess,
  processRuns,
  runNfsTool,
  spawnNfsServer,
  tempDir,
} from './nfs-ganesha-harness.ts';

const GRACE_S = 5;
const PSEUDO = '/export';
// Generous bounds for a loaded 2-core machine: they catch a writer that never resumes.
const ACK_WAIT_MS = 60_000;
const rpcbinds: PrivateRpcbind[] = [];

interface Share {
  base: string;
  exportPath: string;
  port: number;
  mountPort: number;
}

async function share(name: string): Promise<Share> {
  const base = await tempDir(name);
  const exportPath = join(base, 'export');
  mkdirSync(exportPath);
  return { base, exportPath, port: await freePort(), mountPort: await freePort() };
}

/** One incarnation of the server on the share: its own rpcbind and run dir (a new pod). */
async function incarnation(s: Share, n: number, versions: string, extra: Record<string, string> = {}) {
  const rpcbind = await startPrivateRpcbind(s.base);
  rpcbinds.push(rpcbind);
  const server = spawnNfsServer({
    LEASEHOLD_NFS_EXPORT_PATH: s.exportPath,
    LEASEHOLD_NFS_PSEUDO_PATH: PSEUDO,
    LEASEHOLD_NFS_RUN_DIR: join(s.base, `run${n}`),
    LEASEHOLD_NFS_BIND_ADDR: '127.0.0.1',
    LEASEHOLD_NFS_PORT: String(s.port),
    LEASEHOLD_NFS_MOUNT_PORT: String(s.mountPort),
    LEASEHOLD_NFS_VERSIONS: versions,
    LEASEHOLD_NFS_GRACE_PERIOD: `${GRACE_S}s`,
    LEASEHOLD_NFS_LEASE_LIFETIME: `${GRACE_S}s`,
    ...rpcbind.serverEnv,
    ...extra,
  });
  try {
    await server.waitForLog('serving');
  } catch (err) {
    await rpcbind.stop();
    throw err;
  }
  return { server, rpcbind };
}

/** The crash: entrypoint and ganesha SIGKILLed at once; resolves when both are gone. */
async function crash(server: NfsServerProcess): Promise<number> {
  const ganesha = server.ganeshaPid();
  assert.ok(ganesha !== undefined);
  const faultMs = monotonicMs();
  process.kill(-(server.child.pid as number), 'SIGKILL');
  process.kill(ganesha, 'SIGKILL');
  await server.exited;
  while (processRuns(ganesha)) await sleep(10);
  return faultMs;
}

async function stopCleanly(server: NfsServerProcess): Promise<void> {
  server.child.kill('SIGTERM');
  const exit = await server.exited;
  assert.deepEqual([exit.code, exit.signal], [0, null], `server stop: ${server.stderr()}`);
}

function report(s: Share, writer: WriterProcess, file: string, faultMs: number): WriteRunReport {
  assert.deepEqual(
    writer.badLines.map((l) => l.message),
    [],
  );
  return analyzeWriteRun({
    events: writer.events,
    faultsMs: [faultMs],
    content: readFileSync(join(s.exportPath, file)),
  });
}

async function waitForEvent(w: WriterProcess, ok: (e: WriterEvent) => boolean, timeoutMs: number) {
  const until = performance.now() + timeoutMs;
  while (!w.events.some(ok)) {
    if (performance.now() > until) throw new Error(`no such writer event within ${timeoutMs} ms`);
    await sleep(20);
  }
}

function describeGap(r: WriteRunReport): string {
  const g = r.clientWriteGaps[0];
  return `gap ${g?.gapMs?.toFixed(0)} ms (resumed ${g?.resumedAfterMs?.toFixed(0)} ms after the crash), ${r.acked} acked, errors ${JSON.stringify(r.errors)}`;
}

describe('nfs-client writers across a ganesha crash (real ganesha.nfsd, libnfs)', () => {
  after(async () => {
    await cleanup();
    for (const r of rpcbinds) await r.stop();
  });

  it('NFSv3 and NFSv4.0 writes resume on the new incarnation with nothing acknowledged lost and no stale handle', async (t) => {
    const startedAt = performance.now();
    const binary = await buildWriter();
    assert.equal(await buildWriter(), binary, 'built once per source: the same cached binary');
    const s = await share('client-failover');
    const first = await incarnation(s, 1, '3,4.0');
    const common = { host: '127.0.0.1', port: s.port, exportPath: PSEUDO, intervalMs: 20, timeoutMs: 2000 };
    const v3 = startWriter(binary, {
      ...common,
      version: 3,
      mountPort: s.mountPort,
      file: 'v3.log',
      writerId: 3,
    });
    const v4 = startWriter(binary, { ...common, version: 4, file: 'v4.log', writerId: 4 });
    t.after(async () => {
      await v3.stop();
      await v4.stop();
    });
    await Promise.all([v3.waitForAck(20, ACK_WAIT_MS), v4.waitForAck(20, ACK_WAIT_MS)]);

    const faultMs = await crash(first.server);
    await first.rpcbind.stop(); // the node's rpcbind died with it
    await sleep(1000);
    const second = await incarnation(s, 2, '3,4.0');
    const servingMs = monotonicMs();
    await Promise.all([v3.waitForMoreAcks(20, ACK_WAIT_MS), v4.waitForMoreAcks(20, ACK_WAIT_MS)]);
    const [exit3, exit4] = [await v3.stop(), await v4.stop()];
    assert.equal(exit3?.signalled, true, `v3 writer exit line: ${v3.stderr()}`);
    assert.equal(exit4?.signalled, true, `v4 writer exit line: ${v4.stderr()}`);
    assert.equal(processRuns(v3.pid) || processRuns(v4.pid), false, 'no writer left behind');
    // The new incarnation serves, over NFSv3, exactly the bytes the analysis reads from disk.
    const overNfs = await runNfsTool('nfs-cat', [
      `nfs://127.0.0.1${PSEUDO}/v3.log?version=3&nfsport=${s.port}&mountport=${s.mountPort}`,
    ]);
    assert.equal(overNfs.code, 0, `nfs-cat over NFSv3: ${overNfs.stderr}`);
    assert.ok(overNfs.stdout.equals(readFileSync(join(s.exportPath, 'v3.log'))), 'NFS and disk agree');
    await stopCleanly(second.server);
    await second.rpcbind.stop();

    const r3 = report(s, v3, 'v3.log', faultMs);
    const r4 = report(s, v4, 'v4.log', faultMs);
    t.diagnostic(`NFSv3: ${describeGap(r3)}`);
    t.diagnostic(`NFSv4.0: ${describeGap(r4)}`);
    t.diagnostic(
      `new incarnation served ${(servingMs - faultMs).toFixed(0)} ms after the crash; test took ${((performance.now() - startedAt) / 1000).toFixed(1)} s`,
    );
    for (const [name, r] of [
      ['v3', r3],
      ['v4.0', r4],
    ] as const) {
      assert.deepEqual(r.violations, [], `${name}: ${r.violations.join('; ')}`);
      assert.equal(r.ackedWritesLost, 0);
      assert.equal(r.staleHandles, 0);
      assert.ok(r.acked >= 40);
    }
    assert.ok(second.server.raw.some((l) => l.includes(`NFS Server Now IN GRACE, duration ${GRACE_S}`)));
    // v4.0 opens anew (libnfs does not reclaim) and so waits out grace; v3 WRITE and
    // COMMIT do not wait for grace (NLM off), so v3 resumed first.
    const g3 = r3.clientWriteGaps[0];
    const g4 = r4.clientWriteGaps[0];
    assert.ok(g3?.gapMs !== undefined && g4?.gapMs !== undefined);
    assert.ok(g4.gapMs >= GRACE_S * 1000, `v4.0 gap ${g4.gapMs} ms includes the ${GRACE_S} s grace period`);
    assert.ok((g3.firstAck?.ms ?? 0) < (g4.firstAck?.ms ?? 0), 'v3 resumed before v4.0');
    assert.ok(r4.errors.grace > 0, 'the v4.0 writer was told NFS4ERR_GRACE');
  });

  it('a hung server (SIGSTOP, packets answered by no one) times calls out; a new incarnation with another Export_Id is reported as a stale handle', async (t) => {
    const binary = await buildWriter();
    const s = await share('client-hung-stale');
    const first = await incarnation(s, 1, '3');
    const v3 = startWriter(binary, {
      host: '127.0.0.1',
      port: s.port,
      mountPort: s.mountPort,
      exportPath: PSEUDO,
      version: 3,
      file: 'v3.log',
      intervalMs: 20,
      timeoutMs: 1000,
    });
    try {
      await v3.waitForAck(10, ACK_WAIT_MS);
      // A node that vanished: its kernel answers nothing, like a stopped ganesha's calls.
      const ganesha = first.server.ganeshaPid();
      assert.ok(ganesha !== undefined);
      const faultMs = monotonicMs();
      process.kill(ganesha, 'SIGSTOP');
      await waitForEvent(v3, (e) => e.event === 'error' && e.kind === 'timeout', ACK_WAIT_MS);
      await crash(first.server);
      await first.rpcbind.stop();
      const second = await incarnation(s, 2, '3', { LEASEHOLD_NFS_EXPORT_ID: '2' });
      await v3.waitForMoreAcks(10, ACK_WAIT_MS);
      await v3.stop();
      assert.equal(processRuns(v3.pid), false, 'the writer is gone');
      await stopCleanly(second.server);
      await second.rpcbind.stop();
      const r = report(s, v3, 'v3.log', faultMs);
      t.diagnostic(`NFSv3 after a hang of ~1 s and a restart: ${describeGap(r)}`);
      const failures = v3.events.flatMap((e) =>
        e.event === 'error' ? [`${e.kind} ${e.op}: ${e.message}`] : [],
      );
      t.diagnostic(`its errors: ${failures.join(' | ')}`);
      assert.ok(r.errors.timeout >= 1);
      assert.equal(r.ackedWritesLost, 0);
      assert.equal(r.staleHandles, 1);
      assert.deepEqual(r.violations, ['1 stale file handles']);
      const stale = v3.events.find((e) => e.event === 'error' && e.kind === 'stale');
      assert.match(stale?.event === 'error' ? stale.message : '', /^file handle changed: was \w+, now \w+$/);
    } finally {
      await v3.stop();
    }
  });
});
