/**
 * Builds the share-manager pod of one ShareManager (pure).
 *
 * Shape (docs/design.md, "Reconciling a ShareManager"):
 *  - `generateName: <sm>-`: every pod name is one incarnation, the lease holder identity.
 *  - the agent is a native sidecar (init container with restartPolicy Always). The
 *    server must not run before the agent holds the lease; how that is enforced:
 *    - spec.server (a user's image): the agent's startupProbe is its /readyz, so the
 *      kubelet starts the server container only once the agent holds the lease (the
 *      probe's 1 s period, the kubelet's minimum, is paid on every start);
 *    - the shipped NFS server: no startupProbe on the agent, so the kubelet starts the
 *      server container once the agent container runs (kuberuntime's
 *      computeInitContainerActions: a running restartable init container without a
 *      startup probe counts as initialized). Its entrypoint does the gate itself
 *      (LEASEHOLD_NFS_LEASE_GATE_PORT: it asks the agent's /readyz every 50 ms and
 *      starts ganesha only on `lease held`, server/nfs-ganesha/lease-gate.ts), so its
 *      Node start-up and rpcbind overlap the agent's start and acquisition. The server
 *      container's own startupProbe is the agent's /readyz: it keeps the liveness
 *      backstop below from killing a server that is still waiting for the lease.
 *  - restartPolicy Never: a fenced or crashed server ends the incarnation; the manager
 *    creates the next pod, which must pass the lease gate again.
 *  - shareProcessNamespace, so the agent can signal the server when it fences.
 *  - the agent runs as uid 0 with every capability dropped but KILL: an NFS server
 *    typically runs as root, and signalling another user's process needs CAP_KILL,
 *    which a non-root container never has in effect on Kubernetes (no ambient
 *    capabilities: an added capability is lost at execve). Read-only root filesystem,
 *    no privilege escalation, RuntimeDefault seccomp. NB: this needs the Pod Security
 *    "baseline" level in the share managers' namespace (KILL is allowed there).
 *  - the kubelet's backstop: the server container's liveness probe is the agent's
 *    /readyz (200 only while the lease is held and renewed within T), every 1 s; D - T
 *    in whole seconds of failures in a row (at least 1; 2 with the defaults) kill it,
 *    with a probe-level grace of 1 s. So with the defaults the kubelet stops the server
 *    about 2-3 s after the proof lapses — T + 2-3 s after the last successful renewal
 *    was sent, or 2-3 s after the agent died or hung — even when the agent cannot
 *    (hung, dead, unable to signal) and while the node is cut off from the API.
 *    NB: for the NFS server it is armed only once the server's startup probe passed, a
 *    probe period after ganesha may have started; the entrypoint's own watch (the same
 *    D - T rule, LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE, server/nfs-ganesha/lease-gate.ts)
 *    covers that gap and the rest of its life.
 *  - env of the agent from the ShareManager (lease timings with the manager's defaults
 *    filled in, fence, server check) + the downward API for pod and node name, and
 *    AGENT_RUNTIME_ENV: Node and glibc settings that keep the agent's memory down.
 *  - the server container is `spec.server` as written, or without it the shipped NFS
 *    server (nfs-server-preset.ts: image from the manager's settings, port 2049 `nfs`,
 *    the export at the mount path, its securityContext, an emptyDir on /run for its
 *    run directory and NFSv3's rpcbind, and on /tmp for ganesha's OFD-lock test) with
 *    the agent checking tcp://127.0.0.1:2049 unless spec.serverCheck says otherwise.
 *  - owner reference to the ShareManager (controller), labels for the Service selector.
 *  - node anti-affinity against a lost node, `required` or `preferred` as decided by the
 *    caller (see anti-affinity.ts).
 */

