/**
 * One simulated node on the real control plane: its Node, CSINode, heartbeats and
 * kubelet, plus the fault switches the end-to-end tests drive.
 *
 * Network: the node's pods reach the API server only through the node's own TCP
 * proxy (their kubeconfig's server). The kubelet and heartbeats run inside the
 * simulator's process and talk to the API server directly, but every fault switch
 * pauses them, so a partitioned node reports nothing either.
 *
 * Faults (each from `running`; heal() undoes any of them):
 *   crash()      SIGKILL every pod process, stop heartbeats and the kubelet: the machine
 *                vanished. heal() = the machine boots again (see Kubelet: pods that lost
 *                their processes are marked Failed or restarted).
 *   freeze()     SIGSTOP every pod process, stop heartbeats and kubelet (its probes too). heal(): SIGCONT.
 *   partition(m) proxy mode `close` (connections reset) or `stall` (bytes held), and
 *                heartbeats and kubelet stop. heal(): proxy `pass`, kubelet re-lists.
 * Not a fault (the node stays `running`, any fault may follow):
 *   holdNewPods() the kubelet stops watching: pods bound to the node from now on never
 *                start (and no pod status is written), while heartbeats go on and running
 *                pods run (and are probed): a node whose pod starts are slow, made
 *                deterministic. releaseNewPods(): the kubelet re-lists and starts them.
 *                Not modelled: what makes a real kubelet slow (image pulls, mounts).
 */

import { randomUUID } from 'node:crypto';
import { monotonicMs } from '../../../lib/clock.ts';
import { k8s, statusOf, withDeadline } from '../../../lib/kube-client.ts';
import type { Cluster } from '../../cluster/types.ts';
import { type ProxyMode, startTcpProxy, type TcpProxy } from '../../net/tcp-proxy.ts';
import { Kubelet } from '../kubelet/kubelet.ts';
import { TEST_CSI_DRIVER } from '../kubelet/pod-volumes.ts';
import type { ContainerExitRecord, PodWorker } from '../kubelet/pod-worker.ts';
import { NodeHeartbeat } from './node-heartbeat.ts';
import { csiNodeObject, nodeObject } from './node-object.ts';

export type SimNodeState = 'running' | 'crashed' | 'frozen' | 'partitioned' | 'stopped';

export interface SimNodeOptions {
  name: string;
  cluster: Cluster;
  simRoot: string;
  repoRoot: string;
  /** Node lease renewal period (default 2 s; the real kubelet's is 10 s). */
  leaseRenewMs?: number;
  /** Node status post period (default 10 s, the kubelet's nodeStatusUpdateFrequency). */
  statusMs?: number;
  leaseDurationSeconds?: number;
  recordExit(exit: ContainerExitRecord): void;
  log(msg: string, extra?: Record<string, unknown>): void;
}

export interface FaultRecord {
  node: string;
  fault: 'crash' | 'freeze' | 'partition' | 'heal';
  detail?: string;
  monoMs: number;
  wall: Date;
}

export class SimNode {
  private nodeState: SimNodeState = 'running';
  /** Env added to every container this node starts from now on (see setContainerEnv). */
  containerEnv: Readonly<Record<string, string>> = {};
  readonly faults: FaultRecord[] = [];
  private readonly stateListeners: Array<(state: SimNodeState) => void> = [];

  private constructor(
    readonly name: string,
    readonly proxy: TcpProxy,
    private readonly kubelet: Kubelet,
    private readonly heartbeat: NodeHeartbeat,
    private readonly log: SimNodeOptions['log'],
  ) {}

  static async start(opts: SimNodeOptions): Promise<SimNode> {
    const kc = opts.cluster.kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const log = (msg: string, extra: Record<string, unknown> = {}) =>
      opts.log(msg, { node: opts.name, ...extra });
    let node: k8s.V1Node;
    try {
      node = await core.createNode(
        { body: nodeObject(opts.name, new Date(), randomUUID()) },
        withDeadline(10_000),
      );
    } catch (err) {
      if (statusOf(err) !== 409) throw err;
      node = await core.readNode({ name: opts.name }, withDeadline(10_000));
    }
    const nodeUid = node.metadata?.uid ?? '';
    const storage = kc.makeApiClient(k8s.StorageV1Api);
    await storage
      .createCSINode({ body: csiNodeObject(opts.name, nodeUid, TEST_CSI_DRIVER) }, withDeadline(10_000))
      .catch((err: unknown) => {
        if (statusOf(err) !== 409) throw err;
      });
    const apiUrl = new URL(opts.cluster.server);
    const proxy = await startTcpProxy({ target: { host: apiUrl.hostname, port: Number(apiUrl.port) } });
    const podServer = `https://127.0.0.1:${proxy.port}`;
    let heartbeat: NodeHeartbeat | undefined;
    const kubelet = new Kubelet({
      nodeName: opts.name,
      simRoot: opts.simRoot,
      repoRoot: opts.repoRoot,
      kubeConfig: kc,
      writeTokenKubeconfig: (path, token) => opts.cluster.writeTokenKubeconfig(path, token, podServer),
      recordExit: opts.recordExit,
      nodeEnv: () => simNode.containerEnv,
      log,
      onVolumesChanged: () => void heartbeat?.postStatus(),
    });
    heartbeat = new NodeHeartbeat({
      kubeConfig: kc,
      nodeName: opts.name,
      nodeUid,
      leaseRenewMs: opts.leaseRenewMs ?? 2_000,
      leaseDurationSeconds: opts.leaseDurationSeconds ?? 40,
      statusMs: opts.statusMs ?? 10_000,
      volumesInUse: () => kubelet.volumesInUse(),
      log,
    });
    const simNode = new SimNode(opts.name, proxy, kubelet, heartbeat, log);
    heartbeat.resume();
    kubelet.resume();
    log('node started', { proxyPort: proxy.port });
    return simNode;
  }

