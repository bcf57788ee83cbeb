/**
 * The whole leasehold system on real nodes (issue 12), as a user runs it: a real
 * control plane (dev/cluster, `realNodes: true`), the testbed CSI driver's controller
 * side with the real external-attacher (dev/csi, in its fencing mode: a node reaches a
 * volume only through its own revocable view, revoked on the host when the volume is
 * detached from it), N real nodes (dev/node: the real
 * kubelet, containerd, runc, kube-proxy; each with the CSI driver's node part), the
 * project's locally built images (dev/image: `leasehold` and `nfs-ganesha`) in every
 * node's containerd from its first boot (dev/node/containerd-seed.ts: imported once,
 * as a node image with pre-pulled images has them), and charts/leasehold installed with `helm install`,
 * its images set to those local refs with pullPolicy Never (no registry exists; the
 * share pods the manager builds name the same refs, IfNotPresent by their tags, and
 * find them there). So the managers are real DaemonSet pods of the real image,
 * under the chart's securityContexts, reaching the API server the in-cluster way
 * (the `kubernetes` Service through kube-proxy, their projected tokens).
 *
 *   const sys = await startRealSystem({ nodes: 2 });
 *   sys.node('real-1').crash();  // the RealNode fault API (dev/node/node.ts)
 *   await sys.stop();            // throws when a node's leftover check finds anything
 *
 * Guarantees: startRealSystem() resolves when every node runs a Ready manager pod, or
 * rejects having stopped whatever it started. stop() is idempotent: the nodes (each
 * runs its leftover check and throws NodeLeftoverError on anything left), then the CSI
 * controller (throws when one of its processes stays), then the control plane; a
 * failure of one part does not skip the next, and every failure is reported.
 * NB: the pods run the images' own dist/ (dev/image compiles the sources when it builds
 * them: `bash dev/toolchain.sh --image`, or localImages() when no image dir is given),
 * not this worktree's dist/: a source change reaches the pods only through a rebuild.
 * The nodes are on one network (dev/node's fabric): pods and ClusterIPs reach across
 * them, and RealNode.spawnInNetwork runs a host client in a node's namespace.
 * Here too, for the tests and benchmarks on it: the release's names (SYSTEM_NAMESPACE,
 * SHARES_NAMESPACE, RELEASE) and its manager pods (managerPodsByNode, waitForManagers).
 * Not provided: cluster DNS.
 */
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import { startCluster } from '../cluster/cluster.ts';
import type { Cluster, ClusterOptions } from '../cluster/types.ts';
import { type CsiController, startCsiController } from '../csi/controller.ts';
import { type LocalImage, localImages } from '../image/images.ts';
import { nodeBinaries } from '../node/binaries.ts';
import { containerdSeed } from '../node/containerd-seed.ts';
import { type RealNode, startRealNode } from '../node/node.ts';
import { helmInstall } from './helm-install.ts';

/** Where the chart goes (its release and namespace) and the namespace of the shares. */
export const SYSTEM_NAMESPACE = 'leasehold-system';
export const SHARES_NAMESPACE = 'shares';
export const RELEASE = 'leasehold';
export const MANAGER_LABEL = 'app.kubernetes.io/component=manager';

export const RECONNECTOR_LABEL = 'app.kubernetes.io/component=reconnector';

/** The pod of one of the chart's DaemonSets (by its component label) on each node (node name -> pod), deleted ones left out. */
export async function componentPodsByNode(
  core: k8s.CoreV1Api,
  labelSelector: string,
): Promise<Map<string, k8s.V1Pod>> {
  const list = await core.listNamespacedPod(
    { namespace: SYSTEM_NAMESPACE, labelSelector },
    withDeadline(10_000),
  );
  const byNode = new Map<string, k8s.V1Pod>();
  for (const pod of list.items) {
    if (pod.metadata?.deletionTimestamp || !pod.spec?.nodeName) continue;
    byNode.set(pod.spec.nodeName, pod);
  }
  return byNode;
}

/** The manager pod on each node (node name -> pod), deleted ones left out. */
export function managerPodsByNode(core: k8s.CoreV1Api): Promise<Map<string, k8s.V1Pod>> {
  return componentPodsByNode(core, MANAGER_LABEL);
}

function isReady(pod: k8s.V1Pod): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

async function ensureNamespace(core: k8s.CoreV1Api, name: string): Promise<void> {
  await core.createNamespace({ body: { metadata: { name } } }, withDeadline(10_000)).catch((err: unknown) => {
    if (statusOf(err) !== 409) throw err;
  });
}

