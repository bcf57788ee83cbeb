/**
 * The NFS server's /metrics against Debian's real ganesha 4.3 on this machine: the
 * compiled entrypoint with LEASEHOLD_NFS_METRICS_PORT starts its private dbus-daemon and
 * ganesha on 127.0.0.1 and free ports over a temp export; the libnfs writer
 * (dev/nfs-client, NFSv4.0: hence 4.0 enabled) writes synced records over one connection.
 * Checks, each on a real scrape:
 *  - the WRITE counters (per operation and per version/direction) rose by at least the
 *    writes acknowledged, bytes and summed latency > 0, requests counted;
 *  - connections: >= 1 while the writer is connected, back to 0 after it stopped;
 *  - grace: a second incarnation on the same export, whose recorded v4.0 client never
 *    reclaims, reports in_grace 1 during its grace period and 0 after, and counts it;
 *  - a hung bus (dbus-daemon SIGSTOPped): stats_up 0, ganesha's families left out (no
 *    stale number), one log line naming the cause, ganesha serving on; back to 1 with a
 *    log line once it runs again;
 *  - SIGTERM stops ganesha, then the bus: no child left;
 *  - a killed bus: ganesha serves on (native/bus-stay.so: a new writer's records are
 *    acknowledged after the kill), stats_up 0, the entrypoint says why; and the premise,
 *    with LEASEHOLD_NFS_BUS_SHIM=none: libdbus ends ganesha with its bus, the entrypoint
 *    exits 1, leaving nothing behind.
 * Scrape cost is reported as a test diagnostic.
 */
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { buildWriter, startWriter } from '../../dev/nfs-client/writer-process.ts';
import {
  cleanup,
  freePort,
  type NfsServerProcess,
  processRuns,
  spawnNfsServer,
  tempDir,
} from './nfs-ganesha-harness.ts';

after(cleanup);

const GRACE_S = 6;

async function scrape(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(10_000) });
  assert.equal(res.status, 200);
  return res.text();
}

