/**
 * The rendered ganesha config: the right blocks and values for the settings, and the
 * properties failover depends on (ids and server identity are functions of the settings
 * only, the text is deterministic). Also the NULL-call probe's wire format.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type NfsServerConfig, readNfsServerConfig } from '../../server/nfs-ganesha/config.ts';
import { renderGaneshaConfig } from '../../server/nfs-ganesha/ganesha-conf.ts';
import { encodeNullCall, NFS_PROGRAM, parseNullReply } from '../../server/nfs-ganesha/rpc-null-probe.ts';

const OWNER = 'leasehold-0f3c2f4e-5d7a-4e0b-9d63-1f1e2a3b4c5d';

/** The body of `NAME {` … its closing brace at the same indentation. */
function block(text: string, name: string, indent = ''): string {
  const start = text.indexOf(`\n${indent}${name} {\n`);
  assert.ok(start >= 0, `no ${name} block in:\n${text}`);
  const end = text.indexOf(`\n${indent}}\n`, start + 1);
  return text.slice(start, end);
}

function settingOf(body: string, key: string): string | undefined {
  return new RegExp(`^\\s*${key} = (.*);$`, 'm').exec(body)?.[1];
}

describe('ganesha config rendering', () => {
  const defaults = renderGaneshaConfig(readNfsServerConfig({}), OWNER);

  it('renders the default NFSv4.1/4.2 server without rpcbind, NLM or UDP', () => {
    const core = block(defaults, 'NFS_CORE_PARAM');
    assert.equal(settingOf(core, 'NFS_Port'), '2049');
    assert.equal(settingOf(core, 'Bind_Addr'), '0.0.0.0');
    assert.equal(settingOf(core, 'Protocols'), '4');
    assert.equal(settingOf(core, 'Enable_NLM'), 'false');
    assert.equal(settingOf(core, 'Enable_UDP'), 'false');
    assert.equal(settingOf(core, 'Enable_RQUOTA'), 'false');
    assert.equal(settingOf(core, 'Clustered'), 'false');
    assert.equal(settingOf(core, 'MNT_Port'), undefined);
    const v4 = block(defaults, 'NFSv4');
    assert.equal(settingOf(v4, 'Minor_Versions'), '1, 2');
    assert.equal(settingOf(v4, 'Grace_Period'), '15');
    assert.equal(settingOf(v4, 'Lease_Lifetime'), '10');
    assert.equal(settingOf(v4, 'Graceless'), 'false');
  });

  it('keeps client recovery state on the volume, under the fixed server identity', () => {
    const v4 = block(defaults, 'NFSv4');
    assert.equal(settingOf(v4, 'RecoveryBackend'), 'fs');
    assert.equal(settingOf(v4, 'RecoveryRoot'), '"/export/.leasehold-ganesha-recovery"');
    assert.equal(settingOf(v4, 'Server_Owner'), `"${OWNER}"`);
    assert.equal(settingOf(v4, 'Server_Scope'), `"${OWNER}"`);
  });

  it('exports the volume read-write over TCP to the configured clients', () => {
    const exp = block(defaults, 'EXPORT');
    assert.equal(settingOf(exp, 'Export_Id'), '1');
    assert.equal(settingOf(exp, 'Path'), '"/export"');
    assert.equal(settingOf(exp, 'Pseudo'), '"/export"');
    assert.equal(settingOf(exp, 'Filesystem_Id'), '1.1');
    assert.equal(settingOf(exp, 'Transports'), 'TCP');
    const client = block(exp, 'CLIENT', '  ');
    assert.equal(settingOf(client, 'Clients'), '*');
    assert.equal(settingOf(client, 'Access_Type'), 'RW');
    assert.equal(settingOf(client, 'Squash'), 'no_root_squash');
    assert.equal(settingOf(client, 'Anonymous_Uid'), undefined, "ganesha's own default");
    assert.equal(settingOf(block(exp, 'FSAL', '  '), 'Name'), 'VFS');
    assert.equal(settingOf(block(defaults, 'LOG'), 'Default_Log_Level'), 'EVENT');
  });

  it('renders the settings it is given', () => {
    const text = renderGaneshaConfig(
      readNfsServerConfig({
        LEASEHOLD_NFS_EXPORT_PATH: '/data',
        LEASEHOLD_NFS_PSEUDO_PATH: '/vol-1',
        LEASEHOLD_NFS_PORT: '12049',
        LEASEHOLD_NFS_BIND_ADDR: '127.0.0.1',
        LEASEHOLD_NFS_GRACE_PERIOD: '90s',
        LEASEHOLD_NFS_LEASE_LIFETIME: '60s',
        LEASEHOLD_NFS_CLIENTS: '10.0.0.0/8,192.168.1.7',
        LEASEHOLD_NFS_SQUASH: 'all_squash',
        LEASEHOLD_NFS_ANONYMOUS_UID: '1000',
        LEASEHOLD_NFS_ANONYMOUS_GID: '2000',
        LEASEHOLD_NFS_RUN_DIR: '/tmp/r',
        LEASEHOLD_NFS_LOG_LEVEL: 'DEBUG',
      }),
      'vol-1',
    );
    assert.equal(settingOf(block(text, 'NFS_CORE_PARAM'), 'NFS_Port'), '12049');
    assert.equal(settingOf(block(text, 'NFS_CORE_PARAM'), 'Bind_Addr'), '127.0.0.1');
    assert.equal(settingOf(block(text, 'NFSv4'), 'Grace_Period'), '90');
    assert.equal(settingOf(block(text, 'NFSv4'), 'Lease_Lifetime'), '60');
    assert.equal(settingOf(block(text, 'NFSv4'), 'RecoveryRoot'), '"/data/.leasehold-ganesha-recovery"');
    assert.equal(settingOf(block(text, 'EXPORT'), 'Pseudo'), '"/vol-1"');
    // NB: ganesha rejects quoted client entries.
    assert.equal(settingOf(block(text, 'CLIENT', '  '), 'Clients'), '10.0.0.0/8, 192.168.1.7');
    assert.equal(settingOf(block(text, 'CLIENT', '  '), 'Squash'), 'all_squash');
    assert.equal(settingOf(block(text, 'CLIENT', '  '), 'Anonymous_Uid'), '1000');
    assert.equal(settingOf(block(text, 'CLIENT', '  '), 'Anonymous_Gid'), '2000');
    assert.equal(settingOf(block(text, 'NFS_KRB5'), 'CCacheDir'), '"/tmp/r"');
    assert.equal(settingOf(block(text, 'LOG'), 'Default_Log_Level'), 'DEBUG');
  });

  it('adds NFSv3 (MOUNT port, pseudo mount paths) only when asked', () => {
    const both = renderGaneshaConfig(readNfsServerConfig({ LEASEHOLD_NFS_VERSIONS: '3,4.1' }), OWNER);
    const core = block(both, 'NFS_CORE_PARAM');
    assert.equal(settingOf(core, 'Protocols'), '3, 4');
    assert.equal(settingOf(core, 'MNT_Port'), '20048');
    assert.equal(settingOf(core, 'mount_path_pseudo'), 'true');
    assert.equal(settingOf(core, 'Enable_NLM'), 'false');
    assert.equal(settingOf(block(both, 'EXPORT'), 'Protocols'), '3, 4');
    assert.equal(settingOf(block(both, 'NFSv4'), 'Minor_Versions'), '1');
    const v3only = renderGaneshaConfig(readNfsServerConfig({ LEASEHOLD_NFS_VERSIONS: '3' }), OWNER);
    assert.equal(settingOf(block(v3only, 'NFS_CORE_PARAM'), 'Protocols'), '3');
    assert.equal(settingOf(block(v3only, 'NFSv4'), 'Minor_Versions'), undefined);
    const with40 = renderGaneshaConfig(readNfsServerConfig({ LEASEHOLD_NFS_VERSIONS: '4.0,4.1,4.2' }), OWNER);
    assert.equal(settingOf(block(with40, 'NFSv4'), 'Minor_Versions'), '0, 1, 2');
  });

  it('Export_Id, Filesystem_id and the server identity depend on their settings only', () => {
    // A seeded generator: every other setting varies, as between nodes and incarnations.
    let seed = 12345;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const pick = <T>(items: readonly T[]): T => items[next(items.length)] as T;
    const fixed = { LEASEHOLD_NFS_EXPORT_ID: '42', LEASEHOLD_NFS_FILESYSTEM_ID: '7.9' };
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const lease = 1 + next(60);
      const config: NfsServerConfig = readNfsServerConfig({
        ...fixed,
        LEASEHOLD_NFS_EXPORT_PATH: pick(['/export', '/data', '/var/lib/kubelet/pods/x/volumes/v']),
        LEASEHOLD_NFS_PORT: String(1 + next(65535)),
        LEASEHOLD_NFS_BIND_ADDR: pick(['0.0.0.0', '127.0.0.1', '::', '10.1.2.3']),
        LEASEHOLD_NFS_VERSIONS: pick(['4.1,4.2', '4.2', '3,4.1', '4.0,4.1,4.2']),
        LEASEHOLD_NFS_LEASE_LIFETIME: `${lease}s`,
        LEASEHOLD_NFS_GRACE_PERIOD: `${lease + next(100)}s`,
        LEASEHOLD_NFS_RUN_DIR: pick(['/run/a', '/tmp/b']),
        LEASEHOLD_NFS_LOG_LEVEL: pick(['EVENT', 'DEBUG', 'WARN']),
      });
      const text = renderGaneshaConfig(config, OWNER);
      assert.equal(text, renderGaneshaConfig(config, OWNER), 'the same settings render the same text');
      const exp = block(text, 'EXPORT');
      seen.add(
        [
          settingOf(exp, 'Export_Id'),
          settingOf(exp, 'Filesystem_Id'),
          settingOf(block(text, 'NFSv4'), 'Server_Owner'),
        ].join(' '),
      );
    }
    assert.deepEqual([...seen], [`42 7.9 "${OWNER}"`]);
  });
});