/** Waits until every node of `nodes` runs a Ready manager pod. */
export function waitForManagers(core: k8s.CoreV1Api, nodes: string[], timeoutMs: number): Promise<void> {
  return waitForComponent(core, nodes, MANAGER_LABEL, 'manager', timeoutMs);
}

/** Waits until every node of `nodes` runs a Ready pod of the chart's DaemonSet `labelSelector` selects. */
export async function waitForComponent(
  core: k8s.CoreV1Api,
  nodes: string[],
  labelSelector: string,
  what: string,
  timeoutMs: number,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let missing: string[] = nodes;
  while (performance.now() < deadline) {
    const pods = await componentPodsByNode(core, labelSelector).catch(() => new Map<string, k8s.V1Pod>());
    missing = nodes.filter((n) => {
      const pod = pods.get(n);
      return !pod || !isReady(pod);
    });
    if (missing.length === 0) return;
    await sleep(250);
  }
  throw new LeaseholdError(
    'E_SYSTEM_START',
    `no ready ${what} pod on ${missing.join(', ')} after ${timeoutMs} ms (namespace ${SYSTEM_NAMESPACE})`,
  );
}

export interface RealSystemOptions {
  /** How many real nodes (named real-1..real-N, indexes 1..N); default 2. */
  nodes?: number;
  cluster?: Omit<ClusterOptions, 'realNodes'>;
  /** Chart values (helm --set) on top of the image refs and agent.namespaces. */
  values?: Record<string, string>;
  progress?: (line: string) => void;
  keepDirs?: boolean;
  /**
   * Also storage without an attach step: the testbed driver's attach-less second name
   * (dev/csi NOATTACH_DRIVER_NAME, CSIDriver attachRequired false; createRealVolume's
   * `noAttach`). Default false (two processes a node less).
   */
  noAttachDriver?: boolean;
  /**
   * Also dynamic provisioning of backing volumes: the real external-provisioner and the
   * testbed driver's StorageClass (dev/csi STORAGE_CLASS), as the backing class of the
   * chart's leasehold StorageClass. Default false (one process less).
   */
  csiProvisioning?: boolean;
  /** With csiProvisioning: also the real external-resizer; the backing class allows expansion. */
  csiExpansion?: boolean;
  /**
   * Install this chart with these images instead of today's (an older release:
   * dev/image/previous-release.ts); today's images are in the nodes too, so an upgrade
   * to them needs no import. Default: today's chart and images.
   */
  install?: () => Promise<{ chartDir: string; images: { leasehold: LocalImage; nfsGanesha: LocalImage } }>;
}

export interface RealSystem {
  cluster: Cluster;
  kc: k8s.KubeConfig;
  core: k8s.CoreV1Api;
  nodes: readonly RealNode[];
  /** The node by name; throws naming the names there are. */
  node(name: string): RealNode;
  csi: CsiController;
  images: { leasehold: LocalImage; nfsGanesha: LocalImage };
  /** The manager pod on each node (node name -> pod name). */
  managerPods(): Promise<Map<string, string>>;
  stop(): Promise<void>;
}

/** `repo/name:tag` -> its chart values (the tag after the last colon past the last slash). */
export function imageValues(prefix: string, ref: string): Record<string, string> {
  const at = ref.lastIndexOf(':');
  if (at <= ref.lastIndexOf('/'))
    throw new LeaseholdError(
      'E_IMAGE_REF',
      `image ref ${JSON.stringify(ref)} has no tag (repo:tag expected)`,
    );
  return { [`${prefix}.repository`]: ref.slice(0, at), [`${prefix}.tag`]: ref.slice(at + 1) };
}

