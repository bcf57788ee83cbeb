/**
 * Entry point of the shipped NFS server (image leasehold.dev/nfs-ganesha): only wiring.
 * Reads the env (config.ts), starts rpcbind when NFSv3 needs one and none is there
 * (rpcbind.ts; stopped after ganesha, on every path), with LEASEHOLD_NFS_METRICS_PORT the
 * private message bus and /metrics (private-bus.ts, nfs-metrics-server.ts; the bus
 * stopped after ganesha, before rpcbind, on every path; a failure of either does not
 * keep ganesha from serving), waits until leasehold's agent
 * holds the volume's lease (lease-gate.ts; only with LEASEHOLD_NFS_LEASE_GATE_PORT, as
 * the manager's preset sets it), then checks the volume and writes the rendered config
 * (volume.ts, ganesha-conf.ts), runs ganesha.nfsd in the foreground (ganesha-process.ts)
 * and logs `serving` once it answers NFS. While ganesha runs it watches the lease and
 * stops ganesha when the proof has been missing for the share's D - T (lease-gate.ts, the watch).
 * SIGTERM or SIGINT is forwarded to ganesha as SIGTERM (its clean stop); the process
 * exits once ganesha is gone, never before. Exit codes: exit-codes.ts. Env vars:
 * config.ts and README.md.
 *
 * Invariant (with the gate): nothing touches the volume, and ganesha does not run,
 * before the agent reported the lease held: what runs before the gate (reading env,
 * rpcbind, the Node start-up itself) is what takes time and needs no lease, so it runs
 * while the agent acquires (docs/design.md, startup order).
 *
 * Our own lines are JSON on stdout (component nfs-server); ganesha's lines pass through
 * in ganesha's format. The agent's signal fence can target `ganesha.nfsd` (stops the
 * server directly, this process then exits 1) or `leasehold-nfs`, this process's title
 * (stops it the clean way, exit 0).
 */
import { mkdirSync } from 'node:fs';
import { type Clock, systemClock } from '../../lib/clock.ts';
import { ConfigError } from '../../lib/errors.ts';
import { createLogger, type Logger } from '../../lib/logger.ts';
import { type NfsServerConfig, readNfsServerConfig } from './config.ts';
import { EXIT_CONFIG, EXIT_ENDED, EXIT_START_FAILED, EXIT_STOPPED, ServerStartError } from './exit-codes.ts';
import { renderGaneshaConfig } from './ganesha-conf.ts';
import { describeExit, startGanesha, waitServing } from './ganesha-process.ts';
import { lapseKillAfterMs } from './lease-gate.ts';
import { waitForLease, watchLease } from './lease-gate-loops.ts';
import { type NfsMetricsServer, serveNfsMetrics } from './nfs-metrics-server.ts';
import { type PrivateBus, startPrivateBus } from './private-bus.ts';
import {
  decideRpcbind,
  RPCBIND_SOCKET,
  type RpcbindProcess,
  rpcbindAnswers,
  startRpcbind,
} from './rpcbind.ts';
import { type PreparedServer, prepareServer } from './volume.ts';

process.title = 'leasehold-nfs';

async function main(): Promise<number> {
  let config: NfsServerConfig;
  try {
    config = readNfsServerConfig(process.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`leasehold nfs-server: ${err.message}\n`);
    return EXIT_CONFIG;
  }
  const clock = systemClock;
  const log = createLogger('nfs-server').child({ export: config.exportPath });

  // Handlers first: a stop requested while ganesha starts must still stop it cleanly.
  let stopRequest: { signal: NodeJS.Signals; atMs: number } | undefined;
  // NB: read through a call: TypeScript's narrowing does not see the handler's assignment.
  const stopRequested = () => stopRequest;
  let onStop: () => void = () => {};
  const stopping = new AbortController();
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      if (stopRequest) return;
      stopRequest = { signal, atMs: clock.now() };
      log.info({ signal }, 'stop requested: forwarding SIGTERM to ganesha');
      stopping.abort();
      onStop();
    });
  }

  const decision = decideRpcbind(config, config.versions.includes('3') && (await rpcbindAnswers()));
  let rpcbind: RpcbindProcess | undefined;
  if (decision.kind === 'start') {
    try {
      rpcbind = await startRpcbind(config, clock);
    } catch (err) {
      if (!(err instanceof ServerStartError)) throw err;
      log.fatal({ code: err.code }, `could not start: ${err.message}`);
      return EXIT_START_FAILED;
    }
    log.info({ rpcbindPid: rpcbind.pid, socket: RPCBIND_SOCKET }, 'rpcbind started');
  } else if (config.versions.includes('3')) log.info({ reason: decision.reason }, 'rpcbind not started');

  const metrics = await startMetrics(config, log, clock);
  let code: number = EXIT_ENDED;
  try {
    code = await gateThenRun(config, log, clock, stopping.signal, stopRequested, metrics, (f) => {
      onStop = f;
    });
  } finally {
    // NB: after ganesha is gone (runGanesha returns only then), also on a throw; a
    // failed stop is a failed stop (exit 1). The bus before rpcbind: the reverse of the start.
    if (!(await stopMetrics(metrics, config, log))) code = EXIT_ENDED;
    if (rpcbind && !(await stopRpcbind(rpcbind, config, log))) code = EXIT_ENDED;
  }
  return code;
}

