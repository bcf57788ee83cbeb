/**
 * The simulator: N simulated nodes on a real control plane, the test CSI driver
 * (CSIDriver with attachRequired) and its simulated external-attacher.
 *
 *   const sim = await startSim({ cluster, nodes: 3 });     // sim-1, sim-2, sim-3
 *   await sim.node('sim-2').crash();  sim.node('sim-2').heal();
 *   sim.servingWindows('pv-a')        // who served volume pv-a, when (monotonic ms)
 *   await sim.stop();                 // every pod process gone, proxies closed
 *
 * Layout under `root` (a temp dir unless given): volumes/<pv>/ (PV data: records,
 * serving-windows.jsonl), pods/<uid>/{kubeconfig,logs/<container>.log}, sim.log.
 * Guarantee: stop() leaves no process behind, no fencing-storage view mounted
 * (storage/<pv>/<node>.<n>) and no ext4 image of the block kind mounted or on a loop
 * device; the Node objects stay in the cluster.
 */
import { appendFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { k8s, statusOf, withDeadline } from '../../lib/kube-client.ts';
import { SimCsiAttacher } from '../../test/support/handoff-order.ts';
import type { Cluster } from '../cluster/types.ts';
import { readServingWindows, type ServingWindow } from '../share-server/serving-window-log.ts';
import { TEST_CSI_DRIVER } from './kubelet/pod-volumes.ts';
import type { ContainerExitRecord } from './kubelet/pod-worker.ts';
import type { NodeCondition } from './network/service-connection.ts';
import { type ServiceAddress, ServiceProxy } from './network/service-proxy.ts';
import type { PortEndpoint, ResolvedEndpoint } from './network/service-routing.ts';
import { type FaultRecord, SimNode, type SimNodeState } from './node/sim-node.ts';
import { SHARE_SERVER_IMAGE } from './runtime/container-launch.ts';
import { FencingStorage } from './storage/fencing-storage.ts';

export { TEST_CSI_DRIVER, TEST_NOATTACH_CSI_DRIVER } from './kubelet/pod-volumes.ts';
export type { ServiceAddress, ServiceConnectionView, ServiceProxy } from './network/service-proxy.ts';
export { fakeClockEnv } from './node/fake-clock.ts';
export { SIM_NODE_LABEL } from './node/node-object.ts';
export type { SimNode } from './node/sim-node.ts';
export { NFS_SERVER_IMAGE, PROJECT_IMAGE, SHARE_SERVER_IMAGE } from './runtime/container-launch.ts';
export { createTestVolume, type TestVolume } from './storage/test-volume.ts';

export interface SimOptions {
  cluster: Cluster;
  /** A count (names sim-1..sim-N) or explicit names. Default 3. */
  nodes?: number | string[];
  root?: string;
  /** The repository whose dist/ holds the built entrypoints (default: this checkout). */
  repoRoot?: string;
  leaseRenewMs?: number;
  statusMs?: number;
  /** Simulated storage latency before a VolumeAttachment is marked attached (default 0). */
  attachDelayMs?: number;
  /** Log lines (JSON); default: appended to <root>/sim.log. */
  log?: (line: string) => void;
}

export interface Sim {
  readonly root: string;
  readonly nodes: SimNode[];
  readonly attacher: SimCsiAttacher;
  /** Every container process exit seen by any kubelet, in order. */
  readonly exits: ContainerExitRecord[];
  node(name: string): SimNode;
  addNode(name: string): Promise<SimNode>;
  faults(): FaultRecord[];
  /** The host directory holding a PV's data. */
  volumeDir(pvName: string): string;
  /** The kube-proxy stand-in (network/service-proxy.ts): its connections, for tests. */
  readonly serviceProxy: ServiceProxy;
  /**
   * The stable address (127.0.0.1 and a port of its own) of a ClusterIP Service's port
   * (its name or `port` number) that follows the Service's EndpointSlices, like the
   * ClusterIP in a cluster: see network/service-proxy.ts. Waits until the proxy saw the Service.
   */
  serviceAddress(
    namespace: string,
    service: string,
    portNameOrNumber: string | number,
    timeoutMs?: number,
  ): Promise<ServiceAddress>;
  /** Host port of a pod's containerPort, whichever node runs it. */
  hostPort(namespace: string, podName: string, containerPort: number): number | undefined;
  /**
   * Serving windows of the share servers of a PV. A window without a stop line (the
   * server was SIGKILLed) is closed at the exit the kubelet observed for that pod's
   * share-server container, which is after the process died; still open otherwise.
   */
  servingWindows(pvName: string): ServingWindow[];
  /** The same for the window log in any directory (e.g. an emptyDir of a pod). */
  servingWindowsIn(dir: string): ServingWindow[];
  stop(): Promise<void>;
}

export function defaultRepoRoot(): string {
  const here = fileURLToPath(new URL('../../', import.meta.url));
  // Compiled, this file lives in dist/dev/sim: the repository is one level further up.
  return basename(here.replace(/\/$/, '')) === 'dist' ? join(here, '..') : here;
}

async function ensureCsiDriver(kc: k8s.KubeConfig): Promise<void> {
  const storage = kc.makeApiClient(k8s.StorageV1Api);
  await storage
    .createCSIDriver(
      {
        body: {
          apiVersion: 'storage.k8s.io/v1',
          kind: 'CSIDriver',
          metadata: { name: TEST_CSI_DRIVER },
          spec: { attachRequired: true, podInfoOnMount: false, volumeLifecycleModes: ['Persistent'] },
        },
      },
      withDeadline(10_000),
    )
    .catch((err: unknown) => {
      if (statusOf(err) !== 409) throw err;
    });
}

function nodeCondition(state: SimNodeState): NodeCondition {
  return state === 'stopped' ? 'crashed' : state;
}

export async function startSim(opts: SimOptions): Promise<Sim> {
  const root = opts.root ?? mkdtempSync(join(tmpdir(), 'leasehold-sim-'));
  mkdirSync(join(root, 'volumes'), { recursive: true });
  const write = opts.log ?? ((line: string) => appendFileSync(join(root, 'sim.log'), `${line}\n`));
  const log = (msg: string, extra: Record<string, unknown> = {}) =>
    write(JSON.stringify({ time: new Date().toISOString(), component: 'sim', msg, ...extra }));
  const exits: ContainerExitRecord[] = [];
  const nodes: SimNode[] = [];
  await ensureCsiDriver(opts.cluster.kubeConfig);
  const fencing = new FencingStorage(root, (msg, extra = {}) => log(msg, { component: 'storage', ...extra }));
  const attacher = new SimCsiAttacher(opts.cluster.kubeConfig, log, opts.attachDelayMs ?? 0, fencing);
  attacher.start();
  const resolveEndpoint = (e: PortEndpoint): ResolvedEndpoint => {
    const node = nodes.find((n) => n.name === e.nodeName);
    const worker = nodes.flatMap((n) => n.pods()).find((w) => w.view.podIP === e.address);
    return { nodeState: node?.state ?? 'unknown', hostPort: worker?.ports.get(e.port) };
  };
  const serviceProxy = new ServiceProxy({
    kubeConfig: opts.cluster.kubeConfig,
    resolve: resolveEndpoint,
    log: (msg, extra = {}) => log(msg, { component: 'service-proxy', ...extra }),
  });
  serviceProxy.start();

  const addNode = async (name: string) => {
    const node = await SimNode.start({
      name,
      cluster: opts.cluster,
      simRoot: root,
      repoRoot: opts.repoRoot ?? defaultRepoRoot(),
      ...(opts.leaseRenewMs === undefined ? {} : { leaseRenewMs: opts.leaseRenewMs }),
      ...(opts.statusMs === undefined ? {} : { statusMs: opts.statusMs }),
      recordExit: (exit) => exits.push(exit),
      log,
    });
    node.onStateChange((state) => serviceProxy.nodeChanged(name, nodeCondition(state)));
    nodes.push(node);
    return node;
  };
  const servingWindowsIn = (dir: string): ServingWindow[] =>
    readServingWindows(join(dir, 'serving-windows.jsonl')).map((w) => {
      if (w.stopMonoMs !== undefined) return w;
      const exit = exits.find(
        (e) => e.pod === w.id && e.image.startsWith(SHARE_SERVER_IMAGE) && e.monoMs >= w.startMonoMs,
      );
      if (!exit) return w;
      return {
        ...w,
        stopMonoMs: exit.monoMs,
        reason: `process exit observed by the kubelet (${exit.signal ?? exit.code})`,
      };
    });
  const names = Array.isArray(opts.nodes)
    ? opts.nodes
    : Array.from({ length: opts.nodes ?? 3 }, (_, i) => `sim-${i + 1}`);
  const stop = async () => {
    attacher.stop();
    try {
      await serviceProxy.stop();
      await Promise.all(nodes.map((n) => n.stop()));
    } finally {
      await fencing.stop(); // after the pods: their views unmount once nothing holds them
    }
  };
  try {
    for (const name of names) await addNode(name);
  } catch (err) {
    await stop();
    throw err;
  }

  return {
    root,
    nodes,
    attacher,
    exits,
    node: (name) => {
      const node = nodes.find((n) => n.name === name);
      if (!node)
        throw new Error(
          `no simulated node named ${JSON.stringify(name)} (have ${nodes.map((n) => n.name).join(', ')})`,
        );
      return node;
    },
    addNode,
    serviceProxy,
    serviceAddress: (namespace, service, port, timeoutMs) =>
      serviceProxy.address(namespace, service, port, timeoutMs),
    faults: () => nodes.flatMap((n) => n.faults).sort((a, b) => a.monoMs - b.monoMs),
    volumeDir: (pvName) => join(root, 'volumes', pvName),
    hostPort: (namespace, podName, containerPort) => {
      for (const n of nodes) {
        const port = n.hostPort(namespace, podName, containerPort);
        if (port !== undefined) return port;
      }
      return undefined;
    },
    servingWindows: (pvName) => servingWindowsIn(join(root, 'volumes', pvName)),
    servingWindowsIn,
    stop,
  };
}
