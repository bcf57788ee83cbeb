/**
 * The shipped NFS server (server/nfs-ganesha/) as the default server of a ShareManager
 * without `spec.server` (pure): its container, the Service port, the agent's server
 * check preset and the mount information published in status.
 *
 * Guarantees: a ShareManager with only `spec.volume` gets a server that exports its
 * `mountPath` on TCP 2049 (named `nfs`) and serves its metrics on 9587 (`nfs-metrics`,
 * NFS_METRICS_PORT), with the export path checked by the server's own
 * settings reader (server/nfs-ganesha/config.ts), so a path the server would refuse is a
 * spec error (status Error) instead of a pod that exits 2 again and again. A user's own
 * `spec.server` is used exactly as written: nothing here applies to it.
 *
 * The server container's securityContext (NFS_SERVER_SECURITY_CONTEXT): root, every
 * capability dropped but the ones NFS-Ganesha's VFS FSAL uses:
 *  - DAC_READ_SEARCH: file handles are `name_to_handle_at`/`open_by_handle_at`, and
 *    open_by_handle_at(2) requires it. NB: it is not in the Pod Security "baseline"
 *    list, so the namespace of a default-NFS share needs the `privileged` level (the
 *    container is still not privileged: no host namespaces, no other capability).
 *  - CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETUID, SETGID: ganesha acts for each client
 *    (setfsuid/setfsgid to the client's ids, chown/chmod/utimes for it; with
 *    no_root_squash a root client must be able to do what local root can).
 *  - not NET_BIND_SERVICE (2049 is not a privileged port), not KILL (the entrypoint
 *    signals only its own child, same uid), not SYS_ADMIN.
 *  - with NFSv3 (spec.nfs.versions has 3, nfsServerSecurityContext) also KILL: the
 *    entrypoint starts the rpcbind ganesha needs (server/nfs-ganesha/rpcbind.ts), and
 *    Debian's rpcbind switches to user `_rpc` once bound (built so, no option; it uses
 *    SETUID/SETGID, already given), after which root without KILL gets EPERM signalling
 *    it (measured), so the entrypoint could not stop it. Still not NET_BIND_SERVICE:
 *    without it rpcbind silently leaves port 111 unbound and serves its unix socket
 *    only, which is all ganesha uses (measured: ganesha registers and serves with exactly
 *    these sets, test/integration/nfs-ganesha-rpcbind.test.ts); the Service publishes no
 *    port 111 and the v3 mount options name both ports, so no client asks a portmapper.
 * allowPrivilegeEscalation false, RuntimeDefault seccomp (the runtime default profiles
 * of Docker and containerd allow open_by_handle_at when the container holds
 * DAC_READ_SEARCH), read-only root filesystem with an emptyDir on /run holding the
 * entrypoint's run directory (rendered ganesha.conf, pid file, ccache dir) and, with
 * NFSv3, rpcbind's socket and lock, and (subPath `tmp`) on /tmp for ganesha's OFD-lock
 * test (NFS_TMP_MOUNT); recovery state is on the
 * volume (LEASEHOLD_NFS_RECOVERY_DIR). Verified with exactly these capability sets and
 * no_new_privs as the simulated kubelet applies them the way containerd + runc do
 * (test/integration/sim-nfs-service.test.ts: ganesha reports them and serves), and on
 * real containerd + runc nodes (test/integration/real-node-images.ts: exactly these
 * capabilities; test/e2e/real-node-failover.test.ts: the manager's pod serves and fails
 * over, its OFD-lock test ran).
 *
 * Mount options (NFS_MOUNT_OPTIONS), for Linux clients, see mountOptions below.
 */
import type { V1Container, V1EnvVar, V1SecurityContext } from '@kubernetes/client-node';
import { formatDuration } from '../../lib/env-config.ts';
import { ConfigError } from '../../lib/errors.ts';
import {
  DEFAULT_METRICS_PORT,
  type NfsVersion,
  readNfsServerConfig,
  type SquashMode,
} from '../../server/nfs-ganesha/config.ts';
import type { LeaseTimings } from '../config.ts';

export const NFS_PORT = 2049;
export const NFS_PORT_NAME = 'nfs';
/** The NFSv3 MOUNT port, served (and published on the Service) only when spec.nfs.versions has 3. */
export const NFS_MOUNT_PORT = 20048;
export const NFS_MOUNT_PORT_NAME = 'nfs-mount';
/**
 * The server's Prometheus /metrics (server/nfs-ganesha/nfs-metrics-server.ts), on in
 * every default-NFS share: 9587, the port of ganesha's own exporter in later versions;
 * not the agent's (8081) nor the manager's (8090). A container port only: the chart's
 * PodMonitor scrapes it by name; the Service (clients' ClusterIP) does not publish it.
 */
