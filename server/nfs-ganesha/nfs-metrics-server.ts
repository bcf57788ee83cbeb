/**
 * The NFS server's /metrics (with LEASEHOLD_NFS_METRICS_PORT): the thin shell around the
 * pure readers. Each scrape asks ganesha over its private bus (private-bus.ts) with four
 * `dbus-send --print-reply` calls in parallel (GetNFSIO, GetGlobalOPS, GetFULLV4Stats,
 * admin get_grace; ganesha-stats.ts reads them), reads /proc/net/tcp and tcp6
 * (tcp-connections.ts), and renders (nfs-metrics.ts); grace periods are counted from
 * ganesha's log lines as they pass (grace-log.ts, `onGaneshaLine`). Served by
 * lib/http-endpoints.ts on LEASEHOLD_NFS_BIND_ADDR (all addresses by default).
 *
 * Why dbus-send and not a DBus client library: the npm clients (dbus-next 0.10.2,
 * @homebridge/dbus-native 0.7.9, per `npm view`) each bring 6-7 runtime dependencies
 * (event-stream, xml2js, long, hexy, ...) for the whole wire protocol and XML
 * introspection; the four calls here need neither, and a wire client written here
 * would be more code to trust than the reply reader (dbus-reply.ts). dbus-send is
 * Debian's own (dbus-bin), beside the daemon. Cost: four short-lived processes per
 * scrape, in parallel; measured against the real ganesha in
 * test/integration/nfs-ganesha-metrics.test.ts (server/nfs-ganesha/README.md, "Metrics",
 * has the figure; `leasehold_nfs_stats_scrape_duration_seconds` shows it live). At the
 * chart's 30 s scrape interval that is noise.
 *
 * Failures are values: a stats call that fails (bus gone, ganesha not answering, a reply
 * of another shape) makes the scrape's `leasehold_nfs_stats_up` 0 and leaves ganesha's
 * families out; it is logged once when reading starts failing (naming the call and
 * ganesha's or dbus-send's words) and once when it works again, not at every scrape.
 * Before ganesha runs (waiting for the lease) the stats are simply not up, unlogged.
 * Each call is bounded (STATS_CALL_TIMEOUT_MS), so a hung bus cannot hang a scrape.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type { Clock } from '../../lib/clock.ts';
import { type Endpoints, serveEndpoints } from '../../lib/http-endpoints.ts';
import type { Logger } from '../../lib/logger.ts';
import { CONTENT_TYPE, renderFamilies } from '../../lib/prom-text.ts';
import type { NfsServerConfig } from './config.ts';
import { type DbusValue, type Parsed, parseDbusReply } from './dbus-reply.ts';
import { inGraceOf, nfsIoOf, requestsOf, v4OpsOf } from './ganesha-stats.ts';
import { graceEventOf } from './grace-log.ts';
import { type GaneshaStats, nfsFamilies } from './nfs-metrics.ts';
import { countEstablished } from './tcp-connections.ts';

export const STATS_CALL_TIMEOUT_MS = 2_000;
const DEST = 'org.ganesha.nfsd';
const EXPORT_MGR = ['/org/ganesha/nfsd/ExportMgr', 'org.ganesha.nfsd.exportstats'] as const;

export interface NfsMetricsServer {
  readonly port: number;
  /** Hand every ganesha log line here (grace periods are counted from them). */
  onGaneshaLine(line: string): void;
  /** Whether ganesha runs now: before and after, the stats are not up (and not logged). */
  setGaneshaRunning(running: boolean): void;
  close(): Promise<void>;
}

export interface MetricsServerOptions {
  config: Pick<
    NfsServerConfig,
    'metricsPort' | 'bindAddr' | 'port' | 'versions' | 'exportId' | 'dbusSendBin'
  >;
  /** The private bus's address; undefined: it did not start (the stats are never up). */
  busAddress: string | undefined;
  log: Logger;
  clock: Clock;
}

