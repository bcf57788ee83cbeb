/**
 * Renders the ganesha config from validated settings: a pure function, settings in,
 * config text out (no clock, no host name, no file system), so the same settings give
 * the same text on every node and in every incarnation.
 *
 * Guarantees (each one holds for any NfsServerConfig):
 *  - One VFS export of the volume, `Export_Id` and `Filesystem_id` taken from the settings
 *    only. The NFS file handle ganesha hands out is export id + the VFS handle, and the
 *    VFS handle is the file system's fsid (from the block device's UUID via blkid, else
 *    statfs f_fsid: src/FSAL/localfs.c posix_get_fsid) + the kernel's handle: all
 *    properties of the volume, not of the node. So a client's handles stay valid on the
 *    replacement. NB: `fsid_device` stays false (device numbers differ between nodes).
 *  - `Server_Owner` and `Server_Scope` are fixed to the volume's identity. ganesha's
 *    default is the host name (the pod name, new in every incarnation;
 *    src/Protocols/NFS/nfs4_op_exchange_id.c), and an NFSv4.1 client that sees another
 *    server scope must not reclaim its state (RFC 8881 §2.10.4): its opens and locks
 *    would be lost on every failover. The identity is per volume because a client
 *    treats two addresses with one owner as one server (session trunking).
 *  - Client recovery state (`RecoveryBackend = fs`) lives in `RecoveryRoot` on the volume
 *    (config.ts refuses a root outside the export; volume.ts checks it is on the same
 *    file system). The replacement reads the clients the old server had recorded
 *    (`v4recov`, `v4old`; src/SAL/recovery/recovery_fs.c) and lets exactly those reclaim
 *    during grace. With a fresh recovery directory the replacement would know no client,
 *    end grace at once, and refuse every reclaim (NFS4ERR_NO_GRACE): the opens and locks
 *    applications held would be lost. A crash during grace keeps `v4old`, which the next
 *    start reads again. `Clustered = false` keeps the layout free of a node id. NB: a
 *    record is named after the client's address too unless native/recovery-tag.c is
 *    preloaded (ganesha-process.ts; why: its header).
 *  - NFSv4 over TCP only, no rpcbind needed: NFSv4 registration with rpcbind is optional
 *    (ganesha logs "Cannot register NFS V4 on TCP" and goes on), NLM, RQUOTA and UDP are
 *    off. NFSv3 (optional) needs an rpcbind in the pod: ganesha registers NFS and MOUNT
 *    and exits when that fails (src/MainNFSD/nfs_rpc_dispatcher_thread.c
 *    Register_program); v3 clients mount with `nolock` (NLM off).
 *
 * Grace and lease (defaults in config.ts: Lease_Lifetime 10 s, Grace_Period 15 s; ganesha's
 * stock values are 60 s and 90 s):
 *  - During grace ganesha refuses new OPENs, LOCKs, REMOVE, RENAME and SETATTR with
 *    NFS4ERR_GRACE, but not WRITE or READ on state a client has reclaimed
 *    (src/Protocols/NFS/nfs4_op_*.c call nfs_get_grace_status; nfs4_op_write does not).
 *  - Grace ends early, before Grace_Period, once every client in the recovery state has
 *    sent RECLAIM_COMPLETE, which only NFSv4.1+ clients send, and only when NLM is off
 *    (src/SAL/nfs4_recovery.c nfs_try_lift_grace). The reaper checks that every
 *    min(10 s, Lease_Lifetime / 2) (src/MainNFSD/nfs_reaper_thread.c): 5 s with our lease.
 *    This is why NFSv4.0 is off by default: one v4.0 client in the recovery state makes
 *    every grace run its full length.
 *  - Grace_Period is therefore the cost when a recorded client does not come back (it
 *    died with the node): new opens wait that long. It must still be at least
 *    Lease_Lifetime (RFC 8881 §8.4.2.1; ganesha logs a warning otherwise): a live client
 *    notices the new server at its next renewal, within one lease, and must be able to
 *    reclaim then. Linux renews at 2/3 of the lease, so 15 s leaves a third of the lease
 *    plus 5 s for the reconnect after a 10 s lease. Measured (bench/kernel-client, grace
 *    10 s, lease 5 s, 3 crashes): a Linux 6.1 client, which leaves a dead connection only
 *    after 18 s whatever the lease, came back 18.3 s after the crash and found grace over
 *    in 2 of 3: its reclaim refused, its locked fd failing with EIO. With 15 s it
 *    reclaimed in every crash (the replacement serves at about 7.6 s).
 *  - Lease_Lifetime is how long a client that stops renewing keeps its state. Short means
 *    faster grace checks and faster expiry of dead clients' locks; too short and a client
 *    that cannot renew for a network hiccup loses its locks. 10 s is at the low end of
 *    what is used in practice, chosen for failover; the failover e2e (issue 9) measures it.
 *  - Measured here (test/integration/nfs-ganesha-server.test.ts): with recorded clients
 *    that never return, new opens got NFS4ERR_GRACE for 15.0 s after the replacement
 *    served; ganesha's reaper logged its grace check every 5 s.
 *
 * With metrics on (LEASEHOLD_NFS_METRICS_PORT) `Enable_FULLV4_Stats` is set too: the
 * per-operation NFSv4 counters (atomic adds per operation, src/support/server_stats.c
 * record_v4_full_stats) behind leasehold_nfs_operations_total.
 *
 * Does not guarantee: that ganesha accepts the config (config.ts keeps values within its
 * parser's ranges; the integration test starts a real ganesha with it).
 */
