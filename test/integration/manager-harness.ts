/**
 * What the manager integration tests share: the CRD applied from the chart, manager
 * processes (the compiled dist/manager/main.js, each in its own process group, always
 * stopped in `after`), and the test playing the parts no node plays here:
 * it binds pods to Node objects it creates, sets pod status, and acquires/renews the
 * Lease as the pod's agent would (by CAS through lib/lease-store.ts).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import type { Cluster } from '../../dev/cluster/cluster.ts';
import { sleep } from '../../lib/clock.ts';
import { fromWire, type LeaseRecord } from '../../lib/lease-record.ts';
import type { ShareManagerStatus } from '../../manager/share-model/share-manager-spec.ts';
import { eventually } from '../support/cluster.ts';
import { HolderLoop } from './manager-holder-loop.ts';

export { HolderLoop };

const run = promisify(execFile);
export const ROOT = join(import.meta.dirname, '..', '..');
export const CRD_PATH = join(ROOT, 'charts/leasehold/crds/sharemanagers.leasehold.dev.yaml');

export async function applyCrd(cluster: Cluster): Promise<void> {
  await run(cluster.kubectl, ['--kubeconfig', cluster.kubeconfigPath, 'apply', '-f', CRD_PATH]);
  await run(cluster.kubectl, [
    '--kubeconfig',
    cluster.kubeconfigPath,
    'wait',
    '--for=condition=Established',
    '--timeout=60s',
    'crd/sharemanagers.leasehold.dev',
  ]);
}

export async function kubectl(
  cluster: Cluster,
  args: string[],
  input?: string,
): Promise<{ stdout: string; stderr: string; code: number }> {
  return new Promise((resolve) => {
    const child = spawn(cluster.kubectl, ['--kubeconfig', cluster.kubeconfigPath, ...args]);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ stdout, stderr, code: code ?? -1 }));
    child.stdin.end(input ?? '');
  });
}

export interface ManagerProcess {
  name: string;
  child: ChildProcess;
  logPath: string;
  /** Parsed JSON log lines so far. */
  lines(): Promise<Record<string, unknown>[]>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

const started: ManagerProcess[] = [];

export function startManager(
  cluster: Cluster,
  name: string,
  env: Record<string, string> = {},
): ManagerProcess {
  const logPath = join(cluster.logDir, `manager-${name}.log`);
  const out = createWriteStream(logPath);
  const child = spawn(process.execPath, [join(ROOT, 'dist/manager/main.js')], {
    env: {
      PATH: process.env.PATH,
      KUBECONFIG: cluster.kubeconfigPath,
      LEASEHOLD_POD_NAME: name,
      LEASEHOLD_NODE_NAME: 'node-manager',
      LEASEHOLD_HTTP_PORT: '0',
      LEASEHOLD_HTTP_HOST: '127.0.0.1',
      LEASEHOLD_LOG_LEVEL: 'info',
      // NB: these tests play the kubelet and create no volumes (the ShareManagers' claims
      // do not exist), so the storage-fencing gate would find nothing that fences and wait
      // for node-down evidence; they test the lease protocol, so they fail over on it alone.
      LEASEHOLD_NONFENCING_STORAGE: 'lease-only',
      ...env,
    },
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.pipe(out);
  child.stderr?.pipe(out);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const proc: ManagerProcess = {
    name,
    child,
    logPath,
    lines: async () =>
      (await readFile(logPath, 'utf8'))
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
    kill: async (signal = 'SIGTERM') => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      try {
        process.kill(-(child.pid as number), signal);
      } catch {
        return;
      }
      await Promise.race([exited, sleep(5000)]);
      if (child.exitCode === null && child.signalCode === null)
        process.kill(-(child.pid as number), 'SIGKILL');
      await exited;
    },
  };
  started.push(proc);
  return proc;
}

export async function stopAllManagers(): Promise<void> {
  await Promise.all(started.splice(0).map((m) => m.kill('SIGTERM')));
}

/**
 * Creates a namespace and its `default` ServiceAccount, which share-manager pods use: the
 * controller-manager makes that account too, but after a test stopped the API server its
 * controllers may still be backing off, and pods are refused until it exists (a full run
 * saw a share's pod refused for more than 30 s that way).
 */
export async function createNamespace(kc: k8s.KubeConfig, name: string): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await core.createNamespace({ body: { metadata: { name } } });
  try {
    await core.createNamespacedServiceAccount({ namespace: name, body: { metadata: { name: 'default' } } });
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err;
  }
}

export async function createNode(kc: k8s.KubeConfig, name: string): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  await core.createNode({
    body: { metadata: { name, labels: { 'kubernetes.io/hostname': name } }, spec: {} },
  });
  await heartbeatNode(kc, name);
}

/**
 * Reports `name` Ready now, as its kubelet's heartbeat would: the node controller
 * marks the pods of a node silent for its grace period not Ready.
 */