export const NFS_METRICS_PORT = DEFAULT_METRICS_PORT;
export const NFS_METRICS_PORT_NAME = 'nfs-metrics';

/**
 * spec.nfs: the shipped server's NFS settings a ShareManager may change (default server
 * only). Each maps to one of the server's env vars (server/nfs-ganesha/README.md) and is
 * checked by the server's own settings reader, so what the manager accepts the server
 * accepts. Unset fields keep the server's defaults (NFSv4.1/4.2, grace 15 s, lease 10 s,
 * every client, no_root_squash).
 */
export interface NfsSettings {
  versions?: NfsVersion[];
  gracePeriod?: string;
  leaseLifetime?: string;
  clients?: string[];
  squash?: SquashMode;
  /** Who a squashed client becomes. */
  anonymousUid?: number;
  anonymousGid?: number;
  /** The export root's owner, group and mode (octal text, e.g. "2775"), applied at each server start. */
  exportUid?: number;
  exportGid?: number;
  exportMode?: string;
}

/** spec.nfs field -> the server's env var (one place, used both ways). */
const NFS_SETTING_ENV = {
  versions: 'LEASEHOLD_NFS_VERSIONS',
  gracePeriod: 'LEASEHOLD_NFS_GRACE_PERIOD',
  leaseLifetime: 'LEASEHOLD_NFS_LEASE_LIFETIME',
  clients: 'LEASEHOLD_NFS_CLIENTS',
  squash: 'LEASEHOLD_NFS_SQUASH',
  anonymousUid: 'LEASEHOLD_NFS_ANONYMOUS_UID',
  anonymousGid: 'LEASEHOLD_NFS_ANONYMOUS_GID',
  exportUid: 'LEASEHOLD_NFS_EXPORT_UID',
  exportGid: 'LEASEHOLD_NFS_EXPORT_GID',
  exportMode: 'LEASEHOLD_NFS_EXPORT_MODE',
} as const satisfies Record<keyof NfsSettings, string>;
/** The entrypoint's run directory (LEASEHOLD_NFS_RUN_DIR default), in the emptyDir on /run. */
export const NFS_RUN_DIR = '/run/leasehold-nfs';
/**
 * Where the run emptyDir is mounted: all of /run (the root filesystem is read-only),
 * because NFSv3's rpcbind needs /run/rpcbind.sock and /run/rpcbind.lock there.
 */
export const NFS_RUN_MOUNT = '/run';
export const NFS_RUN_VOLUME = 'nfs-run';
/**
 * /tmp, from the same emptyDir (subPath `tmp`): at start ganesha's VFS FSAL tests OFD
 * locks on a file it makes at the fixed path /tmp/ganesha.nfsd.locktestXXXXXX, and when
 * it cannot (the read-only root filesystem) it logs CRIT "Could not create file … to
 * test OFD locks" and serves with lock support off ("FSAL_VFS disabling lock
 * support"): every client's byte-range LOCK refused. Seen on a real containerd + runc
 * node (test/e2e/real-node-failover.test.ts); the simulator shares the host's /tmp and
 * never showed it.
 */
export const NFS_TMP_MOUNT = '/tmp';
export const NFS_TMP_SUBPATH = 'tmp';