import type {
  V1Affinity,
  V1Container,
  V1EnvVar,
  V1Pod,
  V1Probe,
  V1ResourceRequirements,
  V1SecurityContext,
  V1Volume,
} from '@kubernetes/client-node';
import { formatDuration } from '../../lib/env-config.ts';
import { LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { formatWitnesses, type WitnessEndpoint } from '../../lib/witness-protocol.ts';
import type { LeaseTimings, ManagerConfig } from '../config.ts';
import { derivedConfigProblems } from './derived-config-check.ts';
import {
  NFS_RUN_MOUNT,
  NFS_RUN_VOLUME,
  NFS_TMP_MOUNT,
  NFS_TMP_SUBPATH,
  nfsServerContainer,
} from './nfs-server-preset.ts';
import {
  type FenceAction,
  type ResolvedSpec,
  resolveSpec,
  type ShareManager,
  type ShareManagerSpec,
  SM_GROUP,
  SM_KIND,
  SM_VERSION,
} from './share-manager-spec.ts';

export const LABEL_COMPONENT = 'app.kubernetes.io/component';
export const COMPONENT_SHARE_MANAGER = 'share-manager';
export const ANNOTATION_POD_REQUEST = `${SM_GROUP}/pod-request`;
export const ANNOTATION_REPLACES = `${SM_GROUP}/replaces`;
export const SERVER_CONTAINER = 'server';
export const AGENT_CONTAINER = 'agent';
export const VOLUME_NAME = 'share';

/**
 * The agent container's Node and glibc settings (docs/benchmarks.md "Agent memory", measured by
 * bench/agent side by side with and without them). Env, not `command`, so that they
 * reach the agent wherever its pod runs (the simulator passes env, ignores `command`):
 *  - `--jitless`: V8 only interprets. Its optimizing compilers' code and memory grew
 *    the agent to 75.6 MB in half an hour at R = 2 s; jitless 60.5 MB (56.4 at start).
 *    The agent runs a few short functions every R, so interpreting costs it no
 *    measurable CPU. NB: no WebAssembly either, so no `fetch`: the agent never uses it.
 *  - `--max-semi-space-size=1` (MB), `--v8-pool-size=1`, MALLOC_ARENA_MAX=1: a small
 *    young generation, one V8 worker thread, one malloc arena (~1.4 MB together).
 *  - `--max-old-space-size=48` (MB): V8 sizes its first mark-compact from the heap
 *    limit; with the machine's default the agent's promoted garbage grows its heap to
 *    ~30 MB before one runs, with 48 to ~12-15 MB. The live heap is ~6 MB; the
 *    client-node kubeconfig path (kube-connection.ts) needs ~36 MB (not 16: it fails).
 */
export const AGENT_RUNTIME_ENV: readonly V1EnvVar[] = [
  {
    name: 'NODE_OPTIONS',
    value: '--jitless --max-semi-space-size=1 --v8-pool-size=1 --max-old-space-size=48',
  },
  { name: 'MALLOC_ARENA_MAX', value: '1' },
];

export type NodeAvoidance = { node: string; mode: 'required' | 'preferred' } | undefined;
/** Several nodes to avoid (a failover that lost a replacement too), each with its own mode. */
export type NodeAvoidances = readonly NonNullable<NodeAvoidance>[];

export interface PodSpecInput {
  sm: ShareManager;
  timings: LeaseTimings;
  mountPath: string;
  /** The resolved fence action (spec.fence.action, default pod). */
  fenceAction: FenceAction;
  /** The resolved server check (spec.serverCheck, else the NFS preset, else none). */
  serverCheck?: ShareManagerSpec['serverCheck'];
  /** The image of the shipped NFS server, used when the ShareManager has no spec.server. */
  nfsServerImage: string;
  agentImage: string;
  agentPort: number;
  /** ServiceAccount when the ShareManager names none; undefined = the namespace's default. */
  agentServiceAccount?: string | undefined;
  avoid: NodeAvoidance | NodeAvoidances;
  /** Annotations that tie the pod to its creation (pod request id, replaced pod). */
  annotations?: Record<string, string>;
  /**
   * Whether the agent may take a silent holder's lease on its own (LEASEHOLD_TAKE_EXPIRED):
   * only where the manager's failover would not wait for the storage-fencing gate
   * (takeExpiredFor). Default false: a silent holder is left to the failover.
   */
  takeExpired?: boolean;
  /** The agent's witness set (LEASEHOLD_WITNESSES); none = off. */
  witnesses?: readonly WitnessEndpoint[];
}

/**
 * Whether pods of this manager let their agent take a lease by expiry: only under
 * LEASEHOLD_NONFENCING_STORAGE=lease-only, where the failover itself does not wait for
 * node-down evidence either. Under require-node-down an agent taking an expired lease
 * would go around the storage-fencing gate (a holder pod being deleted when its node
 * froze, its successor already created: issue 27 item 1), so only the failover's mark
 * (after the gate) or a release hands the lease on.
 */
export function takeExpiredFor(settings: Pick<ManagerConfig, 'nonFencingStorage'>): boolean {
  return settings.nonFencingStorage === 'lease-only';
}

/** The manager settings a share pod is built from. */
export type PodSettings = Pick<
  ManagerConfig,
  'defaults' | 'agentImage' | 'agentPort' | 'agentServiceAccount' | 'nfsServerImage' | 'nonFencingStorage'
> &
  Partial<Pick<ManagerConfig, 'witnesses'>>;

/** The pod is neither being deleted nor ended (Succeeded, Failed). */
export function isLive(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return !pod.metadata?.deletionTimestamp && phase !== 'Succeeded' && phase !== 'Failed';
}

/**
 * Whether `pod` is one of share `share`'s own pods, as buildSharePod makes them: its
 * share label names the share and a controller reference names the ShareManager (and its
 * uid, when `uid` is known). The failover deletes only such a pod: a Lease's holder is
 * just a name any writer of the Lease can set, and may name another share's pod.
 */
export function isPodOfShare(pod: V1Pod, share: string, uid?: string): boolean {
  if (pod.metadata?.labels?.[LABEL_SHARE_MANAGER] !== share) return false;
  return (pod.metadata?.ownerReferences ?? []).some(
    (o) =>
      o.controller === true &&
      o.kind === SM_KIND &&
      o.apiVersion?.split('/')[0] === SM_GROUP &&
      o.name === share &&
      (uid === undefined || uid === '' || o.uid === uid),
  );
}

/**
 * The pod for `sm` from the manager's settings, or the spec problem when its timings are
 * invalid (such a ShareManager gets status Error, never a pod).
 */
export function sharePodFor(
  sm: ShareManager,
  settings: PodSettings,
  avoid: NodeAvoidance | NodeAvoidances,
  annotations: Record<string, string>,
): { ok: true; pod: V1Pod } | { ok: false; message: string } {
  const resolved = resolveSpec(sm.spec, settings.defaults);
  if (!resolved.ok) return resolved;
  const pod = buildSharePod({
    sm,
    timings: resolved.timings,
    mountPath: resolved.mountPath,
    fenceAction: resolved.fenceAction,
    serverCheck: resolved.serverCheck,
    nfsServerImage: settings.nfsServerImage,
    agentImage: settings.agentImage,
    agentPort: settings.agentPort,
    agentServiceAccount: settings.agentServiceAccount,
    avoid,
    annotations,
    takeExpired: takeExpiredFor(settings),
    witnesses: settings.witnesses ?? [],
  });
  const refused = derivedConfigProblems(pod, sm);
  if (refused.length > 0) return { ok: false, message: refused.join('; ') };
  return { ok: true, pod };
}

/**
 * The spec as the reconciler judges it: resolveSpec, and then what the agent and the
 * shipped server would refuse in the pod built from it (derived-config-check.ts), so a
 * spec they refuse is status Error at once, not a crash-looping pod at the next failover.
 */
export function resolveShare(sm: ShareManager, settings: PodSettings): ResolvedSpec {
  const resolved = resolveSpec(sm.spec, settings.defaults);
  if (!resolved.ok) return resolved;
  const built = sharePodFor(sm, settings, undefined, {});
  return built.ok ? resolved : built;
}

export function buildSharePod(input: PodSpecInput): V1Pod {
  const { sm, timings, agentPort } = input;
  const name = sm.metadata.name ?? '';
  const namespace = sm.metadata.namespace ?? '';
  const spec = sm.spec;
  const affinity = placement(spec.scheduling?.affinity, antiAffinity(input.avoid));
  const resources = spec.resources;
  const serviceAccount = spec.serviceAccountName ?? input.agentServiceAccount;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: `${name}-`,
      namespace,
      labels: {
        [LABEL_SHARE_MANAGER]: name,
        [LABEL_COMPONENT]: COMPONENT_SHARE_MANAGER,
        'app.kubernetes.io/managed-by': 'leasehold-manager',
      },
      annotations: { ...(input.annotations ?? {}) },
      ownerReferences: [
        {
          apiVersion: `${SM_GROUP}/${SM_VERSION}`,
          kind: SM_KIND,
          name,
          uid: sm.metadata.uid ?? '',
          controller: true,
          blockOwnerDeletion: true,
        },
      ],
    },
    spec: {
      restartPolicy: 'Never',
      shareProcessNamespace: true,
      ...(serviceAccount ? { serviceAccountName: serviceAccount } : {}),
      ...(spec.scheduling?.nodeSelector ? { nodeSelector: spec.scheduling.nodeSelector } : {}),
      ...(spec.scheduling?.tolerations ? { tolerations: spec.scheduling.tolerations } : {}),
      ...(spec.scheduling?.priorityClassName ? { priorityClassName: spec.scheduling.priorityClassName } : {}),
      ...(affinity ? { affinity } : {}),
      initContainers: [
        {
          name: AGENT_CONTAINER,
          image: input.agentImage,
          args: ['agent'],
          restartPolicy: 'Always',
          env: agentEnv(
            sm,
            timings,
            agentPort,
            input.fenceAction,
            input.serverCheck ?? sm.spec.serverCheck,
            input.takeExpired ?? false,
            input.witnesses ?? [],
          ),
          securityContext: AGENT_SECURITY_CONTEXT,
          resources: resources?.agent ?? AGENT_RESOURCES,
          ports: [{ name: 'agent-http', containerPort: agentPort, protocol: 'TCP' }],
          // The shipped NFS server gates itself (see the header); a user's server image
          // is gated by this probe.
          ...(spec.server ? { startupProbe: leaseStartupProbe(agentPort, AGENT_GATE_FAILURES) } : {}),
          // 1 s, like the server's: a user server's pod becomes a Service endpoint only when
          // every container is Ready, so this period adds up to its length to every failover
          // as clients see it (a local HTTP GET per second costs the agent nothing
          // measurable). The shipped NFS server's Service lists its pods before they are
          // Ready (serviceSpec in execute-reconcile.ts).
          readinessProbe: { httpGet: { path: '/readyz', port: agentPort }, periodSeconds: 1 },
        },
      ],
      containers: [
        {
          ...serverContainer(input),
          ...(resources?.server
            ? { resources: resources.server }
            : spec.server
              ? {}
              : { resources: NFS_SERVER_RESOURCES }),
        },
      ],
      volumes: [
        { name: VOLUME_NAME, persistentVolumeClaim: { claimName: spec.volume.pvc } },
        ...(spec.server ? [] : [NFS_RUN_EMPTY_DIR]),
      ],
    },
  };
}

