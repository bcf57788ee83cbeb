/**
 * Runs `ganesha.nfsd -F` (foreground) as our child and watches it: its log lines go to
 * our stdout/stderr unchanged (ganesha logs to STDOUT, flushed per line), its last error
 * lines are kept to explain an exit, and `waitServing` tells when it answers NFS.
 *
 * Invariants:
 *  - ganesha runs in its own process group, so a terminal's Ctrl-C reaches only us and
 *    ganesha is stopped the clean way: ganesha catches SIGTERM only (its sigmgr thread,
 *    src/MainNFSD/nfs_init.c); SIGINT would kill it on the spot. `stop` sends SIGTERM
 *    and SIGKILL after the stop timeout.
 *  - `exited` resolves exactly once, also when the program could not be run at all.
 *  - when our process exits for any reason while ganesha runs, ganesha is SIGKILLed
 *    (an exit hook), so no child outlives the entrypoint.
 *    NB: a SIGKILL of the entrypoint itself cannot be caught: in a pod the container's
 *    end then takes ganesha with it (same PID namespace, the entrypoint is its init).
 */
import { spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import type { Clock } from '../../lib/clock.ts';
import type { NfsServerConfig } from './config.ts';
import { ServerStartError } from './exit-codes.ts';
import { probeRpcNull } from './rpc-null-probe.ts';
import type { PreparedServer } from './volume.ts';

export type GaneshaExit =
  | { kind: 'exited'; code: number | null; signal: NodeJS.Signals | null }
  | { kind: 'spawn-failed'; error: string };

export interface GaneshaProcess {
  readonly pid: number | undefined;
  readonly exited: Promise<GaneshaExit>;
  /** SIGTERM now; SIGKILL after `killAfterMs` if still running. Idempotent. */
  stop(killAfterMs: number): void;
  /** True once stop() had to SIGKILL. */
  readonly killed: boolean;
  /** ganesha's last FATAL/CRIT/MAJ/WARN lines (oldest first), known start-up noise left out. */
  errorLines(): string[];
  /** Lines where ganesha reported a config error (it then goes on, without the block). */
  configErrors(): string[];
}

// ganesha always logs these without dbus, Kerberos or rpcbind; they explain nothing.
const NOISE = [/:DBUS :/, /gssd_refresh_krb5|krb5|keytab|default realm/i, /Cannot register NFS V4/, /RADOS/];
// WARN too: ganesha often says why in a WARN line before the FATAL one (a port in use).
const ERROR_LINE = / :(FATAL|CRIT|MAJ|WARN) :/;
// NB: ganesha does not exit on a bad block: it logs and serves without it (an EXPORT with
// an error means no export at all), so these lines fail the start.
const CONFIG_ERROR_LINE = /:CONFIG :(FATAL|CRIT|MAJ) :|No export entries found/;
const KEPT_ERROR_LINES = 5;

/** What else ganesha runs with: env added (the private bus's address), a tap on its log lines. */
export interface GaneshaExtras {
  env?: Record<string, string>;
  onLine?: (line: string) => void;
}

export function startGanesha(
  config: NfsServerConfig,
  prepared: PreparedServer,
  extras: GaneshaExtras = {},
): GaneshaProcess {
  const args = ['-F', '-f', prepared.configPath, '-L', 'STDOUT', '-p', prepared.pidPath];
  // The bus shim only where ganesha has our private bus (metrics on).
  const busShim = extras.env?.DBUS_SYSTEM_BUS_ADDRESS ? config.busShim : undefined;
  const preload = [config.recoveryShim, config.stableFsidShim, busShim, config.graceKickShim].filter(
    (p) => p !== undefined,
  );
  const env = {
    ...process.env,
    ...(preload.length > 0 ? { LD_PRELOAD: preload.join(' ') } : {}),
    // The grace-kick shim wakes ganesha's reaper for the grace period (plus a lease) after the start.
    ...(config.graceKickShim
      ? { LEASEHOLD_NFS_GRACE_KICK_SECONDS: String(config.gracePeriodS + config.leaseLifetimeS) }
      : {}),
    ...(config.stableFsidShim
      ? {
          LEASEHOLD_NFS_STABLE_FSID: prepared.stableFsid.fsid,
          LEASEHOLD_NFS_STABLE_FSID_DEV: prepared.stableFsid.dev,
        }
      : {}),
    ...extras.env,
  };
  const child = spawn(config.ganeshaBin, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env });
  const errors: string[] = [];
  const configErrors: string[] = [];
  const keep = (line: string) => {
    extras.onLine?.(line);
    if (CONFIG_ERROR_LINE.test(line) && configErrors.length < KEPT_ERROR_LINES) configErrors.push(line);
    if (!ERROR_LINE.test(line) || NOISE.some((n) => n.test(line))) return;
    errors.push(line);
    if (errors.length > KEPT_ERROR_LINES) errors.shift();
  };
  forwardLines(child.stdout, process.stdout, keep);
  forwardLines(child.stderr, process.stderr, keep);

  let running = true;
  let killTimer: NodeJS.Timeout | undefined;
  let killed = false;
  const killOnExit = () => {
    if (running && child.pid !== undefined) child.kill('SIGKILL');
  };
  process.on('exit', killOnExit);
  const exited = new Promise<GaneshaExit>((resolve) => {
    child.once('error', (err) => {
      // 'error' without 'spawn' means the program never ran (ENOENT, EACCES).
      if (child.pid !== undefined) return;
      running = false;
      process.off('exit', killOnExit);
      resolve({ kind: 'spawn-failed', error: err.message });
    });
    child.once('exit', (code, signal) => {
      running = false;
      clearTimeout(killTimer);
      process.off('exit', killOnExit);
      resolve({ kind: 'exited', code, signal });
    });
  });

  return {
    get pid() {
      return child.pid;
    },
    exited,
    get killed() {
      return killed;
    },
    stop(killAfterMs: number) {
      if (!running || killTimer !== undefined) return;
      child.kill('SIGTERM');
      killTimer = setTimeout(() => {
        if (!running) return;
        killed = true;
        child.kill('SIGKILL');
      }, killAfterMs);
    },
    errorLines: () => [...errors],
    configErrors: () => [...configErrors],
  };
}

