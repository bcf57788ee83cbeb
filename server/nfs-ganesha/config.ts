/**
 * Settings of the shipped NFS server (NFS-Ganesha), read from env vars only and
 * validated before any work: every problem is reported at once, naming the variable,
 * the value and the rule; main exits 2 (exit-codes.ts). Every variable has a default,
 * so a ShareManager with only a volume gets a working server. README.md beside this file
 * explains each one; ganesha-conf.ts explains the defaults of the NFSv4 timings.
 *
 * Guarantees: a returned config renders to a ganesha config ganesha accepts (values are
 * range-checked against ganesha 4.3's own parser limits, src/support/nfs_read_conf.c and
 * src/support/exports.c, and strings are limited to characters that need no quoting
 * rules); paths are absolute and normalised.
 * Does not check the file system (the export directory, the recovery directory's
 * device): that is volume.ts, at start, because it is state, not configuration.
 */
import { isIP } from 'node:net';
import { isAbsolute, join, normalize } from 'node:path';
import { type Env, EnvReader } from '../../lib/env-config.ts';
import { WATCH_TOLERANCE_MS } from './lease-gate.ts';

export const NFS_VERSIONS = ['3', '4.0', '4.1', '4.2'] as const;
export type NfsVersion = (typeof NFS_VERSIONS)[number];

/** ganesha's LOG levels (ganesha-log-config(8)). */
export const GANESHA_LOG_LEVELS = [
  'NULL',
  'FATAL',
  'MAJ',
  'CRIT',
  'WARN',
  'EVENT',
  'INFO',
  'DEBUG',
  'MID_DEBUG',
  'FULL_DEBUG',
] as const;
export type GaneshaLogLevel = (typeof GANESHA_LOG_LEVELS)[number];

/**
 * Who provides the rpcbind NFSv3 needs: `auto` starts one for ganesha unless one is
 * there already (rpcbind.ts), `external` never starts one (the pod brings its own).
 */
export const RPCBIND_MODES = ['auto', 'external'] as const;
export type RpcbindMode = (typeof RPCBIND_MODES)[number];

export const SQUASH_MODES = ['no_root_squash', 'root_squash', 'all_squash'] as const;
export type SquashMode = (typeof SQUASH_MODES)[number];