const NFS_RUN_EMPTY_DIR: V1Volume = {
  name: NFS_RUN_VOLUME,
  emptyDir: { medium: 'Memory', sizeLimit: '16Mi' },
};

/** spec.server as written, or the shipped NFS server when there is none; both get the backstop. */
function serverContainer(input: PodSpecInput): V1Container {
  const server = input.sm.spec.server;
  const volumeMounts = [{ name: VOLUME_NAME, mountPath: input.mountPath }];
  const livenessProbe = leaseBackstopProbe(input.agentPort, input.timings);
  if (!server) {
    const nfs = nfsServerContainer(input.nfsServerImage, input.mountPath, input.sm.spec.nfs);
    return {
      ...nfs,
      name: SERVER_CONTAINER,
      env: [...(nfs.env ?? []), ...nfsLeaseGateEnv(input.agentPort, input.timings)],
      volumeMounts: [
        ...volumeMounts,
        { name: NFS_RUN_VOLUME, mountPath: NFS_RUN_MOUNT },
        { name: NFS_RUN_VOLUME, mountPath: NFS_TMP_MOUNT, subPath: NFS_TMP_SUBPATH },
      ],
      startupProbe: leaseStartupProbe(input.agentPort, NFS_STARTUP_FAILURES),
      livenessProbe,
    };
  }
  return {
    name: SERVER_CONTAINER,
    image: server.image,
    ...(server.command ? { command: server.command } : {}),
    ...(server.args ? { args: server.args } : {}),
    ...(server.ports ? { ports: server.ports } : {}),
    env: server.env ?? [],
    ...(server.securityContext ? { securityContext: server.securityContext } : {}),
    volumeMounts,
    livenessProbe,
  };
}