import type { NfsServerConfig, NfsVersion } from './config.ts';

/** The rendered config, given the volume's server identity (volume.ts). */
export function renderGaneshaConfig(config: NfsServerConfig, serverOwner: string): string {
  const v3 = config.versions.includes('3');
  const minors = minorVersions(config.versions);
  const protocols = [...(v3 ? ['3'] : []), ...(minors.length > 0 ? ['4'] : [])].join(', ');
  const q = (s: string) => `"${s}"`;
  const lines = [
    '# Rendered by leasehold server/nfs-ganesha (ganesha-conf.ts) from LEASEHOLD_NFS_* env vars.',
    'NFS_CORE_PARAM {',
    `  NFS_Port = ${config.port};`,
    ...(v3 ? [`  MNT_Port = ${config.mountPort};`, '  mount_path_pseudo = true;'] : []),
    `  Bind_Addr = ${config.bindAddr};`,
    `  Protocols = ${protocols};`,
    '  Enable_UDP = false;',
    '  Enable_NLM = false;',
    '  Enable_RQUOTA = false;',
    '  Clustered = false;',
    '  fsid_device = false;',
    // Per-operation NFSv4 counters for /metrics (nfs-metrics.ts; GetFULLV4Stats answers
    // "v4_full stats disabled" without it). Off without metrics: ganesha's default.
    ...(config.metricsPort !== undefined ? ['  Enable_FULLV4_Stats = true;'] : []),
    '}',
    'NFSv4 {',
    '  Graceless = false;',
    `  Grace_Period = ${config.gracePeriodS};`,
    `  Lease_Lifetime = ${config.leaseLifetimeS};`,
    ...(minors.length > 0 ? [`  Minor_Versions = ${minors.join(', ')};`] : []),
    '  RecoveryBackend = fs;',
    `  RecoveryRoot = ${q(config.recoveryRoot)};`,
    `  Server_Owner = ${q(serverOwner)};`,
    `  Server_Scope = ${q(serverOwner)};`,
    '  Delegations = false;',
    // Numeric ids: in a container the server's passwd knows no user names, and a
    // name@domain the client cannot map shows up as nobody.
    '  Only_Numeric_Owners = true;',
    '}',
    'NFS_KRB5 {',
    '  Active_krb5 = false;',
    `  CCacheDir = ${q(config.runDir)};`,
    '}',
    'EXPORT {',
    `  Export_Id = ${config.exportId};`,
    `  Path = ${q(config.exportPath)};`,
    `  Pseudo = ${q(config.pseudoPath)};`,
    `  Filesystem_Id = ${config.filesystemId};`,
    `  Protocols = ${protocols};`,
    '  Transports = TCP;',
    '  SecType = sys;',
    '  Access_Type = None;',
    '  CLIENT {',
    // NB: unquoted: ganesha's lexer types client entries (address, CIDR, wildcard,
    // @netgroup) and rejects a double-quoted string there.
    `    Clients = ${config.clients.join(', ')};`,
    // Repeated here: a CLIENT block otherwise defaults to every protocol, and ganesha
    // logs a "fixing up" warning on each start.
    `    Protocols = ${protocols};`,
    '    Transports = TCP;',
    '    Access_Type = RW;',
    `    Squash = ${config.squash};`,
    ...(config.anonymousUid === undefined ? [] : [`    Anonymous_Uid = ${config.anonymousUid};`]),
    ...(config.anonymousGid === undefined ? [] : [`    Anonymous_Gid = ${config.anonymousGid};`]),
    '  }',
    '  FSAL {',
    '    Name = VFS;',
    '  }',
    '}',
    'LOG {',
    `  Default_Log_Level = ${config.logLevel};`,
    '  FORMAT {',
    '    date_format = ISO-8601;',
    '    time_format = ISO-8601;',
    '    EPOCH = false;',
    '    HOSTNAME = false;',
    '    FILE_NAME = false;',
    '    LINE_NUM = false;',
    '  }',
    '}',
  ];
  return `${lines.join('\n')}\n`;
}

/** NFSv4 minor versions enabled, as ganesha's Minor_Versions list (0, 1, 2). */
export function minorVersions(versions: readonly NfsVersion[]): string[] {
  return versions.filter((v) => v.startsWith('4.')).map((v) => v.slice(2));
}
