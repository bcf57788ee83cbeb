/**
 * The manager's configuration, read from env vars only and validated before any work.
 * Every problem is reported at once, naming the variable, the value and the rule;
 * main exits with code 2.
 *
 * | variable                               | default                   | meaning / hazard |
 * |----------------------------------------|---------------------------|------------------|
 * | LEASEHOLD_POD_NAME                     | required                  | this manager's identity (downward API); written to leasehold.dev/failover-by |
 * | LEASEHOLD_NODE_NAME                    | required                  | node this manager runs on (logs, events) |
 * | LEASEHOLD_WATCH_NAMESPACE              | all namespaces            | limit to one namespace |
 * | LEASEHOLD_FAST_FAILOVER                | true                      | false: reconcile only, never fail over |
 * | LEASEHOLD_OBSERVE_ONLY                 | false                     | dry run: log + event what a failover would do, write nothing for it |
 * | LEASEHOLD_LEASE_DURATION (D)           | 6s                        | default for ShareManagers without spec.lease; also the floor of a Lease whose ShareManager is unknown (lease-duration.ts) |
 * | LEASEHOLD_RENEW_INTERVAL (R)           | 2s                        | default agent renew interval |
 * | LEASEHOLD_RENEW_DEADLINE (T)           | 4s                        | default agent renew deadline |
 * | LEASEHOLD_RETRY_PERIOD                 | 500ms                     | default agent retry period; also the manager's pause before retrying a failed step |
 * | LEASEHOLD_AGENT_IMAGE                  | leasehold.dev/leasehold:dev | image of the agent sidecar (args[0] = agent) |
 * | LEASEHOLD_NFS_SERVER_IMAGE             | leasehold.dev/nfs-ganesha:dev | image of the shipped NFS server (server/nfs-ganesha/), the server of every ShareManager without spec.server; changing it changes only pods created afterwards |
 * | LEASEHOLD_AGENT_PORT                   | 8081                      | agent HTTP port inside share-manager pods (startup probe /readyz) |
 * | LEASEHOLD_AGENT_SERVICE_ACCOUNT        | namespace default         | ServiceAccount of share-manager pods whose spec names none (the chart sets leasehold-agent) |
 * | LEASEHOLD_ANTI_AFFINITY                | auto                      | auto (required when the lost node is unhealthy, else preferred), required, preferred, none |
 * | LEASEHOLD_VOLUME_HANDOFF               | volumes-in-use            | how a failover frees the volume on the lost node (failover/volume-handoff.ts): volumes-in-use (remove that one volume from the node's status.volumesInUse: the attach-detach controller detaches it at once, then attaches it to the new node), volume-attachment (delete its VolumeAttachment: the controller attaches elsewhere only after its next state sync, 1 min by default), none. NB: volumes-in-use needs `patch` on nodes/status |
 * | LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT      | 30s                       | volumes-in-use handoff left to a live kubelet (its node's heartbeat came after the holder's renew deadline): if the node still lists the volume in status.volumesInUse this long after the force-delete while the replacement waits, the lost pod's processes did not stop (frozen, uninterruptible I/O); remove the entry as for a dead node (failover/volume-handoff.ts). 0 = never (the share waits as long as they hang); else 5s..1h |
 * | LEASEHOLD_NONFENCING_STORAGE           | require-node-down         | what a failover does when the share's storage cannot fence (failover/storage-fencing.ts: CSIDriver attachRequired false, or not known to fence: no CSIDriver, not a CSI PV, claim unbound): require-node-down (wait, serving nowhere, until the lost node has the out-of-service taint or its Node is deleted), lease-only (fail over on the lease alone; a frozen node's old server may write once on resume). NB: needs get on storage.k8s.io csidrivers |
 * | LEASEHOLD_MAX_CONCURRENT_FAILOVERS     | 10                        | failovers this manager runs at once; more wait |
 * | LEASEHOLD_STORM_THRESHOLD              | 0.5                       | pause failovers when more than this share of the leases held off the node with the most stale leases go stale in one window on healthy-looking nodes (storm-guard.ts; one node's loss never trips it) |
 * | LEASEHOLD_STORM_MIN_LEASES             | 3                         | ... and at least this many of them (one lease is never a storm) |
 * | LEASEHOLD_STORM_WINDOW                 | 30s                       | the window |
 * | LEASEHOLD_FAILOVER_TAKEOVER_TIMEOUT    | 30s                       | take over a failover whose owner made no visible progress this long |
 * | LEASEHOLD_POD_CREATE_TIMEOUT           | 30s                       | retry a claimed pod creation that produced no pod this long |
 * | LEASEHOLD_NODE_LEASE_GRACE             | 40s                       | a node heartbeat Lease unchanged this long (by our observation) counts as stale |
 * | LEASEHOLD_OUT_OF_SERVICE_TAINT         | false                     | taint the lost node of OUR failover node.kubernetes.io/out-of-service=nodeshutdown:NoExecute once it is not Ready with a stale heartbeat for D (our observation), so its volumes detach at once; removed when it is Ready again. NB: node-wide: every pod on it is force-deleted and every volume force-detached |
 * | LEASEHOLD_WATCH_QUIET_TIMEOUT          | 90s                       | restart a watch that delivered nothing this long (bookmarks come every ~60s) |
 * | LEASEHOLD_REQUEST_TIMEOUT              | 5s                        | deadline of each API request |
 * | LEASEHOLD_WITNESSES                    | none                      | the witness set given to share-manager pods created from now on: `node=http://host:port,...` (at least 3), each the manager HTTP endpoint of a witness; none = off: an agent that cannot renew for T fences (docs/design.md, "Serving through an API outage") |
 * | LEASEHOLD_WITNESS_NODES                | none                      | the witness set by node names (at least 3; instead of LEASEHOLD_WITNESSES): each node's manager at http://<its InternalIP>:<LEASEHOLD_HTTP_PORT> (the chart publishes that port on the node), read from the Node objects; while one of them is unknown, pods get no witnesses |
 * | LEASEHOLD_WITNESS_MAX_HOLD             | 2 × LEASE_DURATION (12s)  | as a witness: the longest promise (P + margin) given; also how long after its start it gives no clearance |
 * | LEASEHOLD_WITNESS_API_LOST_AFTER       | 1s                        | as a witness: promise only when the API has not answered this long (and a read of the Lease fails within it) |
 * | LEASEHOLD_PROVISIONING                 | false                     | true: provision claims of StorageClasses whose provisioner is leasehold.dev/nfs (manager/provisioning/); one manager (the holder of Lease leasehold-provisioner) acts |
 * | LEASEHOLD_PROVISIONER_NAMESPACE        | required with provisioning | where backing claims and ShareManagers go unless a class says backingNamespace, and where the leadership Lease lives (the chart: its release namespace) |
 * | LEASEHOLD_PROVISIONER_LEASE_DURATION   | 15s                       | the leadership Lease's duration: a leader gone this long (by our clock) is replaced |
 * | LEASEHOLD_HTTP_PORT                    | 8090                      | /healthz /readyz /metrics, POST /witness/promise and /witness/clearance (0 = any free port) |
 * | LEASEHOLD_HTTP_HOST                    | 0.0.0.0                   | address the endpoints listen on |
 * | LEASEHOLD_LOG_LEVEL                    | info                      | fatal, error, warn, info, debug, trace, silent |
 *
 * Cross-field rules (docs/design.md, "Timings and the rules that tie them"): D > T > R
 * and T - R >= retry period.
 * KUBECONFIG is read by lib/kube-client.ts (in-cluster service account when unset).
 */