export async function startRealSystem(opts: RealSystemOptions = {}): Promise<RealSystem> {
  const progress = opts.progress ?? (() => {});
  const count = opts.nodes ?? 2;
  if (!Number.isInteger(count) || count < 1 || count > 250)
    throw new LeaseholdError('E_SYSTEM_OPTIONS', `nodes=${count}: an integer 1..250 expected`);
  const t0 = performance.now();
  const since = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
  // Built (or read from the cache) while the control plane starts.
  const imagesP = localImages();
  imagesP.catch(() => {}); // awaited below; not an unhandled rejection meanwhile
  progress('starting the control plane for real nodes');
  const cluster = await startCluster({ ...(opts.cluster ?? {}), realNodes: true });
  let csi: CsiController | undefined;
  const nodes: RealNode[] = [];
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    const errors: unknown[] = [];
    const settled = await Promise.allSettled(nodes.map((n) => n.stop()));
    for (const r of settled) if (r.status === 'rejected') errors.push(r.reason);
    await csi?.stop().catch((e: unknown) => errors.push(e));
    await cluster.stop({ keepDir: opts.keepDirs === true }).catch((e: unknown) => errors.push(e));
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1)
      throw new LeaseholdError('E_SYSTEM_STOP', 'stopping the real-node system failed in several parts', {
        cause: new AggregateError(errors),
      });
  };
  try {
    const kc = cluster.kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    // Fencing: each node reaches a volume only through its own revocable view, granted at
    // ControllerPublish and revoked at ControllerUnpublish (dev/csi README).
    const noAttachDriver = opts.noAttachDriver === true;
    csi = await startCsiController(cluster, {
      fencing: true,
      noAttachDriver,
      provisioning: opts.csiProvisioning === true,
      expansion: opts.csiExpansion === true,
    });
    // The images (built or read from the cache while the control plane started) go into
    // each node's containerd root before it boots, as on a node image with pre-pulled
    // images (containerd-seed.ts: made once per image set, hard-linked per node; importing
    // them cost each node about 12 s of containerd's CPU). So nothing a test creates can
    // start before its image is there (a pod whose image is missing fails with
    // ErrImageNeverPull instead of waiting).
    const all = await imagesP;
    const leasehold = all.leasehold;
    const nfsGanesha = all['nfs-ganesha'];
    if (!leasehold || !nfsGanesha)
      throw new LeaseholdError(
        'E_IMAGE_MISSING',
        `the local images lack leasehold or nfs-ganesha: ${Object.keys(all)}`,
      );
    const bins = await nodeBinaries();
    const release = await opts.install?.();
    const installed = release?.images ?? { leasehold, nfsGanesha };
    const tars = [
      ...new Set([leasehold.tar, nfsGanesha.tar, installed.leasehold.tar, installed.nfsGanesha.tar]),
    ];
    const seed = await containerdSeed(bins.dir, [bins.pauseTar, ...tars], progress);
    progress(`CSI controller up, images in the nodes' seed (${since()}); starting ${count} real nodes`);
    const names = Array.from({ length: count }, (_, i) => `real-${i + 1}`);
    const backingDir = csi.backingDir;
    const started = await Promise.allSettled(
      names.map((name, i) =>
        startRealNode(cluster, {
          name,
          index: i + 1,
          csi: { backingDir, noAttachDriver },
          containerdSeed: seed,
        }),
      ),
    );
    for (const r of started) if (r.status === 'fulfilled') nodes.push(r.value);
    for (const r of started) if (r.status === 'rejected') throw r.reason;
    await ensureNamespace(core, SHARES_NAMESPACE);
    progress(`nodes Ready with the images (${since()}); installing the chart with helm`);
    await helmInstall({
      kubeconfigPath: cluster.kubeconfigPath,
      release: RELEASE,
      namespace: SYSTEM_NAMESPACE,
      ...(release ? { chart: release.chartDir } : {}),
      values: {
        ...imageValues('image', installed.leasehold.ref),
        'image.pullPolicy': 'Never',
        ...imageValues('nfsServer.image', installed.nfsGanesha.ref),
        'agent.namespaces': `{${SHARES_NAMESPACE}}`,
        ...(opts.values ?? {}),
      },
    });
    progress('waiting for a ready manager pod on every node');
    await waitForManagers(core, names, 180_000);
    // The reconnector must know each share's address before a fault to end connections to it.
    if (!release && opts.values?.['reconnector.enabled'] !== 'false')
      await waitForComponent(core, names, RECONNECTOR_LABEL, 'reconnector', 180_000);
    progress(`system ready: managers and reconnectors ready (${since()})`);
    const node = (name: string) => {
      const n = nodes.find((x) => x.name === name);
      if (!n)
        throw new LeaseholdError(
          'E_NO_NODE',
          `no real node ${name} (there are ${nodes.map((x) => x.name).join(', ')})`,
        );
      return n;
    };
    return {
      cluster,
      kc,
      core,
      nodes,
      node,
      csi,
      images: { leasehold, nfsGanesha },
      managerPods: async () =>
        new Map([...(await managerPodsByNode(core))].map(([n, p]) => [n, p.metadata?.name ?? ''])),
      stop,
    };
  } catch (err) {
    await stop().catch((stopErr: unknown) => {
      throw new LeaseholdError('E_SYSTEM_START', 'the real-node system failed to start and to clean up', {
        cause: new AggregateError([err, stopErr]),
      });
    });
    throw err;
  }
}