/** The agent's container security: see the header (CAP_KILL needs uid 0 on Kubernetes). */
export const AGENT_SECURITY_CONTEXT: V1SecurityContext = {
  runAsUser: 0,
  runAsGroup: 0,
  runAsNonRoot: false,
  allowPrivilegeEscalation: false,
  readOnlyRootFilesystem: true,
  capabilities: { drop: ['ALL'], add: ['KILL'] },
  seccompProfile: { type: 'RuntimeDefault' },
};

/**
 * A startup probe on the agent's /readyz every 1 s (the kubelet's minimum period): the
 * gate of a user's server (on the agent) or what arms the NFS server's liveness backstop
 * (on the server). NB: acquiring may wait D after a dead holder plus scheduling noise.
 */
export function leaseStartupProbe(agentPort: number, failureThreshold: number): V1Probe {
  return { httpGet: { path: '/readyz', port: agentPort }, periodSeconds: 1, failureThreshold };
}

/** The agent's startup probe budget (user servers): 10 min. */
export const AGENT_GATE_FAILURES = 600;
/**
 * The NFS server container's startup probe budget: 10.5 min, past the entrypoint's own
 * LEASEHOLD_NFS_LEASE_GATE_TIMEOUT default (10 min), so the entrypoint's clear error
 * (exit 3) comes before the kubelet's kill.
 */