export async function serveNfsMetrics(opts: MetricsServerOptions): Promise<NfsMetricsServer> {
  const { config, log, clock } = opts;
  let gracePeriodsStarted = 0;
  let ganeshaRunning = false;
  const failing = new Map<string, string>();
  const report = (source: string, error: string | undefined) => {
    const was = failing.get(source);
    if (error === undefined) {
      if (was === undefined) return;
      failing.delete(source);
      log.info({ source }, `metrics: ${source} readable again`);
    } else if (was === undefined) {
      failing.set(source, error);
      log.error({ code: 'E_NFS_METRICS', source }, `metrics: cannot read ${source}: ${error}`);
    }
  };
  let lastUp = false;

  const scrape = async (): Promise<string> => {
    const startedAtMs = clock.now();
    const [stats, connections] = await Promise.all([
      readStats(opts, ganeshaRunning),
      readConnections(config.port),
    ]);
    if (ganeshaRunning) report("ganesha's statistics", stats.ok ? undefined : stats.error);
    report('/proc/net/tcp', connections.ok ? undefined : connections.error);
    lastUp = stats.ok;
    return renderFamilies(
      nfsFamilies({
        versions: config.versions,
        stats,
        connections: connections.ok ? connections.value : undefined,
        gracePeriodsStarted,
        scrapeSeconds: (clock.now() - startedAtMs) / 1000,
      }),
    );
  };

  const endpoints: Endpoints = await serveEndpoints({
    host: config.bindAddr,
    port: config.metricsPort ?? 0,
    registry: { contentType: CONTENT_TYPE, metrics: scrape },
    healthz: () => ({ ok: true, detail: 'metrics served' }),
    readyz: () => ({
      ok: lastUp,
      detail: lastUp ? "ganesha's statistics read" : "ganesha's statistics not read",
    }),
  });
  return {
    port: endpoints.port,
    onGaneshaLine(line) {
      if (graceEventOf(line)?.kind === 'started') gracePeriodsStarted++;
    },
    setGaneshaRunning(running) {
      ganeshaRunning = running;
    },
    close: () => endpoints.close(),
  };
}

async function readStats(opts: MetricsServerOptions, ganeshaRunning: boolean): Promise<Parsed<GaneshaStats>> {
  if (opts.busAddress === undefined) return { ok: false, error: 'the private message bus did not start' };
  if (!ganeshaRunning) return { ok: false, error: 'ganesha is not running' };
  const call = (path: string, method: string, ...args: string[]) =>
    dbusCall(opts.config.dbusSendBin, opts.busAddress as string, path, method, args);
  const [io, requests, ops, grace] = await Promise.all([
    call(EXPORT_MGR[0], `${EXPORT_MGR[1]}.GetNFSIO`),
    call(EXPORT_MGR[0], `${EXPORT_MGR[1]}.GetGlobalOPS`),
    call(EXPORT_MGR[0], `${EXPORT_MGR[1]}.GetFULLV4Stats`),
    call('/org/ganesha/nfsd/admin', 'org.ganesha.nfsd.admin.get_grace'),
  ]);
  const ioStats = io.ok ? nfsIoOf(io.value, opts.config.exportId) : io;
  const requestStats = requests.ok ? requestsOf(requests.value) : requests;
  const opStats = ops.ok ? v4OpsOf(ops.value) : ops;
  const inGrace = grace.ok ? inGraceOf(grace.value) : grace;
  if (!ioStats.ok) return ioStats;
  if (!requestStats.ok) return requestStats;
  if (!opStats.ok) return opStats;
  if (!inGrace.ok) return inGrace;
  return {
    ok: true,
    value: { io: ioStats.value, requests: requestStats.value, ops: opStats.value, inGrace: inGrace.value },
  };
}

/** One `dbus-send --print-reply` call to ganesha; its reply's arguments, or why not. */
function dbusCall(
  bin: string,
  address: string,
  path: string,
  method: string,
  args: string[],
): Promise<Parsed<DbusValue[]>> {
  const argv = [
    `--bus=${address}`,
    '--print-reply',
    `--reply-timeout=${STATS_CALL_TIMEOUT_MS}`,
    `--dest=${DEST}`,
    path,
    method,
    ...args,
  ];
  const name = method.slice(method.lastIndexOf('.') + 1);
  return new Promise((resolve) => {
    execFile(
      bin,
      argv,
      { encoding: 'utf8', timeout: STATS_CALL_TIMEOUT_MS + 500, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        if (err) {
          const why = err.killed
            ? `no answer within ${STATS_CALL_TIMEOUT_MS + 500} ms (the bus or ganesha hangs)`
            : stderr.trim() || err.message;
          return resolve({ ok: false, error: `${name}: ${bin} failed: ${why}` });
        }
        const parsed = parseDbusReply(stdout);
        resolve(parsed.ok ? parsed : { ok: false, error: `${name}: ${parsed.error}` });
      },
    );
  });
}

async function readConnections(port: number): Promise<Parsed<number>> {
  let count = 0;
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      count += countEstablished(await readFile(file, 'utf8'), port);
    } catch (err) {
      // No tcp6 table: IPv6 is off in this network namespace, so no IPv6 connections.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' && file.endsWith('6')) continue;
      return { ok: false, error: `${file}: ${(err as Error).message}` };
    }
  }
  return { ok: true, value: count };
}