export interface NfsServerConfig {
  /** The directory exported: the volume's mount path (EXPORT Path). */
  exportPath: string;
  /** Where clients mount it (EXPORT Pseudo; also the NFSv3 mount path). */
  pseudoPath: string;
  /** Client recovery state (NFSv4 RecoveryRoot): on the export's file system. */
  recoveryRoot: string;
  versions: readonly NfsVersion[];
  port: number;
  /** NFSv3 MOUNT protocol port; used only when version 3 is enabled. */
  mountPort: number;
  bindAddr: string;
  gracePeriodS: number;
  leaseLifetimeS: number;
  exportId: number;
  /** EXPORT Filesystem_id, `major.minor`. */
  filesystemId: string;
  /** NFSv4 Server_Owner and Server_Scope; undefined: the identity stored on the volume. */
  serverOwner: string | undefined;
  clients: readonly string[];
  squash: SquashMode;
  /** EXPORT Anonymous_Uid/Anonymous_Gid: who a squashed client becomes; undefined: ganesha's -2 (nobody). */
  anonymousUid: number | undefined;
  anonymousGid: number | undefined;
  /**
   * The export root's owner, group and mode, applied at every start (volume.ts), so that
   * non-root pods can write; undefined: left as the volume has them.
   */
  exportRoot: { uid: number | undefined; gid: number | undefined; mode: number | undefined };
  logLevel: GaneshaLogLevel;
  /** Rendered config, pid file and Kerberos cache: a writable directory off the volume. */
  runDir: string;
  ganeshaBin: string;
  /**
   * The recovery-tag shim preloaded into ganesha (native/recovery-tag.c: a client's
   * recovery record named after its identity, not its address); undefined: none, so
   * ganesha keys records by address too and a client whose address changed across a
   * failover cannot reclaim.
   */
  recoveryShim: string | undefined;
  /** native/stable-fsid.so, preloaded too: the export's fsid from the volume, not the device (undefined: off). */
  stableFsidShim: string | undefined;
  /**
   * native/bus-stay.so, preloaded with metrics on: the private bus's end does not end
   * ganesha, only its DBus thread (undefined: off).
   */
  busShim: string | undefined;
  /** native/grace-kick.c: grace lifted within 250 ms of the last reclaim (undefined: off). */
  graceKickShim: string | undefined;
  /** Whether the entrypoint may start rpcbind for NFSv3 (rpcbind.ts). */
  rpcbind: RpcbindMode;
  rpcbindBin: string;
  startTimeoutMs: number;
  stopTimeoutMs: number;
  /**
   * The agent's HTTP port on the pod's loopback: ganesha starts only once its /readyz
   * says the lease is held (lease-gate.ts); undefined: no gate (the server is used
   * without leasehold's agent, or the pod gates it some other way).
   */
  leaseGatePort: number | undefined;
  /** How long the entrypoint waits for the lease before giving up (exit 3). */
  leaseGateTimeoutMs: number;
  /**
   * While ganesha runs, how long the agent's `lease held` may be missing before the
   * entrypoint stops it (lease-gate.ts, the watch): the share's D - T, which the manager
   * sets; 2 s (the default timings' D - T) when unset.
   */
  leaseProofToleranceMs: number;
  /**
   * The port of the entrypoint's Prometheus `/metrics` (nfs-metrics-server.ts); undefined:
   * off, so no private dbus-daemon is started and ganesha runs without DBus. The
   * manager's preset sets it (DEFAULT_METRICS_PORT).
   */
  metricsPort: number | undefined;
  /** The private message bus's daemon and client (private-bus.ts), with metrics on. */
  dbusDaemonBin: string;
  dbusSendBin: string;
}

/** NFS-Ganesha's own exporter's port in later versions (Monitoring_Port, 9587): the manager's preset uses it. */
export const DEFAULT_METRICS_PORT = 9587;

export const DEFAULT_RECOVERY_DIR = '.leasehold-ganesha-recovery';
/** Where native/build.sh puts the shim: beside the compiled entrypoint. */
export const DEFAULT_RECOVERY_SHIM = join(import.meta.dirname, 'recovery-tag.so');
/** Where native/build.sh puts the stable-fsid shim: beside the compiled entrypoint. */
export const DEFAULT_STABLE_FSID_SHIM = join(import.meta.dirname, 'stable-fsid.so');
export const DEFAULT_BUS_SHIM = join(import.meta.dirname, 'bus-stay.so');
/** Where native/build.sh puts the grace-kick shim: beside the compiled entrypoint. */
export const DEFAULT_GRACE_KICK_SHIM = join(import.meta.dirname, 'grace-kick.so');
/** ganesha's parser limits: Grace_Period 0..270, Lease_Lifetime 0..180 (whole seconds). */
const GANESHA_MAX_GRACE_S = 270;
const GANESHA_MAX_LEASE_S = 180;
const MINUTE = 60_000;
// NB: no quote, backslash, space, ';', '{', '}' or '#': a value renders without escaping.
const SAFE_PATH = /^\/[A-Za-z0-9._+@=,:/-]*$/;
const SAFE_PATH_RULE =
  'must be an absolute path of letters, digits and / . _ + @ = , : - (no spaces or quotes)';