function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const got = await check();
    if (got !== undefined) return got;
    if (performance.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function start(
  exportPath: string,
  runDir: string,
  nfsPort: number,
  metricsPort: number,
  env: Record<string, string> = {},
) {
  const server = spawnNfsServer({
    ...env,
    LEASEHOLD_NFS_EXPORT_PATH: exportPath,
    LEASEHOLD_NFS_PSEUDO_PATH: '/export',
    LEASEHOLD_NFS_RUN_DIR: runDir,
    LEASEHOLD_NFS_BIND_ADDR: '127.0.0.1',
    LEASEHOLD_NFS_PORT: String(nfsPort),
    LEASEHOLD_NFS_VERSIONS: '4.0,4.1',
    LEASEHOLD_NFS_GRACE_PERIOD: `${GRACE_S}s`,
    LEASEHOLD_NFS_LEASE_LIFETIME: '5s',
    LEASEHOLD_NFS_METRICS_PORT: String(metricsPort),
  });
  await server.waitForLog('serving');
  const dbusPid = server.lines.find((l) => l.msg === 'private message bus started')?.dbusPid;
  assert.equal(typeof dbusPid, 'number', 'the entrypoint logged its bus');
  return { server, dbusPid: dbusPid as number };
}

async function stop(server: NfsServerProcess, dbusPid: number) {
  server.child.kill('SIGTERM');
  const exit = await server.exited;
  assert.equal(exit.code, 0);
  // By the lines' own times: two lines logged within a millisecond may reach the pipe in
  // either order (seen: the bus already dead, its stop logged 1 ms after ganesha's end).
  const at = (msg: string) => Date.parse(String(server.lines.find((l) => l.msg === msg)?.time ?? ''));
  const busStopped = at('private message bus stopped');
  const ganeshaStopped = at('stopped: ganesha exited cleanly');
  assert.ok(
    busStopped >= ganeshaStopped,
    `the bus stopped after ganesha: ${server.lines.map((l) => `${l.time} ${l.msg}`).join(' | ')}`,
  );
  assert.equal(processRuns(dbusPid), false, 'the bus is gone');
  const ganesha = server.ganeshaPid();
  assert.ok(ganesha !== undefined && !processRuns(ganesha), 'ganesha is gone');
}

describe('the NFS server /metrics against the real ganesha', () => {
  it('ops, latency, bytes, connections and grace rise and fall with real traffic', async (t) => {
    const base = await tempDir('metrics');
    const exportPath = join(base, 'export');
    mkdirSync(exportPath);
    const nfsPort = await freePort();
    const metricsPort = await freePort();
    const binary = await buildWriter();

    const first = await start(exportPath, join(base, 'run1'), nfsPort, metricsPort);
    const before = await until('ganesha lifted its start grace (no recorded clients)', async () => {
      const text = await scrape(metricsPort);
      return value(text, 'leasehold_nfs_in_grace') === 0 ? text : undefined;
    });
    assert.equal(value(before, 'leasehold_nfs_stats_up'), 1);
    assert.equal(value(before, 'leasehold_nfs_client_connections'), 0);
    assert.equal(value(before, 'leasehold_nfs_grace_periods_total'), 1, 'the start grace counted');
    const writesBefore = value(before, 'leasehold_nfs_io_operations_total{version="4.0",direction="write"}');
    assert.equal(writesBefore, 0);

    const writer = startWriter(binary, {
      version: 4,
      host: '127.0.0.1',
      port: nfsPort,
      exportPath: '/export',
      file: 'records.log',
      intervalMs: 20,
    });
    let acked = 0;
    try {
      await writer.waitForAck(25, 20_000);
      // NB: counted before the scrape: the writer goes on, so the scrape sees at least these.
      acked = writer.events.filter((e) => e.event === 'ack').length;
      const during = await scrape(metricsPort);
      const connections = value(during, 'leasehold_nfs_client_connections') ?? 0;
      assert.ok(connections >= 1, `connections while the writer runs: ${connections}`);
      const writeOps =
        value(during, 'leasehold_nfs_io_operations_total{version="4.0",direction="write"}') ?? 0;
      const opWrites = value(during, 'leasehold_nfs_operations_total{op="WRITE"}') ?? 0;
      assert.ok(writeOps >= acked, `WRITEs counted ${writeOps} >= acknowledged ${acked}`);
      assert.ok(opWrites >= acked, `WRITE operations counted ${opWrites} >= acknowledged ${acked}`);
      const latency =
        value(during, 'leasehold_nfs_io_latency_seconds_total{version="4.0",direction="write"}') ?? 0;
      assert.ok(latency > 0, `write latency summed: ${latency}`);
      assert.ok((value(during, 'leasehold_nfs_operation_latency_seconds_total{op="WRITE"}') ?? 0) > 0);
      assert.ok(
        (value(during, 'leasehold_nfs_io_bytes_total{version="4.0",direction="write"}') ?? 0) >= acked * 64,
      );
      assert.ok((value(during, 'leasehold_nfs_requests_total{version="4.0"}') ?? 0) >= acked);
      t.diagnostic(
        `after ${acked} acknowledged records: ${writeOps} WRITEs, mean write latency ${((latency / writeOps) * 1e6).toFixed(0)} us, ${connections} connection(s)`,
      );
    } finally {
      await writer.stop();
    }
    await until('connections back to 0 after the writer stopped', async () =>
      value(await scrape(metricsPort), 'leasehold_nfs_client_connections') === 0 ? true : undefined,
    );

    // Scrape cost: four dbus-send calls in parallel plus /proc, on this machine.
    const costs: number[] = [];
    for (let i = 0; i < 10; i++) {
      const startedAt = performance.now();
      const text = await scrape(metricsPort);
      costs.push(performance.now() - startedAt);
      assert.equal(value(text, 'leasehold_nfs_stats_up'), 1);
    }
    costs.sort((a, b) => a - b);
    t.diagnostic(
      `scrape: median ${costs[5]?.toFixed(1)} ms, max ${costs[9]?.toFixed(1)} ms (10 scrapes, idle ganesha)`,
    );
    await stop(first.server, first.dbusPid);

    // A second incarnation: the writer's v4.0 client is recorded and never reclaims, so grace holds.
    const second = await start(exportPath, join(base, 'run2'), nfsPort, metricsPort);
    const inGrace = await scrape(metricsPort);
    assert.equal(value(inGrace, 'leasehold_nfs_in_grace'), 1, 'in grace right after the start');
    assert.equal(value(inGrace, 'leasehold_nfs_grace_periods_total'), 1);
    const graceStart = performance.now();
    await until(
      'grace over',
      async () => (value(await scrape(metricsPort), 'leasehold_nfs_in_grace') === 0 ? true : undefined),
      (GRACE_S + 15) * 1000,
    );
    const graceMs = performance.now() - graceStart;
    assert.ok(
      graceMs > (GRACE_S - 2) * 1000,
      `grace lasted about its ${GRACE_S} s: ${graceMs.toFixed(0)} ms`,
    );
    t.diagnostic(`second incarnation: in_grace 1 then 0 after ${(graceMs / 1000).toFixed(1)} s`);
    await stop(second.server, second.dbusPid);
  });

  it('a hung bus: stats_up 0 with one log line, nothing stale, ganesha serving; a killed bus costs the statistics only (and, without the shim, the server)', async () => {
    const base = await tempDir('metrics-broken');
    const exportPath = join(base, 'export');
    mkdirSync(exportPath);
    const nfsPort = await freePort();
    const metricsPort = await freePort();
    const { server, dbusPid } = await start(exportPath, join(base, 'run'), nfsPort, metricsPort);
    assert.equal(value(await scrape(metricsPort), 'leasehold_nfs_stats_up'), 1);

    process.kill(dbusPid, 'SIGSTOP');
    try {
      for (let i = 0; i < 2; i++) {
        const text = await scrape(metricsPort);
        assert.equal(value(text, 'leasehold_nfs_stats_up'), 0);
        assert.doesNotMatch(text, /leasehold_nfs_(in_grace|requests_total|io_operations_total)/);
        assert.equal(value(text, 'leasehold_nfs_client_connections'), 0, 'the kernel-side gauge stays');
      }
      const failures = server.lines.filter((l) => l.code === 'E_NFS_METRICS');
      assert.equal(failures.length, 1, 'logged once over two failed scrapes');
      assert.match(failures[0]?.msg ?? '', /cannot read ganesha's statistics: .*no answer within/);
      assert.equal(processRuns(server.ganeshaPid() as number), true, 'ganesha serves on');
    } finally {
      process.kill(dbusPid, 'SIGCONT');
    }
    assert.equal(value(await scrape(metricsPort), 'leasehold_nfs_stats_up'), 1);
    // Waited for: the line may reach the pipe just after the scrape's answer.
    await until('the recovery logged', async () =>
      server.lines.some((l) => l.msg === "metrics: ganesha's statistics readable again") ? true : undefined,
    );

    // Killed: ganesha serves on (bus-stay.so), without statistics.
    process.kill(dbusPid, 'SIGKILL');
    await until('the entrypoint said why', async () =>
      server.lines.some((l) => /the private message bus was killed by SIGKILL: ganesha serves on/.test(l.msg))
        ? true
        : undefined,
    );
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(processRuns(server.ganeshaPid() as number), true, 'ganesha outlives its bus');
    assert.equal(value(await scrape(metricsPort), 'leasehold_nfs_stats_up'), 0);
    const binary = await buildWriter();
    const writer = startWriter(binary, {
      version: 4,
      host: '127.0.0.1',
      port: nfsPort,
      exportPath: '/export',
      file: 'after-the-bus.log',
      intervalMs: 20,
    });
    try {
      await writer.waitForAck(10, 30_000);
    } finally {
      await writer.stop();
    }
    await stop(server, dbusPid);

    // The premise, without the shim: libdbus ends ganesha with its bus and the entrypoint
    // exits 1, saying why: the bus's end, or ganesha's exit when that reached it first.
    const bare = await start(exportPath, join(base, 'run-bare'), nfsPort, metricsPort, {
      LEASEHOLD_NFS_BUS_SHIM: 'none',
    });
    process.kill(bare.dbusPid, 'SIGKILL');
    const exit = await bare.server.exited;
    assert.equal(exit.code, 1);
    assert.ok(
      bare.server.lines.some(
        (l) =>
          /the private message bus was killed by SIGKILL: ganesha exits with it/.test(l.msg) ||
          /ganesha exited with code 1 while serving/.test(l.msg),
      ),
      bare.server.lines.map((l) => l.msg).join(' | '),
    );
    const ganesha = bare.server.ganeshaPid();
    assert.ok(ganesha !== undefined && !processRuns(ganesha), 'ganesha is gone');
  });
});
