/**
 * What the server needs from the volume and the pod before ganesha starts, checked once
 * at start, each failure a ServerStartError naming the setting and what was found:
 *  - the export directory exists and is a directory (is the volume mounted?);
 *  - the recovery directory can be created in it (so the volume is writable) and is on
 *    the export's file system (same st_dev), so client recovery state moves with the
 *    volume to the replacement;
 *  - the server identity: LEASEHOLD_NFS_SERVER_OWNER when set, else the one stored on the
 *    volume (`<recovery dir>/server-owner`), created once as `leasehold-<random UUID>`.
 *    Stored on the volume, it is the same in every incarnation on every node and differs
 *    between volumes without any setting (ganesha-conf.ts says why both matter);
 *  - the run directory (rendered config, pid file) is writable;
 *  - the export root's owner, group and mode, when set (LEASEHOLD_NFS_EXPORT_UID/GID/
 *    MODE), applied at every start: the root only, never recursively (a recursive chown
 *    of a large volume would delay every failover by its size).
 *
 * Invariant: the identity file is written to a temporary name, fsynced, then renamed and
 * the directory fsynced, so a node crash leaves it absent or whole, never empty. A file
 * that is there but holds no valid identity is an error, never silently replaced (clients
 * may hold state under the identity it had).
 */
import { createHash, randomUUID } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import type { NfsServerConfig } from './config.ts';
import { ServerStartError } from './exit-codes.ts';

export const IDENTITY_FILE = 'server-owner';
const IDENTITY = /^[A-Za-z0-9._:-]{1,128}$/;

export interface PreparedServer {
  serverOwner: string;
  /**
   * For native/stable-fsid.c: the fsid the export's file system gets ("<u32>.<u32>",
   * stableFsidOf the server owner: the volume's identity) and the export's device
   * ("major:minor"), whose f_fsid it replaces when the kernel derived it from that device.
   */
  stableFsid: { fsid: string; dev: string };
  /** Where it came from, for the start log line. */
  serverOwnerSource: 'env' | 'volume' | 'created';
  configPath: string;
  pidPath: string;
}

/** Checks the volume, resolves the identity and writes the rendered config. */
export function prepareServer(
  config: NfsServerConfig,
  render: (serverOwner: string) => string,
): PreparedServer {
  if (config.stableFsidShim !== undefined && !existsSync(config.stableFsidShim))
    throw new ServerStartError(
      `LEASEHOLD_NFS_STABLE_FSID_SHIM=${config.stableFsidShim}: no such file (server/nfs-ganesha/native/build.sh builds it beside main.js; \`none\` runs ganesha without it, and on XFS every file handle goes stale when the volume comes back under another device number)`,
    );
  if (config.metricsPort !== undefined && config.busShim !== undefined && !existsSync(config.busShim))
    throw new ServerStartError(
      `LEASEHOLD_NFS_BUS_SHIM=${config.busShim}: no such file (server/nfs-ganesha/native/build.sh builds it beside main.js; \`none\` runs ganesha without it, and the metrics' private bus ending then ends ganesha)`,
    );
  if (config.graceKickShim !== undefined && !existsSync(config.graceKickShim))
    throw new ServerStartError(
      `LEASEHOLD_NFS_GRACE_KICK_SHIM=${config.graceKickShim}: no such file (server/nfs-ganesha/native/build.sh builds it beside main.js; \`none\` runs ganesha without it, and new opens and locks then wait for ganesha's reaper tick, up to Lease_Lifetime / 2 after every client reclaimed)`,
    );
  if (config.recoveryShim !== undefined && !existsSync(config.recoveryShim))
    throw new ServerStartError(
      `LEASEHOLD_NFS_RECOVERY_SHIM=${config.recoveryShim}: no such file (server/nfs-ganesha/native/build.sh builds it beside main.js; \`none\` runs ganesha without it, and a client whose address changes across a failover then loses its opens and locks)`,
    );
  const exportDev = checkExportDir(config.exportPath);
  applyExportRoot(config);
  const recoveryDev = ensureDir(config.recoveryRoot, 'LEASEHOLD_NFS_RECOVERY_DIR');
  if (recoveryDev !== exportDev) {
    throw new ServerStartError(
      `LEASEHOLD_NFS_RECOVERY_DIR: ${config.recoveryRoot} is on another file system (device ${recoveryDev}) than LEASEHOLD_NFS_EXPORT_PATH=${config.exportPath} (device ${exportDev}): client recovery state would not move with the volume`,
    );
  }
  const { serverOwner, source } =
    config.serverOwner === undefined
      ? volumeIdentity(config.recoveryRoot)
      : { serverOwner: config.serverOwner, source: 'env' as const };
  ensureDir(config.runDir, 'LEASEHOLD_NFS_RUN_DIR');
  const configPath = join(config.runDir, 'ganesha.conf');
  try {
    writeFileSync(configPath, render(serverOwner), { mode: 0o644 });
  } catch (err) {
    throw new ServerStartError(
      `LEASEHOLD_NFS_RUN_DIR=${config.runDir}: cannot write ${configPath}: ${(err as Error).message}`,
      { cause: err },
    );
  }
  return {
    serverOwner,
    stableFsid: {
      fsid: stableFsidOf(serverOwner),
      dev: deviceName(statSync(config.exportPath, { bigint: true }).dev),
    },
    serverOwnerSource: source,
    configPath,
    pidPath: join(config.runDir, 'ganesha.pid'),
  };
}