describe('RPC NULL probe wire format', () => {
  it('encodes a NULL call as one record with AUTH_NONE', () => {
    const call = encodeNullCall(0xdeadbeef, NFS_PROGRAM, 4);
    assert.equal(call.length, 44);
    assert.equal(call.readUInt32BE(0), 0x80000000 + 40, 'last fragment, 40 bytes');
    const words = Array.from({ length: 10 }, (_, i) => call.readUInt32BE(4 + i * 4));
    assert.deepEqual(words, [0xdeadbeef, 0, 2, 100003, 4, 0, 0, 0, 0, 0]);
  });

  const reply = (words: number[]) => {
    const buf = Buffer.alloc(4 + words.length * 4);
    buf.writeUInt32BE((0x80000000 | (words.length * 4)) >>> 0, 0);
    for (const [i, w] of words.entries()) buf.writeUInt32BE(w >>> 0, 4 + i * 4);
    return buf;
  };

  it('accepts only an accepted SUCCESS reply to its own xid', () => {
    assert.deepEqual(parseNullReply(reply([7, 1, 0, 0, 0, 0]), 7), { kind: 'accepted' });
    // A verifier with a body is skipped by its length (rounded up to 4 bytes).
    assert.deepEqual(parseNullReply(reply([7, 1, 0, 1, 5, 0, 0, 0]), 7), { kind: 'accepted' });
    assert.equal(parseNullReply(reply([8, 1, 0, 0, 0, 0]), 7)?.kind, 'rejected');
    assert.equal(parseNullReply(reply([7, 0, 0, 0, 0, 0]), 7)?.kind, 'rejected');
    assert.match(JSON.stringify(parseNullReply(reply([7, 1, 1, 0]), 7)), /MSG_DENIED/);
    assert.match(JSON.stringify(parseNullReply(reply([7, 1, 0, 0, 0, 2]), 7)), /accept_stat 2/);
  });

  it('waits for a whole record', () => {
    const whole = reply([7, 1, 0, 0, 0, 0]);
    assert.equal(parseNullReply(whole.subarray(0, 3), 7), undefined);
    assert.equal(parseNullReply(whole.subarray(0, whole.length - 1), 7), undefined);
  });
});