export async function heartbeatNode(kc: k8s.KubeConfig, name: string): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const now = new Date().toISOString();
  await core.patchNodeStatus(
    {
      name,
      body: {
        status: {
          conditions: [
            {
              type: 'Ready',
              status: 'True',
              reason: 'KubeletReady',
              message: 'played by the test',
              lastHeartbeatTime: now,
              lastTransitionTime: now,
            },
          ],
          capacity: { pods: '110', cpu: '4', memory: '8Gi' },
          allocatable: { pods: '110', cpu: '4', memory: '8Gi' },
        },
      },
    },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
  );
}

/**
 * Plays the operator (or a fencing controller) who knows `node` is down: the taint
 * node.kubernetes.io/out-of-service=nodeshutdown:NoExecute, the storage-fencing gate's
 * node-down evidence (failover/storage-fencing.ts). NB: replaces the node's taints.
 */
export async function taintOutOfService(kc: k8s.KubeConfig, node: string): Promise<void> {
  await kc.makeApiClient(k8s.CoreV1Api).patchNode(
    {
      name: node,
      body: {
        spec: {
          taints: [{ key: 'node.kubernetes.io/out-of-service', value: 'nodeshutdown', effect: 'NoExecute' }],
        },
      },
    },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  );
}

export interface ShareManagerInput {
  name: string;
  namespace: string;
  lease?: Record<string, string>;
  extra?: Record<string, unknown>;
}

export function shareManagerBody(sm: ShareManagerInput): Record<string, unknown> {
  return {
    apiVersion: 'leasehold.dev/v1alpha1',
    kind: 'ShareManager',
    metadata: { name: sm.name, namespace: sm.namespace },
    spec: {
      volume: { pvc: `data-${sm.name}` },
      server: {
        image: 'leasehold.dev/demo-share-server:dev',
        ports: [{ name: 'http', containerPort: 8080 }],
      },
      ...(sm.lease ? { lease: sm.lease } : {}),
      ...(sm.extra ?? {}),
    },
  };
}

export async function createShareManager(kc: k8s.KubeConfig, sm: ShareManagerInput): Promise<void> {
  await kc.makeApiClient(k8s.CustomObjectsApi).createNamespacedCustomObject({
    group: 'leasehold.dev',
    version: 'v1alpha1',
    namespace: sm.namespace,
    plural: 'sharemanagers',
    body: shareManagerBody(sm),
  });
}

export async function getShareManager(
  kc: k8s.KubeConfig,
  namespace: string,
  name: string,
): Promise<{
  metadata: k8s.V1ObjectMeta;
  status?: Record<string, unknown> & {
    state?: string;
    message?: string;
    lastFailover?: Record<string, string>;
    conditions?: ShareManagerStatus['conditions'];
  };
}> {
  return (await kc.makeApiClient(k8s.CustomObjectsApi).getNamespacedCustomObject({
    group: 'leasehold.dev',
    version: 'v1alpha1',
    namespace,
    plural: 'sharemanagers',
    name,
  })) as never;
}

export async function podsOf(kc: k8s.KubeConfig, namespace: string, sm: string): Promise<k8s.V1Pod[]> {
  const list = await kc
    .makeApiClient(k8s.CoreV1Api)
    .listNamespacedPod({ namespace, labelSelector: `leasehold.dev/share-manager=${sm}` });
  return list.items;
}

/** Plays scheduler + kubelet: binds the pod to `node` and reports it Running. */
let podAddresses = 0;

/** Binds `pod` to `node` and reports it Running with an address of its own, as a kubelet would. */
export async function runPodOn(
  kc: k8s.KubeConfig,
  pod: k8s.V1Pod,
  node: string,
  opts: { ready?: boolean } = {},
): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const namespace = pod.metadata?.namespace ?? '';
  const name = pod.metadata?.name ?? '';
  await core.createNamespacedBinding({
    namespace,
    body: { metadata: { name, namespace }, target: { apiVersion: 'v1', kind: 'Node', name: node } },
  });
  const current = await core.readNamespacedPod({ namespace, name });
  podAddresses++;
  const podIP = `10.244.${Math.floor(podAddresses / 250)}.${(podAddresses % 250) + 2}`;
  current.status = {
    ...current.status,
    phase: 'Running',
    startTime: new Date(),
    podIP,
    podIPs: [{ ip: podIP }],
    ...(opts.ready
      ? { conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: new Date() }] }
      : {}),
  };
  await core.replaceNamespacedPodStatus({ namespace, name, body: current });
}

export async function readLease(kc: k8s.KubeConfig, namespace: string, name: string): Promise<LeaseRecord> {
  return fromWire(await kc.makeApiClient(k8s.CoordinationV1Api).readNamespacedLease({ namespace, name }));
}