export const NFS_STARTUP_FAILURES = 630;

/**
 * How long a server may run on the agent's last `lease held` answer: D - T. That answer
 * proves a renewal sent at most T before it, and a manager may fail over D after that
 * renewal (docs/design.md, "What it does not guarantee").
 */
export function leaseProofToleranceMs(t: LeaseTimings): number {
  return t.leaseDurationMs - t.renewDeadlineMs;
}

/**
 * The env that turns on the NFS entrypoint's lease gate (the agent's port on the pod's
 * loopback) and sets its watch's tolerance to the share's D - T.
 */
export function nfsLeaseGateEnv(agentPort: number, t: LeaseTimings): V1EnvVar[] {
  return [
    { name: 'LEASEHOLD_NFS_LEASE_GATE_PORT', value: String(agentPort) },
    { name: 'LEASEHOLD_NFS_LEASE_PROOF_TOLERANCE', value: formatDuration(leaseProofToleranceMs(t)) },
  ];
}

/**
 * The server's liveness probe on the agent's proof of holding the lease (see the
 * header): every 1 s (the kubelet's minimum), failing after D - T in whole seconds, at
 * least 1 (2 with the default timings). NB: the kubelet counts in whole periods, so with
 * D - T under 2 s one missed probe ends the server, and it may act up to a period plus
 * the probe's timeout after the proof lapsed; the entrypoint's own watch (NFS server)
 * keeps to D - T exactly.
 */
export function leaseBackstopProbe(agentPort: number, t: LeaseTimings): V1Probe {
  return {
    httpGet: { path: '/readyz', port: agentPort },
    periodSeconds: 1,
    timeoutSeconds: 1,
    // NB: 2, not 1, with the defaults: an agent restarted in place (a crash, an OOM
    // kill) re-proves its lease within about a second; one missed probe must not end
    // the server for it when D - T leaves room.
    failureThreshold: Math.max(1, Math.floor(leaseProofToleranceMs(t) / 1000)),
    successThreshold: 1,
    terminationGracePeriodSeconds: 1,
  };
}

function agentEnv(
  sm: ShareManager,
  t: LeaseTimings,
  agentPort: number,
  fenceAction: FenceAction,
  check: ShareManagerSpec['serverCheck'],
  takeExpired: boolean,
  witnesses: readonly WitnessEndpoint[],
): V1EnvVar[] {
  const env: V1EnvVar[] = [
    { name: 'LEASEHOLD_LEASE_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
    { name: 'LEASEHOLD_LEASE_NAME', value: sm.metadata.name ?? '' },
    { name: 'LEASEHOLD_POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
    { name: 'LEASEHOLD_NODE_NAME', valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } } },
    { name: 'LEASEHOLD_LEASE_DURATION', value: formatDuration(t.leaseDurationMs) },
    { name: 'LEASEHOLD_RENEW_INTERVAL', value: formatDuration(t.renewIntervalMs) },
    { name: 'LEASEHOLD_RENEW_DEADLINE', value: formatDuration(t.renewDeadlineMs) },
    { name: 'LEASEHOLD_RETRY_PERIOD', value: formatDuration(t.retryPeriodMs) },
    { name: 'LEASEHOLD_HTTP_PORT', value: String(agentPort) },
    { name: 'LEASEHOLD_TAKE_EXPIRED', value: String(takeExpired) },
    ...AGENT_RUNTIME_ENV,
  ];
  if (witnesses.length > 0) env.push({ name: 'LEASEHOLD_WITNESSES', value: formatWitnesses(witnesses) });
  const fence = sm.spec.fence;
  env.push({ name: 'LEASEHOLD_FENCE_ACTION', value: fenceAction });
  if (fence?.process) env.push({ name: 'LEASEHOLD_FENCE_PROCESS', value: fence.process });
  if (fence?.signal) env.push({ name: 'LEASEHOLD_FENCE_SIGNAL', value: fence.signal });
  if (fence?.command) env.push({ name: 'LEASEHOLD_FENCE_COMMAND', value: fence.command });
  if (fence?.grace) env.push({ name: 'LEASEHOLD_FENCE_GRACE', value: fence.grace });
  if (fence?.timeout) env.push({ name: 'LEASEHOLD_FENCE_TIMEOUT', value: fence.timeout });
  if (check) {
    env.push({ name: 'LEASEHOLD_SERVER_CHECK', value: check.target });
    if (check.timeout) env.push({ name: 'LEASEHOLD_SERVER_CHECK_TIMEOUT', value: check.timeout });
    if (check.failures !== undefined)
      env.push({ name: 'LEASEHOLD_SERVER_CHECK_FAILURES', value: String(check.failures) });
  }
  return env;
}