const SERVER_OWNER = /^[A-Za-z0-9._:-]{1,128}$/;
// ganesha client list entries: *, host names, wildcards, IPs, CIDRs, @netgroups.
const CLIENT_ENTRY = /^[A-Za-z0-9.:/*?@_[\]-]+$/;
const FILESYSTEM_ID = /^(\d{1,20})\.(\d{1,20})$/;
const UINT64_MAX = 2n ** 64n - 1n;

/** Reads and validates the server's env; throws ConfigError listing every problem. */
export function readNfsServerConfig(env: Env): NfsServerConfig {
  const r = new EnvReader(env);
  // NB: timings first, so their cross-field rule runs only on sound fields (r.ok).
  const gracePeriodS = wholeSeconds(r, 'LEASEHOLD_NFS_GRACE_PERIOD', 15, GANESHA_MAX_GRACE_S);
  const leaseLifetimeS = wholeSeconds(r, 'LEASEHOLD_NFS_LEASE_LIFETIME', 10, GANESHA_MAX_LEASE_S);
  if (r.ok)
    r.require(
      gracePeriodS >= leaseLifetimeS,
      `LEASEHOLD_NFS_GRACE_PERIOD=${gracePeriodS}s must be at least LEASEHOLD_NFS_LEASE_LIFETIME=${leaseLifetimeS}s (a client that was within its lease when the server moved must be able to reclaim; ganesha warns otherwise)`,
    );
  const exportPath = absolutePath(r, 'LEASEHOLD_NFS_EXPORT_PATH', '/export');
  const pseudoPath = absolutePath(r, 'LEASEHOLD_NFS_PSEUDO_PATH', exportPath === '' ? '/export' : exportPath);
  r.require(
    pseudoPath !== '/',
    'LEASEHOLD_NFS_PSEUDO_PATH="/": must not be the pseudo root "/" (ganesha builds that itself)',
  );
  const recoveryRoot = readRecoveryRoot(r, exportPath);
  const versions = readVersions(r);
  const port = r.integer('LEASEHOLD_NFS_PORT', 2049, 1, 65535);
  const mountPort = r.integer('LEASEHOLD_NFS_MOUNT_PORT', 20048, 1, 65535);
  if (versions.includes('3'))
    r.require(
      mountPort !== port,
      `LEASEHOLD_NFS_MOUNT_PORT=${mountPort} must differ from LEASEHOLD_NFS_PORT=${port} when NFSv3 is enabled`,
    );
  const bindAddr = r.string('LEASEHOLD_NFS_BIND_ADDR', { fallback: '0.0.0.0' });
  r.require(
    isIP(bindAddr) !== 0,
    `LEASEHOLD_NFS_BIND_ADDR=${JSON.stringify(bindAddr)}: must be an IPv4 or IPv6 address (0.0.0.0 listens on all)`,
  );
  const exportId = r.integer('LEASEHOLD_NFS_EXPORT_ID', 1, 1, 65535);
  const filesystemId = readFilesystemId(r);
  const serverOwner = r.optionalString('LEASEHOLD_NFS_SERVER_OWNER');
  if (serverOwner !== undefined)
    r.require(
      SERVER_OWNER.test(serverOwner),
      `LEASEHOLD_NFS_SERVER_OWNER=${JSON.stringify(serverOwner)}: must be 1 to 128 letters, digits, ".", "_", ":" or "-"`,
    );
  const clients = readClients(r);
  const squash = r.oneOf('LEASEHOLD_NFS_SQUASH', SQUASH_MODES, 'no_root_squash');
  const anonymousUid = optionalId(r, 'LEASEHOLD_NFS_ANONYMOUS_UID');
  const anonymousGid = optionalId(r, 'LEASEHOLD_NFS_ANONYMOUS_GID');
  const exportRoot = {
    uid: optionalId(r, 'LEASEHOLD_NFS_EXPORT_UID'),
    gid: optionalId(r, 'LEASEHOLD_NFS_EXPORT_GID'),
    mode: optionalMode(r, 'LEASEHOLD_NFS_EXPORT_MODE'),
  };
  const logLevel = r.oneOf('LEASEHOLD_NFS_LOG_LEVEL', GANESHA_LOG_LEVELS, 'EVENT');
  const runDir = absolutePath(r, 'LEASEHOLD_NFS_RUN_DIR', '/run/leasehold-nfs');
  const ganeshaBin = r.string('LEASEHOLD_NFS_GANESHA_BIN', {
    fallback: 'ganesha.nfsd',
    pattern: /^[A-Za-z0-9._+/-]+$/,
    rule: 'must be a program name or path (letters, digits, . _ + / -)',
  });
  const shim = r.string('LEASEHOLD_NFS_RECOVERY_SHIM', {
    fallback: DEFAULT_RECOVERY_SHIM,
    pattern: /^(none|\/[A-Za-z0-9._+/-]+)$/,
    rule: 'must be an absolute path or none',
  });
  const recoveryShim = shim === 'none' ? undefined : shim;
  const fsidShim = r.string('LEASEHOLD_NFS_STABLE_FSID_SHIM', {
    fallback: DEFAULT_STABLE_FSID_SHIM,
    pattern: /^(none|\/[A-Za-z0-9._+/-]+)$/,
    rule: 'must be an absolute path or none',
  });
  const stableFsidShim = fsidShim === 'none' ? undefined : fsidShim;
  const busShimPath = r.string('LEASEHOLD_NFS_BUS_SHIM', {
    fallback: DEFAULT_BUS_SHIM,
    pattern: /^(none|\/[A-Za-z0-9._+/-]+)$/,
    rule: 'must be an absolute path or none',
  });
  const busShim = busShimPath === 'none' ? undefined : busShimPath;
  const graceKickPath = r.string('LEASEHOLD_NFS_GRACE_KICK_SHIM', {
    fallback: DEFAULT_GRACE_KICK_SHIM,
    pattern: /^(none|\/[A-Za-z0-9._+/-]+)$/,
    rule: 'must be an absolute path or none',
  });
  const graceKickShim = graceKickPath === 'none' ? undefined : graceKickPath;
  const rpcbind = r.oneOf('LEASEHOLD_NFS_RPCBIND', RPCBIND_MODES, 'auto');
  const rpcbindBin = r.string('LEASEHOLD_NFS_RPCBIND_BIN', {
    fallback: 'rpcbind',
    pattern: /^[A-Za-z0-9._+/-]+$/,
    rule: 'must be a program name or path (letters, digits, . _ + / -)',
  });
  const startTimeoutMs = Math.floor(r.duration('LEASEHOLD_NFS_START_TIMEOUT', 30_000, 1_000, 10 * MINUTE));
  const stopTimeoutMs = Math.floor(r.duration('LEASEHOLD_NFS_STOP_TIMEOUT', 10_000, 100, 10 * MINUTE));
  const leaseGatePort =
    r.optionalString('LEASEHOLD_NFS_LEASE_GATE_PORT') === undefined
      ? undefined
      : r.integer('LEASEHOLD_NFS_LEASE_GATE_PORT', 0, 1, 65535);
  const leaseGateTimeoutMs = Math.floor(
    r.duration('LEASEHOLD_NFS_LEASE_GATE_TIMEOUT', 10 * MINUTE, 1_000, 24 * 60 * MINUTE),
  );
  // NB: at least 100 ms, so one local request and a poll step fit (lease-gate.ts scales them).
  const leaseProofToleranceMs = Math.floor(
    r.duration('LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE', WATCH_TOLERANCE_MS, 100, 10 * MINUTE),
  );
  const metricsPort =
    r.optionalString('LEASEHOLD_NFS_METRICS_PORT') === undefined
      ? undefined
      : r.integer('LEASEHOLD_NFS_METRICS_PORT', 0, 1, 65535);
  // The agent listens on the lease-gate port in the same pod: ganesha's ports must be others.
  if (leaseGatePort !== undefined)
    for (const [name, value] of [
      ['LEASEHOLD_NFS_PORT', port],
      ['LEASEHOLD_NFS_MOUNT_PORT', versions.includes('3') ? mountPort : undefined],
    ] as const)
      r.require(
        value !== leaseGatePort,
        `LEASEHOLD_NFS_LEASE_GATE_PORT=${leaseGatePort} must differ from ${name}=${value} (the agent and ganesha both listen in the pod)`,
      );
  if (metricsPort !== undefined) {
    const taken: [string, number | undefined][] = [
      ['LEASEHOLD_NFS_PORT', port],
      ['LEASEHOLD_NFS_MOUNT_PORT', versions.includes('3') ? mountPort : undefined],
      ['LEASEHOLD_NFS_LEASE_GATE_PORT', leaseGatePort],
    ];
    for (const [name, value] of taken)
      r.require(
        value !== metricsPort,
        `LEASEHOLD_NFS_METRICS_PORT=${metricsPort} must differ from ${name}=${value} (both listen in the pod)`,
      );
  }
  const program = {
    pattern: /^[A-Za-z0-9._+/-]+$/,
    rule: 'must be a program name or path (letters, digits, . _ + / -)',
  };
  const dbusDaemonBin = r.string('LEASEHOLD_NFS_DBUS_DAEMON_BIN', { fallback: 'dbus-daemon', ...program });
  const dbusSendBin = r.string('LEASEHOLD_NFS_DBUS_SEND_BIN', { fallback: 'dbus-send', ...program });
  r.done();
  return {
    exportPath,
    pseudoPath,
    recoveryRoot,
    versions,
    port,
    mountPort,
    bindAddr,
    gracePeriodS,
    leaseLifetimeS,
    exportId,
    filesystemId,
    serverOwner,
    clients,
    squash,
    anonymousUid,
    anonymousGid,
    exportRoot,
    logLevel,
    runDir,
    ganeshaBin,
    recoveryShim,
    stableFsidShim,
    busShim,
    graceKickShim,
    rpcbind,
    rpcbindBin,
    startTimeoutMs,
    stopTimeoutMs,
    leaseGatePort,
    leaseGateTimeoutMs,
    leaseProofToleranceMs,
    metricsPort,
    dbusDaemonBin,
    dbusSendBin,
  };
}

/** A uid or gid (0 .. 2^32 - 2: -1 means "unchanged" to chown(2)); undefined when unset. */
function optionalId(r: EnvReader, name: string): number | undefined {
  const text = r.optionalString(name);
  if (text === undefined) return undefined;
  const id = Number(text);
  if (!/^\d{1,10}$/.test(text) || id > 4_294_967_294) {
    r.require(false, `${name}=${JSON.stringify(text)}: must be a numeric id from 0 to 4294967294`);
    return undefined;
  }
  return id;
}

/** A permission mode in octal (e.g. 0775 or 2775); undefined when unset. */
function optionalMode(r: EnvReader, name: string): number | undefined {
  const text = r.optionalString(name);
  if (text === undefined) return undefined;
  if (!/^0?[0-7]{3,4}$/.test(text)) {
    r.require(
      false,
      `${name}=${JSON.stringify(text)}: must be an octal mode such as 0775 or 2775 (setgid: new files get the directory's group)`,
    );
    return undefined;
  }
  return Number.parseInt(text, 8);
}

/** An absolute, normalised path of safe characters; '' when unsound (a problem is recorded). */
function absolutePath(r: EnvReader, name: string, fallback: string): string {
  const value = r.string(name, { fallback });
  if (!isAbsolute(value) || !SAFE_PATH.test(value)) {
    r.require(false, `${name}=${JSON.stringify(value)}: ${SAFE_PATH_RULE}`);
    return '';
  }
  const normal = normalize(value);
  return normal.length > 1 && normal.endsWith('/') ? normal.slice(0, -1) : normal;
}

/** Relative (to the export) or absolute; must stay inside the export (it moves with the volume). */
function readRecoveryRoot(r: EnvReader, exportPath: string): string {
  const name = 'LEASEHOLD_NFS_RECOVERY_DIR';
  const value = r.string(name, { fallback: DEFAULT_RECOVERY_DIR });
  const full = isAbsolute(value) ? value : `${exportPath}/${value}`;
  if (!SAFE_PATH.test(full) || value.split('/').includes('..')) {
    r.require(
      false,
      `${name}=${JSON.stringify(value)}: must be a directory name or path (relative to LEASEHOLD_NFS_EXPORT_PATH, or absolute) of letters, digits and / . _ + @ = , : -, without ".."`,
    );
    return '';
  }
  if (exportPath === '') return '';
  const root = normalize(full).replace(/\/$/, '');
  r.require(
    root.startsWith(`${exportPath}/`) || (exportPath === '/' && root !== '/'),
    `${name}=${JSON.stringify(value)}: must be inside LEASEHOLD_NFS_EXPORT_PATH=${JSON.stringify(exportPath)} (and not the export itself), so client recovery state moves with the volume`,
  );
  return root;
}

function readVersions(r: EnvReader): NfsVersion[] {
  const name = 'LEASEHOLD_NFS_VERSIONS';
  const value = r.string(name, { fallback: '4.1,4.2' });
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const unknown = items.filter((v) => !(NFS_VERSIONS as readonly string[]).includes(v));
  if (items.length === 0 || unknown.length > 0) {
    r.require(
      false,
      `${name}=${JSON.stringify(value)}: must be a comma-separated list of ${NFS_VERSIONS.join(', ')}${unknown.length > 0 ? ` (unknown: ${unknown.join(', ')})` : ''}`,
    );
    return ['4.1', '4.2'];
  }
  // Canonical order, no duplicates: the rendered config does not depend on how it was written.
  return NFS_VERSIONS.filter((v) => items.includes(v));
}

/** A duration that must be a whole number of seconds (ganesha's unit), 1 s to max. */
function wholeSeconds(r: EnvReader, name: string, fallbackS: number, maxS: number): number {
  const ms = r.duration(name, fallbackS * 1000, 1000, maxS * 1000);
  if (ms % 1000 !== 0) {
    r.require(false, `${name}=${JSON.stringify(String(r.optionalString(name)))}: must be whole seconds`);
    return fallbackS;
  }
  return ms / 1000;
}

function readFilesystemId(r: EnvReader): string {
  const name = 'LEASEHOLD_NFS_FILESYSTEM_ID';
  const value = r.string(name, { fallback: '1.1' });
  const match = FILESYSTEM_ID.exec(value);
  const inRange =
    match !== null && BigInt(match[1] ?? '0') <= UINT64_MAX && BigInt(match[2] ?? '0') <= UINT64_MAX;
  if (!inRange) {
    r.require(
      false,
      `${name}=${JSON.stringify(value)}: must be major.minor, two whole numbers from 0 to ${UINT64_MAX} (e.g. 1.1)`,
    );
    return '1.1';
  }
  // Canonical: no leading zeros, so equal ids render equally.
  return `${BigInt(match?.[1] ?? '0')}.${BigInt(match?.[2] ?? '0')}`;
}

function readClients(r: EnvReader): string[] {
  const name = 'LEASEHOLD_NFS_CLIENTS';
  const value = r.string(name, { fallback: '*' });
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const bad = items.filter((c) => !CLIENT_ENTRY.test(c));
  if (items.length === 0 || bad.length > 0) {
    r.require(
      false,
      `${name}=${JSON.stringify(value)}: must be a comma-separated list of *, host names, wildcards, IP addresses, CIDRs or @netgroups${bad.length > 0 ? ` (bad: ${bad.map((b) => JSON.stringify(b)).join(', ')})` : ''}`,
    );
    return ['*'];
  }
  return items;
}