export async function eventsFor(
  kc: k8s.KubeConfig,
  namespace: string,
  name: string,
): Promise<k8s.CoreV1Event[]> {
  const list = await kc
    .makeApiClient(k8s.CoreV1Api)
    .listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name}` });
  return list.items;
}

export async function waitForPods(
  kc: k8s.KubeConfig,
  namespace: string,
  sm: string,
  count: number,
  timeoutMs = 30_000,
): Promise<k8s.V1Pod[]> {
  return eventually(
    `${count} live pod(s) of ${namespace}/${sm}`,
    async () => {
      const pods = (await podsOf(kc, namespace, sm)).filter((p) => !p.metadata?.deletionTimestamp);
      return pods.length === count ? pods : undefined;
    },
    timeoutMs,
  );
}

/** The one live pod of `sm` other than `lostPod`, once it exists. */
export async function waitForReplacement(
  kc: k8s.KubeConfig,
  namespace: string,
  sm: string,
  lostPod: string,
  timeoutMs = 15_000,
): Promise<k8s.V1Pod> {
  return eventually(
    `a replacement of ${lostPod}`,
    async () =>
      (await podsOf(kc, namespace, sm)).find(
        (p) => !p.metadata?.deletionTimestamp && p.metadata?.name !== lostPod,
      ),
    timeoutMs,
  );
}

/** Creates a ShareManager, waits for its pod, runs it on `node` and holds its lease. */
export async function runningShare(
  kc: k8s.KubeConfig,
  where: { namespace: string; name: string; node: string; lease: Record<string, string>; ready?: boolean },
  holders: HolderLoop[],
): Promise<{ pod: k8s.V1Pod; holder: HolderLoop }> {
  const { namespace, name, node } = where;
  await createShareManager(kc, { namespace, name, lease: where.lease });
  const [pod] = await waitForPods(kc, namespace, name, 1);
  if (!pod) throw new Error(`no pod for ${namespace}/${name}`);
  await runPodOn(kc, pod, node, { ready: where.ready });
  const holder = new HolderLoop(kc, namespace, name, pod.metadata?.name ?? '', node, 1000).start();
  holders.push(holder);
  await eventually(`${name} Running`, async () =>
    (await getShareManager(kc, namespace, name)).status?.state === 'Running' ? true : undefined,
  );
  return { pod, holder };
}

/**
 * Plays the kubelet reporting that every container of the pod ended (restartPolicy
 * Never): phase Succeeded or Failed, the agent sidecar and the server terminated.
 */
export async function reportPodEnded(
  kc: k8s.KubeConfig,
  namespace: string,
  name: string,
  phase: 'Succeeded' | 'Failed',
): Promise<void> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const current = await core.readNamespacedPod({ namespace, name });
  const exitCode = phase === 'Succeeded' ? 0 : 1;
  const ended = (c: k8s.V1Container): k8s.V1ContainerStatus => ({
    name: c.name,
    image: c.image ?? '',
    imageID: '',
    ready: false,
    restartCount: 0,
    state: { terminated: { exitCode, reason: exitCode === 0 ? 'Completed' : 'Error' } },
  });
  current.status = {
    ...current.status,
    phase,
    initContainerStatuses: (current.spec?.initContainers ?? []).map(ended),
    containerStatuses: (current.spec?.containers ?? []).map(ended),
  };
  await core.replaceNamespacedPodStatus({ namespace, name, body: current });
}

/** The lease timings most manager tests use: D = 3 s, so verdicts come quickly. */
export const FAST_LEASE = { duration: '3s', renewInterval: '1s', renewDeadline: '2s', retryPeriod: '200ms' };
export const FAST_LEASE_D_MS = 3000;
/**
 * The same timings as the manager's defaults, for tests whose Leases have no
 * ShareManager: such a Lease is judged by at least the manager's default duration
 * (manager/detection/lease-duration.ts), whatever its leaseDurationSeconds says.
 */
export const FAST_MANAGER_DEFAULTS = {
  LEASEHOLD_LEASE_DURATION: FAST_LEASE.duration,
  LEASEHOLD_RENEW_INTERVAL: FAST_LEASE.renewInterval,
  LEASEHOLD_RENEW_DEADLINE: FAST_LEASE.renewDeadline,
  LEASEHOLD_RETRY_PERIOD: FAST_LEASE.retryPeriod,
};

/**
 * Call inside a describe(): the CRD and the named Nodes exist before its tests; every
 * holder loop in `holders` and every manager process is stopped after them.
 */
export function useManagerFixture(
  cluster: () => Cluster,
  nodes: readonly string[],
  holders: HolderLoop[],
): void {
  before(async () => {
    await applyCrd(cluster());
    for (const node of nodes) await createNode(cluster().kubeConfig, node);
  });
  after(async () => {
    await Promise.all(holders.splice(0).map((h) => h.stop()));
    await stopAllManagers();
  });
}