/**
 * Recommended Linux client mount options (nfs(5)); every choice is for a failover:
 *  - nfsvers=4.1, not 4.2, though the server speaks both: sessions (a request retried
 *    after a reconnect is answered from the session's reply cache, not executed twice)
 *    and reclaim with RECLAIM_COMPLETE are 4.1's. On 4.2, Linux clients from 6.4 on read
 *    with READ_PLUS (CONFIG_NFS_V4_2_READ_PLUS, default y), and after a failover to
 *    ganesha 4.3 every READ_PLUS read of the moved client failed with EIO for good
 *    (measured with the kernel client, dev/kernel-client: Linux 6.12, three runs; the
 *    same kernel built without READ_PLUS, or mounting 4.1, resumed). Users who want 4.2's
 *    extras (sparse files, server-side copy) may mount 4.2 on their own.
 *  - proto=tcp: the only transport the server offers.
 *  - hard: a request is retried until the server answers, so a write in flight during a
 *    failover stalls and then completes. `soft` would return EIO to the application
 *    after retrans timeouts, and nfs(5) warns it can silently corrupt data.
 *  - timeo=20,retrans=2: the RPC layer's timers only (its "not responding" after 6 s).
 *    NB: they do not bound how long a v4 client stays on a dead connection: it never
 *    retransmits on an RPC timeout and drops the connection only at a TCP_USER_TIMEOUT
 *    set from the server's NFSv4 lease (nfs4_set_lease_period; read from Linux 6.1 and
 *    6.12 source, and measured with the kernel client, dev/kernel-client: reconnect at
 *    +18.3 s on 6.1, +10.3 s on 6.12 with the 10 s lease). Kept as they do no harm and
 *    bound an NFSv3 client's retransmissions.
 *  - noresvport: reconnect from a new source port (v4.1+ clients do anyway; v3 and v4.0
 *    reuse theirs otherwise). The Service's ClusterIP is DNAT'd by connection tracking;
 *    reusing the old source port can hit the stale entry that still points at the lost
 *    pod. AWS recommends it for EFS for the same reason (a new TCP
 *    source port on reconnection). ganesha accepts non-privileged ports by default.
 */
export const NFS_MOUNT_OPTIONS = 'nfsvers=4.1,proto=tcp,hard,timeo=20,retrans=2,noresvport';

/**
 * The mount options for the versions spec.nfs enables: the same failover choices, with
 * 4.1 when served (NFS_MOUNT_OPTIONS says why not 4.2), else the highest version served. NFSv4.0 has no sessions (a retried non-idempotent request
 * can run twice) and always waits out the whole grace period after a move; NFSv3 needs
 * `nolock` (the server runs no NLM) and the fixed ports, so no rpcbind is asked.
 */
export function mountOptionsFor(nfs: NfsSettings = {}): string {
  const versions = nfs.versions ?? ['4.1', '4.2'];
  const failover = 'hard,timeo=20,retrans=2,noresvport';
  if (versions.includes('4.1')) return NFS_MOUNT_OPTIONS;
  if (versions.includes('4.2')) return `nfsvers=4.2,proto=tcp,${failover}`;
  if (versions.includes('4.0')) return `nfsvers=4.0,proto=tcp,${failover}`;
  return `nfsvers=3,proto=tcp,mountproto=tcp,port=${NFS_PORT},mountport=${NFS_MOUNT_PORT},nolock,${failover}`;
}

export const NFS_SERVER_SECURITY_CONTEXT: V1SecurityContext = {
  runAsUser: 0,
  runAsGroup: 0,
  runAsNonRoot: false,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: {
    drop: ['ALL'],
    add: ['CHOWN', 'DAC_OVERRIDE', 'DAC_READ_SEARCH', 'FOWNER', 'FSETID', 'SETGID', 'SETUID'],
  },
  seccompProfile: { type: 'RuntimeDefault' },
};

/** The server container's securityContext: the one above, plus KILL with NFSv3 (header). */
export function nfsServerSecurityContext(nfs: NfsSettings = {}): V1SecurityContext {
  if (!nfs.versions?.includes('3')) return NFS_SERVER_SECURITY_CONTEXT;
  const caps = NFS_SERVER_SECURITY_CONTEXT.capabilities;
  return {
    ...NFS_SERVER_SECURITY_CONTEXT,
    capabilities: { drop: caps?.drop, add: [...(caps?.add ?? []), 'KILL'].sort() },
  };
}

/**
 * The env of the default server: the export and its client path are the volume's mount
 * path; spec.nfs settings as the server's env vars.
 */
export function nfsServerEnv(mountPath: string, nfs: NfsSettings = {}): V1EnvVar[] {
  const env: V1EnvVar[] = [
    { name: 'LEASEHOLD_NFS_EXPORT_PATH', value: mountPath },
    { name: 'LEASEHOLD_NFS_PSEUDO_PATH', value: mountPath },
    { name: 'LEASEHOLD_NFS_PORT', value: String(NFS_PORT) },
    { name: 'LEASEHOLD_NFS_RUN_DIR', value: NFS_RUN_DIR },
    { name: 'LEASEHOLD_NFS_METRICS_PORT', value: String(NFS_METRICS_PORT) },
  ];
  if (nfs.versions?.includes('3'))
    env.push({ name: 'LEASEHOLD_NFS_MOUNT_PORT', value: String(NFS_MOUNT_PORT) });
  for (const field of Object.keys(NFS_SETTING_ENV) as (keyof NfsSettings)[]) {
    const value = nfs[field];
    if (value === undefined) continue;
    env.push({ name: NFS_SETTING_ENV[field], value: Array.isArray(value) ? value.join(',') : String(value) });
  }
  return env;
}