import { type Env, EnvReader, formatDuration } from '../lib/env-config.ts';
import { LOG_LEVELS, type LogLevel } from '../lib/logger.ts';
import { parseWitnesses, type WitnessEndpoint } from '../lib/witness-protocol.ts';
import type { WitnessSettings } from './witness/witness-rules.ts';

/** What a failover on storage that does not fence waits for (failover/storage-fencing.ts). */
export const NONFENCING_POLICIES = ['require-node-down', 'lease-only'] as const;
export type NonFencingPolicy = (typeof NONFENCING_POLICIES)[number];

/** How the failover hands the volume over to the new node (failover/volume-handoff.ts). */
export const VOLUME_HANDOFF_MODES = ['volumes-in-use', 'volume-attachment', 'none'] as const;
export type VolumeHandoffMode = (typeof VOLUME_HANDOFF_MODES)[number];

export const ANTI_AFFINITY_MODES = ['auto', 'required', 'preferred', 'none'] as const;
export type AntiAffinityMode = (typeof ANTI_AFFINITY_MODES)[number];

export interface LeaseTimings {
  leaseDurationMs: number;
  renewIntervalMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

export interface ManagerConfig {
  identity: string;
  nodeName: string;
  namespace: string | undefined;
  fastFailover: boolean;
  observeOnly: boolean;
  defaults: LeaseTimings;
  agentImage: string;
  /** The shipped NFS server's image: the server of ShareManagers without spec.server. */
  nfsServerImage: string;
  agentPort: number;
  /** ServiceAccount for share-manager pods without spec.serviceAccountName; undefined = the namespace's default. */
  agentServiceAccount: string | undefined;
  antiAffinity: AntiAffinityMode;
  /** How a failover frees the volume on the lost node (failover/volume-handoff.ts). */
  volumeHandoff: VolumeHandoffMode;
  /** What a failover does on storage that cannot fence (failover/storage-fencing.ts). */
  nonFencingStorage: NonFencingPolicy;
  /** A volume left to a live kubelet that still lists it this long after the force-delete is released anyway; 0 = never. */
  kubeletUnmountTimeoutMs: number;
  maxConcurrentFailovers: number;
  storm: { threshold: number; minLeases: number; windowMs: number };
  takeoverTimeoutMs: number;
  podCreateTimeoutMs: number;
  nodeLeaseGraceMs: number;
  /** Add/remove the out-of-service taint on lost nodes (node-handling/decide-out-of-service.ts). */
  outOfServiceTaint: boolean;
  watchQuietTimeoutMs: number;
  requestTimeoutMs: number;
  /**
   * The witness set for the agents of pods created from now on; empty = off. With
   * `witnessNodes`, main.ts fills it from the Node objects as they change.
   */
  witnesses: WitnessEndpoint[];
  /** LEASEHOLD_WITNESS_NODES: node names whose managers are the witnesses; empty = the explicit list. */
  witnessNodes: string[];
  /** This manager as a witness. */
  witness: WitnessSettings;
  /** LEASEHOLD_PROVISIONING: undefined = off. */
  provisioning: { namespace: string; leaseDurationMs: number } | undefined;
  httpPort: number;
  httpHost: string;
  logLevel: LogLevel;
}

export function readManagerConfig(env: Env): ManagerConfig {
  const r = new EnvReader(env);
  const config: ManagerConfig = {
    identity: r.objectName('LEASEHOLD_POD_NAME'),
    nodeName: r.objectName('LEASEHOLD_NODE_NAME'),
    namespace: env.LEASEHOLD_WATCH_NAMESPACE?.trim() ? r.objectName('LEASEHOLD_WATCH_NAMESPACE') : undefined,
    fastFailover: r.boolean('LEASEHOLD_FAST_FAILOVER', true),
    observeOnly: r.boolean('LEASEHOLD_OBSERVE_ONLY', false),
    defaults: {
      leaseDurationMs: r.duration('LEASEHOLD_LEASE_DURATION', 6000, 1000, 600_000),
      renewIntervalMs: r.duration('LEASEHOLD_RENEW_INTERVAL', 2000, 100, 300_000),
      renewDeadlineMs: r.duration('LEASEHOLD_RENEW_DEADLINE', 4000, 200, 600_000),
      retryPeriodMs: r.duration('LEASEHOLD_RETRY_PERIOD', 500, 10, 60_000),
    },
    agentImage: r.string('LEASEHOLD_AGENT_IMAGE', { fallback: 'leasehold.dev/leasehold:dev' }),
    nfsServerImage: r.string('LEASEHOLD_NFS_SERVER_IMAGE', {
      fallback: 'leasehold.dev/nfs-ganesha:dev',
      pattern: /^[^\s]+$/,
      rule: 'must be an image reference such as registry.example/nfs-ganesha:1.0 (no spaces)',
    }),
    agentPort: r.integer('LEASEHOLD_AGENT_PORT', 8081, 1, 65535),
    agentServiceAccount: env.LEASEHOLD_AGENT_SERVICE_ACCOUNT?.trim()
      ? r.objectName('LEASEHOLD_AGENT_SERVICE_ACCOUNT')
      : undefined,
    antiAffinity: r.oneOf('LEASEHOLD_ANTI_AFFINITY', ANTI_AFFINITY_MODES, 'auto'),
    volumeHandoff: r.oneOf('LEASEHOLD_VOLUME_HANDOFF', VOLUME_HANDOFF_MODES, 'volumes-in-use'),
    nonFencingStorage: r.oneOf('LEASEHOLD_NONFENCING_STORAGE', NONFENCING_POLICIES, 'require-node-down'),
    kubeletUnmountTimeoutMs: r.duration('LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT', 30_000, 0, 3_600_000),
    maxConcurrentFailovers: r.integer('LEASEHOLD_MAX_CONCURRENT_FAILOVERS', 10, 1, 10_000),
    storm: {
      threshold: r.number('LEASEHOLD_STORM_THRESHOLD', 0.5, 0, 1),
      minLeases: r.integer('LEASEHOLD_STORM_MIN_LEASES', 3, 1, 1_000_000),
      windowMs: r.duration('LEASEHOLD_STORM_WINDOW', 30_000, 1000, 3_600_000),
    },
    takeoverTimeoutMs: r.duration('LEASEHOLD_FAILOVER_TAKEOVER_TIMEOUT', 30_000, 1000, 3_600_000),
    podCreateTimeoutMs: r.duration('LEASEHOLD_POD_CREATE_TIMEOUT', 30_000, 1000, 3_600_000),
    nodeLeaseGraceMs: r.duration('LEASEHOLD_NODE_LEASE_GRACE', 40_000, 1000, 3_600_000),
    outOfServiceTaint: r.boolean('LEASEHOLD_OUT_OF_SERVICE_TAINT', false),
    watchQuietTimeoutMs: r.duration('LEASEHOLD_WATCH_QUIET_TIMEOUT', 90_000, 5000, 3_600_000),
    requestTimeoutMs: r.duration('LEASEHOLD_REQUEST_TIMEOUT', 5000, 100, 120_000),
    witnesses: [],
    witnessNodes: (r.optionalString('LEASEHOLD_WITNESS_NODES') ?? '')
      .split(',')
      .map((n) => n.trim())
      .filter((n) => n !== ''),
    witness: {
      // Default 2 D: the hold a share of the default timings asks (P + D - T = D with P = T)
      // with room for twice as long a lease. Also the restart wait before any clearance, so
      // not more: 30 s made a crash within 30 s of a manager's restart wait that long
      // (measured, docs/design.md). Read after `defaults` (below).
      maxHoldMs: 0,
      apiLostAfterMs: r.duration('LEASEHOLD_WITNESS_API_LOST_AFTER', 1000, 100, 60_000),
    },
    provisioning: undefined,
    httpPort: r.port('LEASEHOLD_HTTP_PORT', 8090),
    httpHost: r.string('LEASEHOLD_HTTP_HOST', { fallback: '0.0.0.0' }),
    logLevel: r.oneOf('LEASEHOLD_LOG_LEVEL', LOG_LEVELS, 'info'),
  };
  r.require(
    config.kubeletUnmountTimeoutMs === 0 || config.kubeletUnmountTimeoutMs >= 5_000,
    `LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT=${env.LEASEHOLD_KUBELET_UNMOUNT_TIMEOUT}: must be 0 (never) or from 5s to 60m: a live kubelet needs seconds to stop a pod and report its unmount`,
  );
  const witnessList = r.optionalString('LEASEHOLD_WITNESSES');
  const witnesses = parseWitnesses(witnessList);
  if (typeof witnesses === 'string')
    r.require(false, `LEASEHOLD_WITNESSES=${JSON.stringify(witnessList)}: ${witnesses}`);
  else config.witnesses = witnesses;
  const nodeNames = config.witnessNodes;
  r.require(
    nodeNames.length === 0 || (nodeNames.length >= 3 && new Set(nodeNames).size === nodeNames.length),
    `LEASEHOLD_WITNESS_NODES=${JSON.stringify(nodeNames.join(','))}: at least 3 distinct node names (a majority must remain when one is lost), or none`,
  );
  r.require(
    nodeNames.length === 0 || config.witnesses.length === 0,
    'LEASEHOLD_WITNESS_NODES and LEASEHOLD_WITNESSES are both set: give the witnesses one way',
  );
  r.require(
    nodeNames.length === 0 || config.httpPort !== 0,
    'LEASEHOLD_WITNESS_NODES needs a fixed LEASEHOLD_HTTP_PORT (not 0): agents reach each witness at its node address and that port',
  );
  if (r.boolean('LEASEHOLD_PROVISIONING', false)) {
    const namespace = env.LEASEHOLD_PROVISIONER_NAMESPACE?.trim()
      ? r.objectName('LEASEHOLD_PROVISIONER_NAMESPACE')
      : undefined;
    r.require(
      namespace !== undefined,
      'LEASEHOLD_PROVISIONER_NAMESPACE: required with LEASEHOLD_PROVISIONING=true (where backing claims, ShareManagers and the leadership Lease go)',
    );
    r.require(
      namespace === undefined || config.namespace === undefined || namespace === config.namespace,
      `LEASEHOLD_PROVISIONER_NAMESPACE=${namespace}: must equal LEASEHOLD_WATCH_NAMESPACE=${config.namespace} (the manager would never reconcile shares made elsewhere)`,
    );
    config.provisioning = {
      namespace: namespace ?? '',
      leaseDurationMs: r.duration('LEASEHOLD_PROVISIONER_LEASE_DURATION', 15_000, 3000, 600_000),
    };
  }
  // NB: replaced, not ignored: a value set for the old variable would silently change meaning.
  r.require(
    env.LEASEHOLD_VOLUME_ATTACHMENT_CLEANUP === undefined,
    `LEASEHOLD_VOLUME_ATTACHMENT_CLEANUP=${env.LEASEHOLD_VOLUME_ATTACHMENT_CLEANUP}: replaced by LEASEHOLD_VOLUME_HANDOFF (volume-attachment = the old true, none = the old false)`,
  );
  config.witness.maxHoldMs = r.duration(
    'LEASEHOLD_WITNESS_MAX_HOLD',
    2 * config.defaults.leaseDurationMs,
    1000,
    600_000,
  );
  if (r.ok) {
    const problem = timingProblem(config.defaults);
    if (problem)
      r.require(false, `LEASEHOLD_LEASE_DURATION/RENEW_DEADLINE/RENEW_INTERVAL/RETRY_PERIOD: ${problem}`);
  }
  r.done();
  return config;
}

/**
 * The timing rule shared with the ShareManager spec: D > T > R and T - R >= retry.
 * Returns a message naming the values and the rule, or undefined when sound.
 */
export function timingProblem(t: LeaseTimings): string | undefined {
  const d = formatDuration(t.leaseDurationMs);
  const dl = formatDuration(t.renewDeadlineMs);
  const ri = formatDuration(t.renewIntervalMs);
  const rp = formatDuration(t.retryPeriodMs);
  if (!(t.leaseDurationMs > t.renewDeadlineMs && t.renewDeadlineMs > t.renewIntervalMs)) {
    return `lease duration ${d} > renew deadline ${dl} > renew interval ${ri} must hold`;
  }
  if (t.renewDeadlineMs - t.renewIntervalMs < t.retryPeriodMs) {
    return `renew deadline ${dl} - renew interval ${ri} must leave at least one retry period ${rp}`;
  }
  return undefined;
}
