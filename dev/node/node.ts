/**
 * One real Kubernetes node for the testbed: the real kubelet and containerd (with runc
 * and the bridge CNI network) in the node's own pid, network and mount namespaces
 * (namespaces.ts), registered with the project's real control plane (dev/cluster).
 *
 *   const node = await startRealNode(cluster, { name: 'node-1' });
 *   await node.stop();   // throws NodeLeftoverError if anything is left on the host
 *
 * How the node and the API server reach each other with no address outside loopback
 * and the node's namespace (dev/cluster/node-network.ts; the cluster must be started
 * with `realNodes: true`): leasehold-netns-relay listens on the control plane's address
 * 10.201.0.254:<API port> inside the node's network namespace and forwards to the API
 * server on the host's loopback; the kubelet's and kube-proxy's kubeconfigs name that
 * address, and so do the `kubernetes` Service's Endpoints, so a pod's in-cluster call
 * (10.0.0.1:443, kube-proxy's nftables DNAT) lands there too. The API server reaches
 * this kubelet through its egress CONNECT proxy, which dials the node IP in this
 * node's namespace (the node writes the route file at start, removes it at stop):
 * `kubectl logs`, exec and port-forward work. A second relay makes the kubelet's API
 * reachable at `kubeletUrl` on the host's loopback for tests.
 *
 * Guarantees: startRealNode resolves when the Node object is Ready, or rejects with
 * the failing part and its log, leaving nothing behind. stop() is idempotent; it kills
 * every process of the node (kubelet, kube-proxy, containerd, shims, containers, the relays),
 * removes its cgroups and directory, and then runs the leftover check (leftovers.ts).
 * On SIGINT/SIGTERM of this process the same happens synchronously; on SIGKILL the
 * kernel still ends every process, mount, namespace and interface (pdeathsig and the
 * pid namespace), and the empty cgroup directories and the node's directory that stay
 * are swept by the next startRealNode (stale-nodes.ts).
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CoreV1Api } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { Component, ComponentError, onAbruptExit } from '../cluster/component.ts';
import { writeKubeconfig } from '../cluster/kubeconfig.ts';
import type { Cluster } from '../cluster/types.ts';
import { freePort } from '../net/free-port.ts';
import { nodeBinaries } from './binaries.ts';
import { createCgroupRoot, removeCgroupRoot } from './cgroups.ts';
import { issueKubeletClientCert, issueKubeProxyClientCert } from './client-cert.ts';
import {
  cniConfList,
  containerdConfig,
  KUBELET_SYSCTLS,
  kubeletArgs,
  kubeletConfiguration,
  kubeProxyArgs,
  kubeProxyConfiguration,
} from './config.ts';
import { type NodeLayout, nodeLayout } from './layout.ts';
import {
  describeLeftovers,
  findLeftovers,
  hostSnapshot,
  type Leftover,
  type NodeIdentity,
  namespacesOf,
} from './leftovers.ts';
import { childOf, nsenterArgs, sysctlFile, unshareArgs } from './namespaces.ts';
import { NODE_DIR_PREFIX, OWNER_FILE, ownerText, processStart, sweepStaleNodes } from './stale-nodes.ts';

const run = promisify(execFile);

/** The `kubernetes` Service's ClusterIP (the first of dev/cluster's service range). */
const KUBERNETES_SERVICE_IP = '10.0.0.1';

export interface RealNodeOptions {
  /** The Node object's name (a DNS label). */
  name: string;
  /** 1..250: picks the node IP (10.201.0.<index+1>) and pod range (10.244.<index>.0/24). Default 1. */
  index?: number;
  /** How long to wait for the Node to be Ready (default 120 s). */
  readyTimeoutMs?: number;
  onProgress?: (line: string) => void;
}