/** Forwards each whole line of `from` to `to`, and hands it to `onLine`. */
function forwardLines(from: Readable, to: Writable, onLine: (line: string) => void): void {
  let partial = '';
  from.setEncoding('utf8');
  from.on('data', (chunk: string) => {
    to.write(chunk);
    const lines = (partial + chunk).split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) onLine(line);
  });
  from.on('end', () => {
    if (partial !== '') onLine(partial);
  });
}

/** Where to probe: a wildcard bind address is reachable on loopback. */
export function probeHost(bindAddr: string): string {
  if (bindAddr === '0.0.0.0') return '127.0.0.1';
  if (bindAddr === '::' || bindAddr === '::0') return '::1';
  return bindAddr;
}

/**
 * Resolves with the time from `startedAtMs` to the first accepted NULL call; throws a
 * ServerStartError when ganesha exits first or does not answer within the start timeout.
 */
export async function waitServing(
  config: NfsServerConfig,
  ganesha: GaneshaProcess,
  clock: Clock,
  startedAtMs: number,
): Promise<number> {
  let exit: GaneshaExit | undefined;
  void ganesha.exited.then((e) => {
    exit = e;
  });
  // NULL is answered by every NFS version; ask for the lowest one enabled.
  const version = config.versions.includes('3') ? 3 : 4;
  const host = probeHost(config.bindAddr);
  let last = 'no probe yet';
  while (clock.now() - startedAtMs < config.startTimeoutMs) {
    if (exit !== undefined) throw startFailure(config, ganesha, exit);
    // NB: raced with ganesha's exit: a probe may hang on someone else's listener (port in use).
    const outcome = await Promise.race([
      probeRpcNull(host, config.port, version, 1_000),
      ganesha.exited.then(() => ({ kind: 'unreachable', detail: 'ganesha exited' }) as const),
    ]);
    if (outcome.kind === 'accepted') {
      const servingMs = clock.now() - startedAtMs;
      // ganesha parsed its config before it bound the port, so those lines are in our
      // pipe by now; one more turn of the event loop reads what is buffered.
      await new Promise((r) => setImmediate(r));
      const configErrors = ganesha.configErrors();
      if (configErrors.length > 0)
        throw new ServerStartError(
          `ganesha reported errors in its config ${config.runDir}/ganesha.conf (it would serve without them): ${configErrors.map((l) => l.trim()).join(' | ')}`,
        );
      return servingMs;
    }
    last = outcome.detail;
    await Promise.race([new Promise((r) => setTimeout(r, 50)), ganesha.exited]);
  }
  if (exit !== undefined) throw startFailure(config, ganesha, exit);
  throw new ServerStartError(
    `ganesha did not answer an NFS NULL call on ${host}:${config.port} within LEASEHOLD_NFS_START_TIMEOUT=${config.startTimeoutMs}ms (last: ${last})${describeErrors(ganesha)}`,
  );
}

function startFailure(config: NfsServerConfig, ganesha: GaneshaProcess, exit: GaneshaExit): ServerStartError {
  if (exit.kind === 'spawn-failed')
    return new ServerStartError(
      `LEASEHOLD_NFS_GANESHA_BIN=${config.ganeshaBin}: cannot run it: ${exit.error}`,
    );
  return new ServerStartError(`ganesha.nfsd ${describeExit(exit)} before serving${describeErrors(ganesha)}`);
}

export function describeExit(exit: GaneshaExit): string {
  if (exit.kind === 'spawn-failed') return `could not be run (${exit.error})`;
  return exit.signal !== null ? `was killed by ${exit.signal}` : `exited with code ${exit.code}`;
}

function describeErrors(ganesha: GaneshaProcess): string {
  const lines = ganesha.errorLines();
  return lines.length === 0 ? '' : `; its log: ${lines.map((l) => l.trim()).join(' | ')}`;
}