/**
 * The export's fsid from the volume's identity (the server owner stored on it, or given
 * by env): the first 8 bytes of its SHA-256 as two u32, never 0.0 (which ganesha
 * replaces with the device number). The same volume gives the same fsid on every node.
 */
export function stableFsidOf(serverOwner: string): string {
  const digest = createHash('sha256').update(serverOwner).digest();
  const hi = digest.readUInt32BE(0);
  const lo = digest.readUInt32BE(4);
  return hi === 0 && lo === 0 ? '0.1' : `${hi}.${lo}`;
}

/** glibc's dev_t as "major:minor" (gnu_dev_major/gnu_dev_minor). */
export function deviceName(dev: bigint): string {
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

/** chown/chmod of the export root as configured; a failure names the setting and the errno. */
function applyExportRoot(config: NfsServerConfig): void {
  const { uid, gid, mode } = config.exportRoot;
  if (uid !== undefined || gid !== undefined) {
    try {
      // -1 leaves that id unchanged (chown(2)).
      chownSync(config.exportPath, uid ?? -1, gid ?? -1);
    } catch (err) {
      throw new ServerStartError(
        `LEASEHOLD_NFS_EXPORT_UID/GID=${uid ?? '-'}/${gid ?? '-'}: cannot chown ${config.exportPath}: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }
  if (mode !== undefined) {
    try {
      chmodSync(config.exportPath, mode);
    } catch (err) {
      throw new ServerStartError(
        `LEASEHOLD_NFS_EXPORT_MODE=${mode.toString(8).padStart(4, '0')}: cannot chmod ${config.exportPath}: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }
}

/** The export's device number; throws when it is missing or not a directory. */
function checkExportDir(path: string): number {
  let stat: ReturnType<typeof statSync>;
  try {
    stat = statSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ServerStartError(
      code === 'ENOENT'
        ? `LEASEHOLD_NFS_EXPORT_PATH=${path}: the directory does not exist (is the volume mounted there?)`
        : `LEASEHOLD_NFS_EXPORT_PATH=${path}: cannot stat it: ${(err as Error).message}`,
      { cause: err },
    );
  }
  if (!stat.isDirectory())
    throw new ServerStartError(`LEASEHOLD_NFS_EXPORT_PATH=${path}: is not a directory`);
  return stat.dev;
}

/** Creates `path` (and parents) when missing; returns its device number. */
function ensureDir(path: string, setting: string): number {
  try {
    mkdirSync(path, { recursive: true, mode: 0o755 });
    const stat = statSync(path);
    if (!stat.isDirectory()) throw new Error('exists and is not a directory');
    return stat.dev;
  } catch (err) {
    throw new ServerStartError(
      `${setting}: cannot create the directory ${path} (is the volume writable?): ${(err as Error).message}`,
      { cause: err },
    );
  }
}

function volumeIdentity(recoveryRoot: string): { serverOwner: string; source: 'volume' | 'created' } {
  const path = join(recoveryRoot, IDENTITY_FILE);
  const existing = readIdentity(path);
  if (existing !== undefined) return { serverOwner: existing, source: 'volume' };
  const serverOwner = `leasehold-${randomUUID()}`;
  const tmp = `${path}.tmp-${process.pid}`;
  try {
    const fd = openSync(tmp, 'w', 0o644);
    try {
      writeFileSync(fd, `${serverOwner}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, path);
    const dir = openSync(recoveryRoot, 'r');
    try {
      fsyncSync(dir);
    } finally {
      closeSync(dir);
    }
  } catch (err) {
    throw new ServerStartError(
      `LEASEHOLD_NFS_RECOVERY_DIR: cannot store the server identity in ${path}: ${(err as Error).message}`,
      { cause: err },
    );
  }
  return { serverOwner, source: 'created' };
}

/** The stored identity; undefined when there is no file yet. */
function readIdentity(path: string): string | undefined {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new ServerStartError(`cannot read the server identity ${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  const value = text.trim();
  if (!IDENTITY.test(value)) {
    throw new ServerStartError(
      `the server identity ${path} holds ${JSON.stringify(value.slice(0, 60))}, not 1 to 128 letters, digits, ".", "_", ":" or "-": fix or remove it (clients may hold state under the old identity), or set LEASEHOLD_NFS_SERVER_OWNER`,
    );
  }
  return value;
}