/**
 * The server's own rules on the env above, as spec problems naming the spec field
 * (spec.volume.mountPath or spec.nfs.<field>) instead of the env var.
 */
export function nfsSpecProblems(mountPath: string, nfs: NfsSettings = {}): string[] {
  const env = Object.fromEntries(nfsServerEnv(mountPath, nfs).map((e) => [e.name, e.value ?? '']));
  try {
    readNfsServerConfig(env);
    return [];
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.problems.map((p) => {
      const fields = (Object.keys(NFS_SETTING_ENV) as (keyof NfsSettings)[]).filter((f) =>
        p.includes(NFS_SETTING_ENV[f]),
      );
      const named =
        fields.length > 0
          ? fields.map((f) => `spec.nfs.${f}=${JSON.stringify(nfs[f])}`).join(', ')
          : `spec.volume.mountPath=${JSON.stringify(mountPath)}`;
      return `${named}: the shipped NFS server (no spec.server) refuses it: ${p}`;
    });
  }
}

/** The default server container (without volume mounts and probes: pod-spec.ts adds them). */
export function nfsServerContainer(image: string, mountPath: string, nfs: NfsSettings = {}): V1Container {
  return {
    name: 'server',
    image,
    ports: [
      ...nfsPorts(nfs),
      { name: NFS_METRICS_PORT_NAME, containerPort: NFS_METRICS_PORT, protocol: 'TCP' },
    ],
    env: nfsServerEnv(mountPath, nfs),
    securityContext: nfsServerSecurityContext(nfs),
    // NB: no readinessProbe. One tried here (TCP on `nfs`, every 1 s) kept the pod out of
    // the Service for 1.4-2.0 s after ganesha started (its first probe comes before
    // ganesha listens, the next one a whole period later: bench/failover --modes nfs),
    // while without it a client that connects in the 0.1-0.5 s before ganesha listens
    // is refused and retries, as NFS clients do. The lease, not readiness, decides who
    // serves, so this costs no safety. Its Service now publishes the pod before it is
    // Ready at all (serviceSpec in execute-reconcile.ts), so no readiness is waited for.
  };
}

/** The server's NFS ports: NFS, plus MOUNT when NFSv3 is on (also the Service's ports; not the metrics port). */
export function nfsPorts(nfs: NfsSettings = {}): { name: string; containerPort: number; protocol: string }[] {
  const ports = [{ name: NFS_PORT_NAME, containerPort: NFS_PORT, protocol: 'TCP' }];
  if (nfs.versions?.includes('3'))
    ports.push({ name: NFS_MOUNT_PORT_NAME, containerPort: NFS_MOUNT_PORT, protocol: 'TCP' });
  return ports;
}

/**
 * The agent's server check for the default server when the spec gives none: a TCP
 * connect to ganesha. NB: the agent counts failures only after the first success (the
 * server starts after the agent acquired), and requires the check timeout < T - R, so
 * the timeout is 1 s or half of T - R, whichever is shorter.
 */
export function nfsServerCheck(timings: LeaseTimings): { target: string; timeout: string } {
  const room = timings.renewDeadlineMs - timings.renewIntervalMs;
  return {
    target: `tcp://127.0.0.1:${NFS_PORT}`,
    timeout: formatDuration(Math.min(1000, Math.floor(room / 2))),
  };
}

/** The mount information published in status.export. */
export interface ExportStatus {
  clusterIP: string;
  port: number;
  path: string;
  /** `ip:/path` (`[ip]:/path` for IPv6): the source of a mount or of a PV's nfs block. */
  source: string;
  mountOptions: string;
}

/** status.export of a default-NFS share whose Service has `clusterIP`. */
export function exportStatus(clusterIP: string, mountPath: string, nfs: NfsSettings = {}): ExportStatus {
  const host = clusterIP.includes(':') ? `[${clusterIP}]` : clusterIP;
  return {
    clusterIP,
    port: NFS_PORT,
    path: mountPath,
    source: `${host}:${mountPath}`,
    mountOptions: mountOptionsFor(nfs),
  };
}