export interface RealNode {
  readonly name: string;
  readonly layout: NodeLayout;
  /** https://127.0.0.1:<port>: the kubelet's API through the relay (x509 with the cluster CA, webhook authz). */
  readonly kubeletUrl: string;
  /** Runs ctr against the node's containerd (namespace k8s.io); resolves with stdout. */
  ctr(args: readonly string[]): Promise<string>;
  /** Imports an OCI/Docker image tarball into the node's containerd for the kubelet to use. */
  importImage(tarPath: string): Promise<void>;
  /** What stop would find if it ran the leftover check now. */
  leftovers(): Leftover[];
  /** Stops everything, removes what the node made, then fails if anything is left. */
  stop(): Promise<void>;
}

export class NodeLeftoverError extends LeaseholdError {
  readonly leftovers: readonly Leftover[];
  constructor(node: string, leftovers: readonly Leftover[]) {
    super('E_NODE_LEFTOVERS', describeLeftovers(node, leftovers));
    this.leftovers = leftovers;
  }
}

export async function startRealNode(cluster: Cluster, opts: RealNodeOptions): Promise<RealNode> {
  const progress = opts.onProgress ?? (() => {});
  const net = cluster.nodeNetwork;
  if (!net)
    throw new LeaseholdError(
      'E_NODE_CLUSTER',
      `real node ${opts.name} needs a control plane started with realNodes: true (its API server must advertise the node network's address and reach kubelets through the egress proxy)`,
    );
  const bins = await nodeBinaries();
  const swept = sweepStaleNodes();
  if (swept.removed.length > 0) progress(`removed what killed runs left: ${swept.removed.join(', ')}`);
  if (swept.problems.length > 0)
    throw new LeaseholdError(
      'E_NODE_STALE',
      `a killed run left real-node cgroups that cannot be removed:\n  - ${swept.problems.join('\n  - ')}`,
    );
  const dir = await mkdtemp(join(tmpdir(), NODE_DIR_PREFIX));
  await writeFile(
    join(dir, OWNER_FILE),
    ownerText({ pid: process.pid, start: processStart(process.pid) ?? '?' }),
  );
  const layout = nodeLayout(dir, opts.name, opts.index ?? 1);
  const identity: { namespaces: string[]; pids: number[] } = { namespaces: [], pids: [] };
  const node: NodeIdentity = {
    dir,
    cgroupRoot: layout.cgroupRoot,
    get namespaces() {
      return identity.namespaces;
    },
    get pids() {
      return identity.pids;
    },
  };
  const components: Component[] = [];
  let cgroupsMade = false;
  const routeFile = join(net.routesDir, layout.nodeIp);
  const killNow = () => {
    rmSync(routeFile, { force: true });
    for (const pid of identity.pids) signal(pid, 'SIGKILL');
    waitGoneSync(node, 10_000);
    if (cgroupsMade) removeCgroupRoot(layout.cgroupRoot);
    rmSync(dir, { recursive: true, force: true });
  };
  const forgetAbrupt = onAbruptExit(killNow);

  const apiPort = Number(new URL(cluster.server).port);
  const ctrArgs = ['--address', layout.containerdSocket, '--namespace', 'k8s.io'];
  const ctr = async (args: readonly string[]) =>
    (await run(join(bins.dir, 'ctr'), [...ctrArgs, ...args], { timeout: 120_000, maxBuffer: 16 << 20 }))
      .stdout;

  let stopped = false;
  let kubeletUrl = '';
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    forgetAbrupt();
    await rm(routeFile, { force: true });
    // The kubelet first, so it does not restart what goes next; then PID 1 of the
    // node's pid namespace takes containerd, the shims and the containers with it.
    for (const c of [...components].reverse()) await c.stop(c.name.endsWith('kubelet') ? 5_000 : 1_000);
    for (const pid of identity.pids) signal(pid, 'SIGKILL');
    await waitGone(node, 15_000);
    const cgroupProblems = cgroupsMade ? removeCgroupRoot(layout.cgroupRoot) : [];
    const left = findLeftovers(node, hostSnapshot(node));
    if (left.length > 0 || cgroupProblems.length > 0) {
      throw new NodeLeftoverError(opts.name, left);
    }
    if (process.env.LEASEHOLD_KEEP_NODE !== '1') await rm(dir, { recursive: true, force: true });
  };

  try {
    const t0 = performance.now();
    await Promise.all(
      [
        layout.logDir,
        layout.containerdRoot,
        layout.containerdState,
        layout.kubeletRoot,
        layout.kubeletCertDir,
        layout.cniConfDir,
        layout.cniDataDir,
        layout.sysctlDir,
        ...Object.values(layout.hostDirs),
      ].map((d) => mkdir(d, { recursive: true })),
    );
    for (const [key, value] of Object.entries(KUBELET_SYSCTLS))
      await writeFile(join(layout.sysctlDir, sysctlFile(key)), `${value}\n`);
    await writeFile(layout.containerdConfig, containerdConfig(layout, bins.dir, bins.pauseImage));
    await writeFile(join(layout.cniConfDir, '10-leasehold.conflist'), cniConfList(layout));
    await writeFile(layout.kubeletConfig, kubeletConfiguration(layout, { caPath: cluster.caPath }));
    await writeFile(layout.kubeProxyConfig, kubeProxyConfiguration(layout));
    // Issued while the namespaces and containerd come up; a failure is kept, not left
    // unhandled, until it is awaited below.
    const kept = <T>(p: Promise<T>) =>
      p.then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
    const certPromises = Promise.all([
      kept(issueKubeletClientCert(cluster.kubeConfig, opts.name, layout.kubeletCertDir)),
      kept(issueKubeProxyClientCert(cluster.kubeConfig, opts.name, layout.kubeletCertDir)),
    ]);

    createCgroupRoot(layout.cgroupRoot);
    cgroupsMade = true;

    const holder = new Component(
      `${opts.name}/namespaces`,
      'unshare',
      unshareArgs(layout, join(bins.dir, 'pause')),
      join(layout.logDir, 'namespaces.log'),
    );
    components.push(holder);
    holder.start();
    if (holder.pid) identity.pids.push(holder.pid);
    let pid1: number | undefined;
    await holder.waitReady(async () => {
      pid1 ??= holder.pid ? childOf(holder.pid) : undefined;
      return pid1 !== undefined && existsSync(layout.readyFile);
    }, 20_000);
    if (pid1 === undefined) throw new ComponentError(holder.name, 'has no PID 1', holder.logPath);
    identity.pids.push(pid1);
    identity.namespaces.push(...namespacesOf(pid1));
    await writeFile(routeFile, `/proc/${pid1}/ns/net\n`);
    const inNode = (what: string, bin: string, args: string[], env: string[] = []) =>
      new Component(
        `${opts.name}/${what}`,
        'nsenter',
        [...nsenterArgs(pid1 as number), 'env', ...env, bin, ...args],
        join(layout.logDir, `${what}.log`),
      );

    const relay = new Component(
      `${opts.name}/api-relay`,
      join(bins.dir, 'leasehold-netns-relay'),
      [`-listen=${net.apiAddress}`, `-listen-netns=/proc/${pid1}/ns/net`, `-dial=127.0.0.1:${apiPort}`],
      join(layout.logDir, 'api-relay.log'),
    );
    components.push(relay);
    relay.start();
    if (relay.pid) identity.pids.push(relay.pid);
    await relay.waitReady(
      async () => readFileSync(relay.logPath, 'utf8').includes('relay: listening'),
      10_000,
    );

    const kubeletPort = await freePort();
    kubeletUrl = `https://127.0.0.1:${kubeletPort}`;
    const kubeletRelay = new Component(
      `${opts.name}/kubelet-relay`,
      join(bins.dir, 'leasehold-netns-relay'),
      [
        `-listen=127.0.0.1:${kubeletPort}`,
        `-dial=${layout.nodeIp}:10250`,
        `-dial-netns=/proc/${pid1}/ns/net`,
      ],
      join(layout.logDir, 'kubelet-relay.log'),
    );
    components.push(kubeletRelay);
    kubeletRelay.start();
    if (kubeletRelay.pid) identity.pids.push(kubeletRelay.pid);
    await kubeletRelay.waitReady(
      async () => readFileSync(kubeletRelay.logPath, 'utf8').includes('relay: listening'),
      10_000,
    );

    const containerd = inNode(
      'containerd',
      join(bins.dir, 'containerd'),
      ['--config', layout.containerdConfig],
      [`PATH=${bins.dir}:/usr/sbin:/usr/bin:/sbin:/bin`],
    );
    components.push(containerd);
    containerd.start();
    await containerd.waitReady(async () => {
      await ctr(['version']);
      return true;
    }, 30_000);
    await importImage(bins.pauseTar);
    progress(`${opts.name}: namespaces, relay and containerd up in ${ms(t0)}; pause image imported`);

    const [kubeletCert, proxyCert] = (await certPromises).map((issued) => {
      if ('error' in issued) throw issued.error;
      return issued.value;
    }) as [{ cert: string; key: string }, { cert: string; key: string }];
    const server = `https://${net.apiAddress}`;
    await writeKubeconfig(layout.kubeletKubeconfig, server, cluster.caPath, {
      clientCert: kubeletCert.cert,
      clientKey: kubeletCert.key,
    });
    await writeKubeconfig(layout.kubeProxyKubeconfig, server, cluster.caPath, {
      clientCert: proxyCert.cert,
      clientKey: proxyCert.key,
    });
    const kubelet = inNode('kubelet', join(bins.dir, 'kubelet'), kubeletArgs(layout));
    components.push(kubelet);
    kubelet.start();
    // knftables runs the nft CLI.
    const kubeProxy = inNode('kube-proxy', join(bins.dir, 'kube-proxy'), kubeProxyArgs(layout), [
      'PATH=/usr/sbin:/usr/bin:/sbin:/bin',
    ]);
    components.push(kubeProxy);
    kubeProxy.start();
    const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    await Promise.all([
      kubelet.waitReady(async () => {
        const n = await core.readNode({ name: opts.name });
        return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
      }, opts.readyTimeoutMs ?? 120_000),
      // Ready once its table carries the `kubernetes` Service (pods may call the API).
      kubeProxy.waitReady(async () => {
        const { stdout } = await run('nsenter', [
          '--target',
          String(pid1),
          '--net',
          '--',
          'nft',
          'list',
          'map',
          'ip',
          'kube-proxy',
          'service-ips',
        ]);
        return stdout.includes(`${KUBERNETES_SERVICE_IP} . tcp . 443`);
      }, 60_000),
    ]);
    progress(`${opts.name}: Ready ${ms(t0)} after start`);
  } catch (err) {
    await stop().catch((stopErr) => {
      throw new LeaseholdError('E_NODE_START', `real node ${opts.name} failed to start and to clean up`, {
        cause: new AggregateError([err, stopErr]),
      });
    });
    throw err;
  }

  async function importImage(tarPath: string): Promise<void> {
    try {
      await ctr(['images', 'import', '--platform', 'linux/amd64', tarPath]);
    } catch (err) {
      throw new LeaseholdError('E_NODE_IMAGE', `importing ${tarPath} into ${opts.name}'s containerd failed`, {
        cause: err,
      });
    }
  }

  return {
    name: opts.name,
    layout,
    kubeletUrl,
    ctr,
    importImage,
    leftovers: () => findLeftovers(node, hostSnapshot(node)),
    stop,
  };
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

function processesLeft(node: NodeIdentity): boolean {
  return findLeftovers(node, { ...hostSnapshot(node), cgroups: [], mountinfo: '' }).length > 0;
}

async function waitGone(node: NodeIdentity, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (processesLeft(node) && performance.now() < deadline) await sleep(100);
}

function waitGoneSync(node: NodeIdentity, timeoutMs: number): void {
  const deadline = performance.now() + timeoutMs;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  while (processesLeft(node) && performance.now() < deadline) Atomics.wait(pause, 0, 0, 50);
}

const ms = (t0: number) => `${((performance.now() - t0) / 1000).toFixed(1)}s`;