/**
 * Default requests and limits, from what the containers used under a Linux kernel
 * client's writes (npm run bench -- share-resources, 2026-12-07, bench/results/
 * share-resources.json): the shipped server (entrypoint + ganesha) 75 MiB idle and at
 * most 120 MiB resident while 400 MiB streamed in and 4,000 small files were made, 53 %
 * of a core while streaming; the agent 57-59 MiB, under 1 % of a core throughout; the server cgroup, page cache included, peaked at 476 MiB.
 * Requests near the measured peak, so the scheduler places the server where it fits;
 * memory limits far above it (a server killed for memory is a failover nobody needed;
 * the page cache of the files it writes is charged to its cgroup too, and reclaimed
 * under the limit); no CPU limit (throttling stalls every client's I/O). A user's own
 * server (spec.server) gets none: we do not know it.
 */
export const NFS_SERVER_RESOURCES: V1ResourceRequirements = {
  requests: { cpu: '100m', memory: '128Mi' },
  limits: { memory: '1Gi' },
};
export const AGENT_RESOURCES: V1ResourceRequirements = {
  requests: { cpu: '10m', memory: '64Mi' },
  limits: { memory: '256Mi' },
};

/**
 * The user's spec.scheduling.affinity with the failover's anti-affinity added: each of
 * the user's required node terms (ORed by the scheduler) gets the anti-affinity's
 * requirements ANDed in, preferences are concatenated, pod (anti-)affinity kept as is.
 */
export function placement(
  user: V1Affinity | undefined,
  anti: V1Affinity | undefined,
): V1Affinity | undefined {
  if (!user) return anti;
  if (!anti?.nodeAffinity) return user;
  const mine = anti.nodeAffinity;
  const theirs = user.nodeAffinity ?? {};
  const antiFields =
    mine.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms[0]?.matchFields ?? [];
  const userTerms = theirs.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  const terms =
    userTerms && userTerms.length > 0
      ? userTerms.map((t) => ({ ...t, matchFields: [...(t.matchFields ?? []), ...antiFields] }))
      : mine.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  const preferred = [
    ...(theirs.preferredDuringSchedulingIgnoredDuringExecution ?? []),
    ...(mine.preferredDuringSchedulingIgnoredDuringExecution ?? []),
  ];
  return {
    ...user,
    nodeAffinity: {
      ...(terms && terms.length > 0
        ? { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms } }
        : {}),
      ...(preferred.length > 0 ? { preferredDuringSchedulingIgnoredDuringExecution: preferred } : {}),
    },
  };
}

/**
 * NB: a `metadata.name` field selector takes exactly one value (the API rejects NotIn with
 * two), so each node is its own requirement: ANDed in the one required term, one
 * preferred term each (a node avoiding all of them scores best).
 */
function antiAffinity(avoid: NodeAvoidance | NodeAvoidances): V1Affinity | undefined {
  const all: NodeAvoidances =
    avoid === undefined ? [] : Array.isArray(avoid) ? avoid : [avoid as NonNullable<NodeAvoidance>];
  const nodes = (mode: 'required' | 'preferred') => [
    ...new Set(all.filter((a) => a.mode === mode).map((a) => a.node)),
  ];
  const notOn = (node: string) => ({ key: 'metadata.name', operator: 'NotIn', values: [node] });
  const required = nodes('required');
  const preferred = nodes('preferred').filter((n) => !required.includes(n));
  if (required.length === 0 && preferred.length === 0) return undefined;
  return {
    nodeAffinity: {
      ...(required.length > 0
        ? {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchFields: required.map(notOn) }],
            },
          }
        : {}),
      ...(preferred.length > 0
        ? {
            preferredDuringSchedulingIgnoredDuringExecution: preferred.map((node) => ({
              weight: 100,
              preference: { matchFields: [notOn(node)] },
            })),
          }
        : {}),
    },
  };
}