  /**
   * Env for every container this node starts from now on, e.g. fakeClockEnv('+10m')
   * to run its pods with a skewed clock. Running containers keep theirs.
   */
  setContainerEnv(env: Readonly<Record<string, string>>): void {
    this.containerEnv = { ...env };
    this.log('container env set', { names: Object.keys(env) });
  }

  get state(): SimNodeState {
    return this.nodeState;
  }

  /**
   * Calls `listener` on every state change, synchronously and before the change touches
   * any process (a crash notifies before its SIGKILLs), so the service proxy silences
   * this node's connections before their sockets can close.
   */
  onStateChange(listener: (state: SimNodeState) => void): void {
    this.stateListeners.push(listener);
  }

  private setState(state: SimNodeState): void {
    this.nodeState = state;
    for (const listener of this.stateListeners) listener(state);
  }

  /** The pods this node's kubelet is running (or has run and not yet forgotten). */
  pods(): PodWorker[] {
    return this.kubelet.pods();
  }

  /** Host port of a pod's containerPort (every pod of the sim shares 127.0.0.1). */
  hostPort(namespace: string, podName: string, containerPort: number): number | undefined {
    return this.pods()
      .find((w) => w.key === `${namespace}/${podName}`)
      ?.ports.get(containerPort);
  }

  private record(fault: FaultRecord['fault'], detail?: string): void {
    this.faults.push({
      node: this.name,
      fault,
      ...(detail ? { detail } : {}),
      monoMs: monotonicMs(),
      wall: new Date(),
    });
    this.log(`fault: ${fault}`, detail ? { detail } : {});
  }

  private requireRunning(fault: string): void {
    if (this.nodeState !== 'running') {
      throw new Error(`node ${this.name}: cannot ${fault} while ${this.nodeState}; heal() first`);
    }
  }

  async crash(): Promise<void> {
    this.requireRunning('crash');
    this.setState('crashed');
    // NB: recorded before the processes are reaped: the fault time is when the machine
    // died, and timelines measured from it must not start late by the reaping time.
    this.record('crash');
    this.heartbeat.pause();
    await this.kubelet.crash();
  }

  holdNewPods(): void {
    this.requireRunning('hold new pods');
    this.kubelet.pause();
    this.log('new pods held (kubelet not watching; heartbeats go on)');
  }

  releaseNewPods(): void {
    if (this.nodeState !== 'running') return;
    this.kubelet.resume();
    this.log('new pods released');
  }

  freeze(): void {
    this.requireRunning('freeze');
    this.setState('frozen');
    this.heartbeat.pause();
    this.kubelet.pause();
    this.kubelet.freeze();
    this.record('freeze');
  }

  partition(mode: Exclude<ProxyMode, 'pass'> = 'close'): void {
    this.requireRunning('partition');
    this.setState('partitioned');
    this.heartbeat.pause();
    this.kubelet.pause();
    this.proxy.setMode(mode);
    this.record('partition', mode);
  }

  heal(): void {
    if (this.nodeState === 'running' || this.nodeState === 'stopped') return;
    if (this.nodeState === 'frozen') this.kubelet.thaw();
    this.proxy.setMode('pass');
    this.setState('running');
    this.heartbeat.resume();
    this.kubelet.resume();
    this.record('heal');
  }

  /** Stops everything of this node (its processes die); the Node object stays. */
  async stop(): Promise<void> {
    if (this.nodeState === 'stopped') return;
    if (this.nodeState === 'frozen') this.kubelet.thaw();
    this.setState('stopped');
    this.heartbeat.pause();
    await this.kubelet.stop();
    await this.proxy.close();
  }
}