interface Metrics {
  bus?: PrivateBus;
  server?: NfsMetricsServer;
  /** Set once the bus is being stopped: its end is then no news. */
  stopping: boolean;
}

/**
 * With LEASEHOLD_NFS_METRICS_PORT: the private bus and /metrics, before the lease gate
 * (neither needs the lease nor touches the volume). NB: a failure of either is logged and
 * ganesha serves anyway: metrics are not worth an outage; /metrics then says stats_up 0,
 * or is not there (the scrape target is down).
 */
async function startMetrics(config: NfsServerConfig, log: Logger, clock: Clock): Promise<Metrics> {
  const metrics: Metrics = { stopping: false };
  if (config.metricsPort === undefined) return metrics;
  try {
    mkdirSync(config.runDir, { recursive: true, mode: 0o755 });
    const bus = await startPrivateBus(config, clock);
    metrics.bus = bus;
    log.info({ dbusPid: bus.pid, address: bus.address }, 'private message bus started');
    void bus.exited.then((how) => {
      if (!metrics.stopping)
        log.error(
          { code: 'E_NFS_METRICS', dbusPid: bus.pid },
          config.busShim
            ? `the private message bus ${how}: ganesha serves on without statistics (bus-stay.so: only its DBus thread ends); leasehold_nfs_stats_up is 0 until the server restarts`
            : `the private message bus ${how}: ganesha exits with it (libdbus ends a process whose system bus disconnects; LEASEHOLD_NFS_BUS_SHIM=none), so the server stops (exit 1); leasehold_nfs_stats_up is 0 meanwhile`,
        );
    });
  } catch (err) {
    log.error({ code: 'E_NFS_METRICS' }, err instanceof Error ? err.message : String(err));
  }
  try {
    metrics.server = await serveNfsMetrics({ config, busAddress: metrics.bus?.address, log, clock });
    log.info({ metricsPort: metrics.server.port }, 'metrics served');
  } catch (err) {
    log.error(
      { code: 'E_NFS_METRICS' },
      `LEASEHOLD_NFS_METRICS_PORT=${config.metricsPort}: cannot serve /metrics: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  return metrics;
}

/** After ganesha: /metrics closed, the bus stopped; false when the bus would not stop. */
async function stopMetrics(metrics: Metrics, config: NfsServerConfig, log: Logger): Promise<boolean> {
  await metrics.server?.close();
  if (!metrics.bus) return true;
  metrics.stopping = true;
  try {
    await metrics.bus.stop(config.stopTimeoutMs);
    log.info({ dbusPid: metrics.bus.pid }, 'private message bus stopped');
    return true;
  } catch (err) {
    log.error(
      { dbusPid: metrics.bus.pid },
      `stop failed: ${err instanceof Error ? err.message : String(err)}`,
    );
    return false;
  }
}

async function stopRpcbind(rpcbind: RpcbindProcess, config: NfsServerConfig, log: Logger): Promise<boolean> {
  try {
    await rpcbind.stop(config.stopTimeoutMs);
    log.info({ rpcbindPid: rpcbind.pid }, 'rpcbind stopped');
    return true;
  } catch (err) {
    log.error(
      { rpcbindPid: rpcbind.pid },
      `stop failed: ${err instanceof Error ? err.message : String(err)}`,
    );
    return false;
  }
}

type StopRequested = () => { signal: NodeJS.Signals; atMs: number } | undefined;

/**
 * The lease gate (when configured), then the volume and the config, then ganesha; the
 * exit code. NB: the volume is touched only after the gate (the header's invariant).
 */
async function gateThenRun(
  config: NfsServerConfig,
  log: Logger,
  clock: Clock,
  stop: AbortSignal,
  stopRequested: StopRequested,
  metrics: Metrics,
  setOnStop: (onStop: () => void) => void,
): Promise<number> {
  let gate: { port: number; lastHeldMs: number } | undefined;
  if (config.leaseGatePort !== undefined) {
    const port = config.leaseGatePort;
    const outcome = await waitForLease({ port, clock, log, stop, timeoutMs: config.leaseGateTimeoutMs });
    if (outcome.kind === 'stopped') return EXIT_STOPPED;
    if (outcome.kind === 'gave-up') {
      log.fatal({ code: 'E_NFS_LEASE_GATE' }, `could not start: ${outcome.message}`);
      return EXIT_START_FAILED;
    }
    gate = { port, lastHeldMs: outcome.askedAtMs };
  } else log.info('no lease gate (LEASEHOLD_NFS_LEASE_GATE_PORT is unset): ganesha starts at once');
  if (stopRequested()) return EXIT_STOPPED;

  let prepared: PreparedServer;
  try {
    prepared = prepareServer(config, (owner) => renderGaneshaConfig(config, owner));
  } catch (err) {
    if (!(err instanceof ServerStartError)) throw err;
    log.fatal({ code: err.code }, `could not start: ${err.message}`);
    return EXIT_START_FAILED;
  }
  if (stopRequested()) return EXIT_STOPPED;
  return runGanesha(config, prepared, log, clock, stopRequested, setOnStop, gate, metrics);
}

/**
 * Runs ganesha until it exits; resolves with the exit code, only once ganesha is gone.
 * With `gate`, the lease is watched meanwhile and ganesha stopped when its proof lapses.
 */
async function runGanesha(
  config: NfsServerConfig,
  prepared: PreparedServer,
  log: Logger,
  clock: Clock,
  stopRequested: StopRequested,
  setOnStop: (onStop: () => void) => void,
  gate: { port: number; lastHeldMs: number } | undefined,
  metrics: Metrics,
): Promise<number> {
  const startedAtMs = clock.now();
  const server = metrics.server;
  const ganesha = startGanesha(config, prepared, {
    ...(metrics.bus ? { env: { DBUS_SYSTEM_BUS_ADDRESS: metrics.bus.address } } : {}),
    ...(server ? { onLine: (line: string) => server.onGaneshaLine(line) } : {}),
  });
  server?.setGaneshaRunning(true);
  void ganesha.exited.then(() => server?.setGaneshaRunning(false));
  setOnStop(() => ganesha.stop(config.stopTimeoutMs));
  // NB: read through a call, like stopRequested: set by the watch's callback.
  let lapse: string | undefined;
  const lapsed = () => lapse;
  const watchEnd = new AbortController();
  if (gate) {
    void watchLease({
      port: gate.port,
      clock,
      log,
      stop: watchEnd.signal,
      lastHeldMs: gate.lastHeldMs,
      toleranceMs: config.leaseProofToleranceMs,
    }).then((message) => {
      if (message === undefined || stopRequested()) return;
      lapse = message;
      const killAfterMs = lapseKillAfterMs(config.leaseProofToleranceMs);
      log.error({ code: 'E_NFS_LEASE_LAPSED', killAfterMs }, message);
      // SIGKILL within the fence's grace, not the planned stop's timeout (lease-gate.ts).
      ganesha.stop(killAfterMs);
    });
    void ganesha.exited.then(() => watchEnd.abort());
  }
  log.info(
    {
      ganeshaPid: ganesha.pid,
      config: prepared.configPath,
      pseudo: config.pseudoPath,
      port: config.port,
      bind: config.bindAddr,
      versions: config.versions,
      gracePeriodS: config.gracePeriodS,
      leaseLifetimeS: config.leaseLifetimeS,
      recoveryRoot: config.recoveryRoot,
      serverOwner: prepared.serverOwner,
      serverOwnerSource: prepared.serverOwnerSource,
    },
    'ganesha started',
  );

  try {
    const startMs = await waitServing(config, ganesha, clock, startedAtMs);
    log.info({ startMs: Math.round(startMs) }, 'serving');
  } catch (err) {
    if (!(err instanceof ServerStartError)) throw err;
    if (!stopRequested() && !lapsed()) {
      ganesha.stop(config.stopTimeoutMs);
      await ganesha.exited;
      log.fatal({ code: err.code }, `could not start: ${err.message}`);
      return EXIT_START_FAILED;
    }
  }

  const exit = await ganesha.exited;
  const requested = stopRequested();
  if (requested) {
    const stopMs = Math.round(clock.now() - requested.atMs);
    const clean = exit.kind === 'exited' && exit.code === 0 && !ganesha.killed;
    if (clean) log.info({ stopMs }, 'stopped: ganesha exited cleanly');
    else
      log.error(
        { stopMs, killed: ganesha.killed, errors: ganesha.errorLines() },
        `stop failed: ganesha ${ganesha.killed ? `did not exit within LEASEHOLD_NFS_STOP_TIMEOUT=${config.stopTimeoutMs}ms and was killed` : describeExit(exit)}`,
      );
    return clean ? EXIT_STOPPED : EXIT_ENDED;
  }
  const why = lapsed();
  if (why !== undefined) {
    log.error({ exit: describeExit(exit) }, `stopped: the lease proof lapsed (${why})`);
    return EXIT_ENDED;
  }
  log.error({ errors: ganesha.errorLines() }, `ganesha ${describeExit(exit)} while serving`);
  return EXIT_ENDED;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(
      `leasehold nfs-server: failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    // The exit hook of ganesha-process.ts kills a running ganesha.
    process.exit(EXIT_ENDED);
  },
);
