/**
 * The NFS server's settings: defaults, one message per bad variable naming it, its value
 * and the rule, every problem at once, and exit code 2 from the real entrypoint.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ConfigError } from '../../lib/errors.ts';
import {
  DEFAULT_BUS_SHIM,
  DEFAULT_GRACE_KICK_SHIM,
  DEFAULT_RECOVERY_SHIM,
  DEFAULT_STABLE_FSID_SHIM,
  readNfsServerConfig,
} from '../../server/nfs-ganesha/config.ts';
import { repoRoot } from '../support/tools.ts';

function problemsOf(env: Record<string, string>): readonly string[] {
  try {
    readNfsServerConfig(env);
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${String(err)}`);
    return err.problems;
  }
  assert.fail(`expected ${JSON.stringify(env)} to be rejected`);
}

function assertOneProblem(env: Record<string, string>, ...fragments: string[]): void {
  const problems = problemsOf(env);
  assert.equal(problems.length, 1, `expected one problem, got: ${problems.join(' | ')}`);
  for (const fragment of fragments)
    assert.ok(problems[0]?.includes(fragment), `"${problems[0]}" lacks "${fragment}"`);
}

describe('nfs-ganesha config', () => {
  it('applies the documented defaults with an empty env', () => {
    assert.deepEqual(readNfsServerConfig({}), {
      exportPath: '/export',
      pseudoPath: '/export',
      recoveryRoot: '/export/.leasehold-ganesha-recovery',
      versions: ['4.1', '4.2'],
      port: 2049,
      mountPort: 20048,
      bindAddr: '0.0.0.0',
      gracePeriodS: 15,
      leaseLifetimeS: 10,
      exportId: 1,
      filesystemId: '1.1',
      serverOwner: undefined,
      clients: ['*'],
      squash: 'no_root_squash',
      anonymousUid: undefined,
      anonymousGid: undefined,
      exportRoot: { uid: undefined, gid: undefined, mode: undefined },
      logLevel: 'EVENT',
      runDir: '/run/leasehold-nfs',
      ganeshaBin: 'ganesha.nfsd',
      recoveryShim: DEFAULT_RECOVERY_SHIM,
      stableFsidShim: DEFAULT_STABLE_FSID_SHIM,
      busShim: DEFAULT_BUS_SHIM,
      graceKickShim: DEFAULT_GRACE_KICK_SHIM,
      rpcbind: 'auto',
      rpcbindBin: 'rpcbind',
      startTimeoutMs: 30_000,
      stopTimeoutMs: 10_000,
      leaseGatePort: undefined,
      leaseGateTimeoutMs: 600_000,
      leaseProofToleranceMs: 2_000,
      metricsPort: undefined,
      dbusDaemonBin: 'dbus-daemon',
      dbusSendBin: 'dbus-send',
    });
  });

  it('the grace-kick shim: on by default, off with none, else an absolute path', () => {
    const base = { LEASEHOLD_NFS_EXPORT_PATH: '/data' };
    assert.equal(
      readNfsServerConfig({ ...base, LEASEHOLD_NFS_GRACE_KICK_SHIM: 'none' }).graceKickShim,
      undefined,
    );
    assert.equal(
      readNfsServerConfig({ ...base, LEASEHOLD_NFS_GRACE_KICK_SHIM: '/opt/kick.so' }).graceKickShim,
      '/opt/kick.so',
    );
    assert.ok(
      problemsOf({ ...base, LEASEHOLD_NFS_GRACE_KICK_SHIM: 'kick.so' }).some((p) =>
        p.startsWith('LEASEHOLD_NFS_GRACE_KICK_SHIM="kick.so": must be an absolute path or none'),
      ),
    );
  });

  it('the metrics port: off when unset, must not collide with the NFS, MOUNT or agent port', () => {
    assert.equal(readNfsServerConfig({ LEASEHOLD_NFS_METRICS_PORT: '9587' }).metricsPort, 9587);
    assert.throws(
      () =>
        readNfsServerConfig({
          LEASEHOLD_NFS_METRICS_PORT: '8081',
          LEASEHOLD_NFS_LEASE_GATE_PORT: '8081',
        }),
      /LEASEHOLD_NFS_METRICS_PORT=8081 must differ from LEASEHOLD_NFS_LEASE_GATE_PORT=8081/,
    );
    assert.throws(
      () => readNfsServerConfig({ LEASEHOLD_NFS_METRICS_PORT: '2049' }),
      /must differ from LEASEHOLD_NFS_PORT=2049/,
    );
    // The MOUNT port only counts with NFSv3.
    assert.equal(readNfsServerConfig({ LEASEHOLD_NFS_METRICS_PORT: '20048' }).metricsPort, 20048);
  });

  it("the lease gate's port (the agent's, in the same pod) must not be ganesha's NFS or MOUNT port", () => {
    assert.throws(
      () => readNfsServerConfig({ LEASEHOLD_NFS_LEASE_GATE_PORT: '2049' }),
      /LEASEHOLD_NFS_LEASE_GATE_PORT=2049 must differ from LEASEHOLD_NFS_PORT=2049/,
    );
    assert.throws(
      () => readNfsServerConfig({ LEASEHOLD_NFS_LEASE_GATE_PORT: '20048', LEASEHOLD_NFS_VERSIONS: '3,4.1' }),
      /LEASEHOLD_NFS_LEASE_GATE_PORT=20048 must differ from LEASEHOLD_NFS_MOUNT_PORT=20048/,
    );
    assert.equal(readNfsServerConfig({ LEASEHOLD_NFS_LEASE_GATE_PORT: '20048' }).leaseGatePort, 20048);
  });

  it('reads every setting', () => {
    const config = readNfsServerConfig({
      LEASEHOLD_NFS_EXPORT_PATH: '/data/vol-1/',
      LEASEHOLD_NFS_PSEUDO_PATH: '/vol-1',
      LEASEHOLD_NFS_RECOVERY_DIR: 'state/recovery',
      LEASEHOLD_NFS_VERSIONS: '4.2, 3,4.1,4.2',
      LEASEHOLD_NFS_PORT: '12049',
      LEASEHOLD_NFS_MOUNT_PORT: '12048',
      LEASEHOLD_NFS_BIND_ADDR: '::',
      LEASEHOLD_NFS_GRACE_PERIOD: '1m',
      LEASEHOLD_NFS_LEASE_LIFETIME: '30s',
      LEASEHOLD_NFS_EXPORT_ID: '7',
      LEASEHOLD_NFS_FILESYSTEM_ID: '0042.007',
      LEASEHOLD_NFS_SERVER_OWNER: 'vol-1.ns1',
      LEASEHOLD_NFS_CLIENTS: '10.0.0.0/8, *.cluster.local',
      LEASEHOLD_NFS_SQUASH: 'root_squash',
      LEASEHOLD_NFS_ANONYMOUS_UID: '65534',
      LEASEHOLD_NFS_ANONYMOUS_GID: '0',
      LEASEHOLD_NFS_EXPORT_UID: '1000',
      LEASEHOLD_NFS_EXPORT_GID: '2000',
      LEASEHOLD_NFS_EXPORT_MODE: '2775',
      LEASEHOLD_NFS_LOG_LEVEL: 'DEBUG',
      LEASEHOLD_NFS_RUN_DIR: '/tmp/run',
      LEASEHOLD_NFS_GANESHA_BIN: '/opt/ganesha/bin/ganesha.nfsd',
      LEASEHOLD_NFS_RPCBIND: 'external',
      LEASEHOLD_NFS_RPCBIND_BIN: '/sbin/rpcbind',
      LEASEHOLD_NFS_START_TIMEOUT: '5s',
      LEASEHOLD_NFS_STOP_TIMEOUT: '500ms',
    });
    assert.equal(config.rpcbind, 'external');
    assert.equal(config.rpcbindBin, '/sbin/rpcbind');
    assert.equal(config.exportPath, '/data/vol-1');
    assert.equal(config.recoveryRoot, '/data/vol-1/state/recovery');
    // Canonical order, duplicates dropped.
    assert.deepEqual(config.versions, ['3', '4.1', '4.2']);
    assert.equal(config.gracePeriodS, 60);
    assert.equal(config.leaseLifetimeS, 30);
    assert.equal(config.filesystemId, '42.7');
    assert.deepEqual(config.clients, ['10.0.0.0/8', '*.cluster.local']);
    assert.equal(config.stopTimeoutMs, 500);
    assert.equal(config.bindAddr, '::');
    assert.equal(config.anonymousUid, 65534);
    assert.equal(config.anonymousGid, 0);
    assert.deepEqual(config.exportRoot, { uid: 1000, gid: 2000, mode: 0o2775 });
  });

  it('defaults the pseudo path to the export path', () => {
    assert.equal(readNfsServerConfig({ LEASEHOLD_NFS_EXPORT_PATH: '/data' }).pseudoPath, '/data');
  });

  it('accepts an absolute recovery directory inside the export', () => {
    const config = readNfsServerConfig({
      LEASEHOLD_NFS_EXPORT_PATH: '/data',
      LEASEHOLD_NFS_RECOVERY_DIR: '/data/.state',
    });
    assert.equal(config.recoveryRoot, '/data/.state');
  });

  const bad: Array<[Record<string, string>, ...string[]]> = [
    [
      { LEASEHOLD_NFS_ANONYMOUS_UID: '-2' },
      'LEASEHOLD_NFS_ANONYMOUS_UID="-2"',
      'numeric id from 0 to 4294967294',
    ],
    [{ LEASEHOLD_NFS_EXPORT_GID: '4294967295' }, 'LEASEHOLD_NFS_EXPORT_GID="4294967295"', 'numeric id'],
    [{ LEASEHOLD_NFS_EXPORT_UID: 'nobody' }, 'LEASEHOLD_NFS_EXPORT_UID="nobody"', 'numeric id'],
    [{ LEASEHOLD_NFS_EXPORT_MODE: '777x' }, 'LEASEHOLD_NFS_EXPORT_MODE="777x"', 'octal mode'],
    [{ LEASEHOLD_NFS_EXPORT_MODE: '0888' }, 'LEASEHOLD_NFS_EXPORT_MODE="0888"', 'octal mode'],
    [{ LEASEHOLD_NFS_RPCBIND: 'yes' }, 'LEASEHOLD_NFS_RPCBIND', 'auto', 'external'],
    [{ LEASEHOLD_NFS_RPCBIND_BIN: 'rpc bind' }, 'LEASEHOLD_NFS_RPCBIND_BIN', 'program name'],
    [{ LEASEHOLD_NFS_EXPORT_PATH: 'export' }, 'LEASEHOLD_NFS_EXPORT_PATH="export"', 'absolute path'],
    [{ LEASEHOLD_NFS_EXPORT_PATH: '/my export' }, 'LEASEHOLD_NFS_EXPORT_PATH="/my export"', 'no spaces'],
    [{ LEASEHOLD_NFS_EXPORT_PATH: '/ex"port' }, 'LEASEHOLD_NFS_EXPORT_PATH="/ex\\"port"', 'quotes'],
    [{ LEASEHOLD_NFS_PSEUDO_PATH: '/' }, 'LEASEHOLD_NFS_PSEUDO_PATH="/"', 'pseudo root'],
    [{ LEASEHOLD_NFS_PSEUDO_PATH: 'vol' }, 'LEASEHOLD_NFS_PSEUDO_PATH="vol"', 'absolute path'],
    [{ LEASEHOLD_NFS_RECOVERY_DIR: '../outside' }, 'LEASEHOLD_NFS_RECOVERY_DIR="../outside"', 'without ".."'],
    [
      { LEASEHOLD_NFS_RECOVERY_DIR: '/var/lib/nfs/ganesha' },
      'LEASEHOLD_NFS_RECOVERY_DIR="/var/lib/nfs/ganesha"',
      'must be inside LEASEHOLD_NFS_EXPORT_PATH="/export"',
      'moves with the volume',
    ],
    [
      { LEASEHOLD_NFS_RECOVERY_DIR: '/export' },
      'LEASEHOLD_NFS_RECOVERY_DIR="/export"',
      'not the export itself',
    ],
    [{ LEASEHOLD_NFS_VERSIONS: '4' }, 'LEASEHOLD_NFS_VERSIONS="4"', '3, 4.0, 4.1, 4.2', 'unknown: 4'],
    [{ LEASEHOLD_NFS_VERSIONS: ',' }, 'LEASEHOLD_NFS_VERSIONS=","', 'comma-separated list'],
    [{ LEASEHOLD_NFS_PORT: '0' }, 'LEASEHOLD_NFS_PORT="0"', 'from 1 to 65535'],
    [{ LEASEHOLD_NFS_PORT: '2049x' }, 'LEASEHOLD_NFS_PORT="2049x"', 'whole number'],
    [{ LEASEHOLD_NFS_MOUNT_PORT: '70000' }, 'LEASEHOLD_NFS_MOUNT_PORT="70000"', 'from 1 to 65535'],
    [
      { LEASEHOLD_NFS_VERSIONS: '3,4.1', LEASEHOLD_NFS_PORT: '2049', LEASEHOLD_NFS_MOUNT_PORT: '2049' },
      'LEASEHOLD_NFS_MOUNT_PORT=2049',
      'differ from LEASEHOLD_NFS_PORT=2049',
    ],
    [{ LEASEHOLD_NFS_BIND_ADDR: 'localhost' }, 'LEASEHOLD_NFS_BIND_ADDR="localhost"', 'IPv4 or IPv6 address'],
    [{ LEASEHOLD_NFS_GRACE_PERIOD: '0' }, 'LEASEHOLD_NFS_GRACE_PERIOD="0"', 'from 1s to 270s'],
    [{ LEASEHOLD_NFS_GRACE_PERIOD: '5m' }, 'LEASEHOLD_NFS_GRACE_PERIOD="5m"', 'from 1s to 270s'],
    [{ LEASEHOLD_NFS_GRACE_PERIOD: '15.5s' }, 'LEASEHOLD_NFS_GRACE_PERIOD="15.5s"', 'whole seconds'],
    [{ LEASEHOLD_NFS_GRACE_PERIOD: 'soon' }, 'LEASEHOLD_NFS_GRACE_PERIOD="soon"', 'duration such as'],
    [{ LEASEHOLD_NFS_LEASE_LIFETIME: '181' }, 'LEASEHOLD_NFS_LEASE_LIFETIME="181"', 'from 1s to 180s'],
    [
      { LEASEHOLD_NFS_GRACE_PERIOD: '5s' },
      'LEASEHOLD_NFS_GRACE_PERIOD=5s must be at least LEASEHOLD_NFS_LEASE_LIFETIME=10s',
      'reclaim',
    ],
    [{ LEASEHOLD_NFS_EXPORT_ID: '0' }, 'LEASEHOLD_NFS_EXPORT_ID="0"', 'from 1 to 65535'],
    [{ LEASEHOLD_NFS_FILESYSTEM_ID: '7' }, 'LEASEHOLD_NFS_FILESYSTEM_ID="7"', 'major.minor'],
    [
      { LEASEHOLD_NFS_FILESYSTEM_ID: '18446744073709551616.1' },
      'LEASEHOLD_NFS_FILESYSTEM_ID="18446744073709551616.1"',
      'from 0 to 18446744073709551615',
    ],
    [{ LEASEHOLD_NFS_SERVER_OWNER: 'vol 1' }, 'LEASEHOLD_NFS_SERVER_OWNER="vol 1"', '1 to 128 letters'],
    [
      { LEASEHOLD_NFS_CLIENTS: '10.0.0.0/8,"x"' },
      'LEASEHOLD_NFS_CLIENTS="10.0.0.0/8,\\"x\\""',
      'bad: "\\"x\\""',
    ],
    [
      { LEASEHOLD_NFS_SQUASH: 'none' },
      'LEASEHOLD_NFS_SQUASH="none"',
      'no_root_squash, root_squash, all_squash',
    ],
    [{ LEASEHOLD_NFS_LOG_LEVEL: 'info' }, 'LEASEHOLD_NFS_LOG_LEVEL="info"', 'EVENT'],
    [{ LEASEHOLD_NFS_RUN_DIR: 'run' }, 'LEASEHOLD_NFS_RUN_DIR="run"', 'absolute path'],
    [
      { LEASEHOLD_NFS_GANESHA_BIN: 'ganesha.nfsd -F' },
      'LEASEHOLD_NFS_GANESHA_BIN="ganesha.nfsd -F"',
      'program name or path',
    ],
    [{ LEASEHOLD_NFS_START_TIMEOUT: '100ms' }, 'LEASEHOLD_NFS_START_TIMEOUT="100ms"', 'from 1s to 600s'],
    [{ LEASEHOLD_NFS_STOP_TIMEOUT: '11m' }, 'LEASEHOLD_NFS_STOP_TIMEOUT="11m"', 'from 100ms to 600s'],
  ];
  for (const [env, ...fragments] of bad) {
    it(`rejects ${JSON.stringify(env)}`, () => assertOneProblem(env, ...fragments));
  }

  it('lists every bad variable at once', () => {
    const problems = problemsOf({
      LEASEHOLD_NFS_EXPORT_PATH: 'relative',
      LEASEHOLD_NFS_PORT: '-1',
      LEASEHOLD_NFS_VERSIONS: '5',
      LEASEHOLD_NFS_SQUASH: 'maybe',
    });
    for (const name of ['EXPORT_PATH', 'PORT', 'VERSIONS', 'SQUASH'])
      assert.ok(
        problems.some((p) => p.startsWith(`LEASEHOLD_NFS_${name}=`)),
        `${name} missing from ${problems.join(' | ')}`,
      );
  });

  it('the entrypoint exits 2 with one message naming each bad variable, before any work', () => {
    const result = spawnSync(
      process.execPath,
      ['--import', 'tsx', join(repoRoot, 'server/nfs-ganesha/main.ts')],
      {
        cwd: repoRoot,
        env: {
          PATH: process.env.PATH ?? '',
          LEASEHOLD_NFS_PORT: 'nfs',
          LEASEHOLD_NFS_GRACE_PERIOD: '2s',
          LEASEHOLD_NFS_EXPORT_PATH: '/does-not-exist-so-no-work-may-happen',
        },
        encoding: 'utf8',
        timeout: 30_000,
      },
    );
    assert.equal(result.status, 2, `stderr: ${result.stderr}`);
    assert.match(result.stderr, /^leasehold nfs-server: invalid configuration:/);
    assert.match(result.stderr, /LEASEHOLD_NFS_PORT="nfs": must be a whole number from 1 to 65535/);
    assert.match(
      result.stderr,
      /LEASEHOLD_NFS_GRACE_PERIOD=2s must be at least LEASEHOLD_NFS_LEASE_LIFETIME=10s/,
    );
    assert.equal(result.stdout, '', 'nothing was started, so nothing was logged');
  });

  it('README documents every variable config.ts reads', () => {
    const code = readFileSync(join(repoRoot, 'server/nfs-ganesha/config.ts'), 'utf8');
    const readme = readFileSync(join(repoRoot, 'server/nfs-ganesha/README.md'), 'utf8');
    const vars = new Set([...code.matchAll(/['"`](LEASEHOLD_NFS_[A-Z0-9_]+)['"`]/g)].map((m) => m[1]));
    assert.ok(vars.size >= 19, `found ${vars.size} variables in config.ts`);
    const undocumented = [...vars].filter((v) => !readme.includes(`\`${v}\``));
    assert.deepEqual(undocumented, []);
  });
});
