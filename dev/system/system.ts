/**
 * The whole leasehold system on the local cluster, as the demo, the end-to-end tests
 * and the failover benchmark use it: a real control plane (dev/cluster), simulated
 * nodes (dev/sim) and the project's Helm chart installed with `helm install`, so the
 * DaemonSet controller puts one manager pod on every simulated node and the
 * simulated kubelet runs it (the compiled dist/manager/main.js, with a TokenRequest
 * token for its service account: RBAC and the admission policy are real).
 *
 * Guarantees: startSystem() resolves when every node runs a ready manager, or
 * rejects having stopped whatever it started; stop() is idempotent and leaves no
 * process behind. It stops the simulated nodes and the control plane at once: the
 * simulator's stop needs no API server (its kubelets SIGKILL their pods and post no
 * status; its watches just end), so neither waits for the other (2.5-3.4 s one after
 * the other, 1.3-1.6 s at once, 2026-12-01).
 * NB: the compiled entrypoints must be current: callers run `tsc -p tsconfig.build.json`
 * first (dev/test.sh does; the demo and the benchmark do it themselves).
 * The same system on real nodes (real kubelets, the project's images): real-system.ts.
 */
import { rmSync } from 'node:fs';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import { type Cluster, type ClusterOptions, startCluster, timedProgress } from '../cluster/cluster.ts';
import { type Sim, type SimOptions, startSim } from '../sim/sim.ts';
import { helmInstall } from './helm-install.ts';

export const SYSTEM_NAMESPACE = 'leasehold-system';
export const SHARES_NAMESPACE = 'shares';
export const RELEASE = 'leasehold';
export const MANAGER_LABEL = 'app.kubernetes.io/component=manager';

export interface SystemOptions {
  nodes?: number | string[];
  cluster?: ClusterOptions;
  sim?: Omit<SimOptions, 'cluster' | 'nodes'>;
  /** Chart values (helm --set), e.g. { 'agent.leaseDuration': '7s' }. */
  values?: Record<string, string>;
  /** Install the chart (the managers); false = no manager at all (stock Kubernetes). */
  managers?: boolean;
  progress?: (line: string) => void;
  /** Let dev/helm/build.sh print its build progress. */
  showBuildProgress?: boolean;
  keepDirs?: boolean;
}

export interface System {
  cluster: Cluster;
  sim: Sim;
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  /** The manager pod on each node (node name -> pod name), as of start. */
  managerPods(): Promise<Map<string, string>>;
  stop(): Promise<void>;
}

export async function managerPodsByNode(core: k8s.CoreV1Api): Promise<Map<string, k8s.V1Pod>> {
  const list = await core.listNamespacedPod(
    { namespace: SYSTEM_NAMESPACE, labelSelector: MANAGER_LABEL },
    withDeadline(10_000),
  );
  const byNode = new Map<string, k8s.V1Pod>();
  for (const pod of list.items) {
    if (pod.metadata?.deletionTimestamp || !pod.spec?.nodeName) continue;
    byNode.set(pod.spec.nodeName, pod);
  }
  return byNode;
}

function isReady(pod: k8s.V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

export async function ensureNamespace(core: k8s.CoreV1Api, name: string): Promise<void> {
  await core.createNamespace({ body: { metadata: { name } } }, withDeadline(10_000)).catch((err: unknown) => {
    if (statusOf(err) !== 409) throw err;
  });
}

/** Waits until every simulated node runs a Ready manager pod. */
export async function waitForManagers(
  core: k8s.CoreV1Api,
  nodes: string[],
  timeoutMs: number,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let missing: string[] = nodes;
  while (performance.now() < deadline) {
    const pods = await managerPodsByNode(core).catch(() => new Map<string, k8s.V1Pod>());
    missing = nodes.filter((n) => {
      const pod = pods.get(n);
      return !pod || !isReady(pod);
    });
    if (missing.length === 0) return;
    await sleep(250);
  }
  throw new LeaseholdError(
    'E_SYSTEM_START',
    `no ready manager pod on ${missing.join(', ')} after ${timeoutMs} ms (namespace ${SYSTEM_NAMESPACE})`,
  );
}

export async function startSystem(opts: SystemOptions = {}): Promise<System> {
  const progress = timedProgress('system', opts.progress);
  progress('starting the control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager)');
  const cluster = await startCluster(opts.cluster ?? {});
  let sim: Sim | undefined;
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      const [simStopped, clusterStopped] = await Promise.allSettled([
        sim?.stop().then(() => progress('simulated nodes stopped')),
        cluster.stop({ keepDir: opts.keepDirs === true }).then(() => progress('control plane stopped')),
      ]);
      if (sim && !opts.keepDirs) rmSync(sim.root, { recursive: true, force: true });
      if (simStopped.status === 'rejected') throw simStopped.reason;
      if (clusterStopped.status === 'rejected') throw clusterStopped.reason;
    })();
    return stopping;
  };
  try {
    const kc = cluster.kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const nodeCount = Array.isArray(opts.nodes) ? opts.nodes.length : (opts.nodes ?? 3);
    progress(`starting ${nodeCount} simulated nodes`);
    sim = await startSim({ ...(opts.sim ?? {}), cluster, nodes: opts.nodes ?? 3 });
    const nodeNames = sim.nodes.map((n) => n.name);
    await ensureNamespace(core, SHARES_NAMESPACE);
    if (opts.managers !== false) {
      progress('installing the leasehold chart with helm (CRD, RBAC, admission policy, manager DaemonSet)');
      await helmInstall({
        kubeconfigPath: cluster.kubeconfigPath,
        release: RELEASE,
        namespace: SYSTEM_NAMESPACE,
        values: { 'image.tag': 'dev', 'agent.namespaces': `{${SHARES_NAMESPACE}}`, ...(opts.values ?? {}) },
        showProgress: opts.showBuildProgress === true,
      });
      progress('waiting for a ready manager pod on every node');
      await waitForManagers(core, nodeNames, 120_000);
      progress('a ready manager pod on every node');
    }
    const running = sim;
    return {
      cluster,
      sim: running,
      kc,
      core,
      managerPods: async () =>
        new Map([...(await managerPodsByNode(core))].map(([n, p]) => [n, p.metadata?.name ?? ''])),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
