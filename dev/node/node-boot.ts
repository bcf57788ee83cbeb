/**
 * The boot sequence of a real node (node.ts): the files a node needs before its first
 * boot, its client certificates, and one boot of the machine — PID 1 of new
 * namespaces (namespaces.ts), its `eth0` on the cluster's fabric (fabric.ts), the two
 * relays, containerd, the CSI driver's node part and its registrar when the node has
 * `csi` (dev/csi), the kubelet and kube-proxy —
 * resolving when the Node is Ready and kube-proxy's table carries the `kubernetes`
 * Service. node.ts runs it at start and again as the reboot after a crash (same dirs).
 *
 * Guarantees: every process a boot starts is recorded (in `boot().components`, its pid
 * through `started`) before the boot awaits anything after starting it, and the new
 * namespaces are held (`held`) from the moment PID 1 exists, so node.ts's stop and
 * leftover check find them even when the boot fails half-way. Not guaranteed: any
 * clean-up; a failed boot leaves what it started for node.ts's stop.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { LeaseholdError } from '../../lib/errors.ts';
import { Component, ComponentError } from '../cluster/component.ts';
import { writeKubeconfig } from '../cluster/kubeconfig.ts';
import type { Cluster } from '../cluster/types.ts';
import type { CsiBinaries } from '../csi/binaries.ts';
import {
  DRIVER_NAME,
  driverNodeArgs,
  NOATTACH_DRIVER_NAME,
  nodePluginPaths,
  registrarArgs,
  registrationSocket,
  socketPathProblem,
  type TestbedDriver,
} from '../csi/config.ts';
import type { NodeBinaries } from './binaries.ts';
import { createCgroupRoot } from './cgroups.ts';
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
import { linkContainerdSeed } from './containerd-seed.ts';
import type { NodeLayout } from './layout.ts';
import { holdNamespaces, type NamespaceHold } from './leftovers.ts';
import { childOf, nsenterArgs, sysctlFile, unshareArgs } from './namespaces.ts';

const run = promisify(execFile);

/** The `kubernetes` Service's ClusterIP (the first of dev/cluster's service range). */
const KUBERNETES_SERVICE_IP = '10.0.0.1';

/** One boot of the machine: its namespaces and the processes in and around them. */
export interface Boot {
  readonly components: Component[];
  pid1?: number;
  /** The attach to the fabric, once begun (a stop awaits it before it detaches). */
  onFabric?: Promise<void>;
}

/** What one boot needs from the node (node.ts) that runs it. */
export interface BootContext {
  name: string;
  layout: NodeLayout;
  bins: NodeBinaries;
  /** The control plane's address on the node network, where the API relay listens. */
  apiAddress: string;
  /** The API link's port on host loopback, which the API relay dials. */
  linkPort: number;
  /** The host loopback port of the kubelet relay. */
  kubeletPort: number;
  readyTimeoutMs: number;
  /** The containerd root came from a seed (containerd-seed.ts) holding the pause image. */
  seeded: boolean;
  /** This boot's record; the boot pushes each component and sets pid1. */
  boot: Boot;
  cgroupsMade(): void;
  started(pid: number): void;
  held(hold: NamespaceHold): void;
  /** Puts the machine's network namespace (of PID 1 `pid1`) on the cluster's fabric (fabric.ts). */
  attach(pid1: number): Promise<void>;
  /** The API server's route file for this node (egress proxy). */
  routeFile: string;
  ctr(args: readonly string[]): Promise<string>;
  nodeReady(): Promise<boolean>;
  importImage(tarPath: string): Promise<void>;
  progress(line: string): void;
  /** The CSI driver's node part and registrar to run next to the kubelet (a driver installed on the host). */
  csi?: NodeCsi;
}

/** The testbed's CSI driver on a node (dev/csi): its binaries and the backing dir its volumes are in. */
export interface NodeCsi {
  bins: CsiBinaries;
  backingDir: string;
  /** Also the attach-less second name's node part and registrar (NOATTACH_DRIVER_NAME). */
  noAttachDriver?: boolean;
}

/** Brings the machine up: namespaces, relays, containerd, kubelet, kube-proxy; resolves when Ready. */
export async function bootMachine(
  ctx: BootContext,
  first: boolean,
  beforeKubelet?: () => Promise<void>,
): Promise<void> {
  const {
    name,
    layout,
    bins,
    apiAddress,
    linkPort,
    kubeletPort,
    routeFile,
    ctr,
    nodeReady,
    importImage,
    progress,
  } = ctx;
  const { started, boot } = ctx;
  const t0 = performance.now();
  const components = boot.components;
  createCgroupRoot(layout.cgroupRoot);
  ctx.cgroupsMade();

  const holder = new Component(
    `${name}/namespaces`,
    'unshare',
    unshareArgs(layout, join(bins.dir, 'pause')),
    join(layout.logDir, 'namespaces.log'),
  );
  components.push(holder);
  holder.start();
  if (holder.pid) started(holder.pid);
  let pid1: number | undefined;
  await holder.waitReady(async () => {
    pid1 ??= holder.pid ? childOf(holder.pid) : undefined;
    return pid1 !== undefined && existsSync(layout.readyFile);
  }, 20_000);
  if (pid1 === undefined) throw new ComponentError(holder.name, 'has no PID 1', holder.logPath);
  boot.pid1 = pid1;
  started(pid1);
  ctx.held(holdNamespaces(pid1));
  // On the fabric while the relays and containerd start (the kubelet relay dials the
  // node IP only per connection); awaited before the kubelet binds it. Kept, not left
  // unhandled, until then.
  const onFabric = ctx.attach(pid1);
  boot.onFabric = onFabric;
  onFabric.catch(() => {});
  await writeFile(routeFile, `/proc/${pid1}/ns/net\n`);
  const inNode = (what: string, bin: string, args: string[], env: string[] = []) =>
    new Component(
      `${name}/${what}`,
      'nsenter',
      [...nsenterArgs(pid1 as number), 'env', ...env, bin, ...args],
      join(layout.logDir, `${what}.log`),
    );
  const startRelay = async (what: string, args: string[]) => {
    const relay = new Component(
      `${name}/${what}`,
      join(bins.dir, 'leasehold-netns-relay'),
      args,
      join(layout.logDir, `${what}.log`),
    );
    const logged = existsSync(relay.logPath) ? readFileSync(relay.logPath, 'utf8').length : 0;
    components.push(relay);
    relay.start();
    if (relay.pid) started(relay.pid);
    await relay.waitReady(
      async () => readFileSync(relay.logPath, 'utf8').slice(logged).includes('relay: listening'),
      10_000,
    );
  };
  // Both at once (each is recorded as it starts); allSettled, so that neither is left
  // unhandled when the other fails.
  const relays = await Promise.allSettled([
    startRelay('api-relay', [
      `-listen=${apiAddress}`,
      `-listen-netns=/proc/${pid1}/ns/net`,
      `-dial=127.0.0.1:${linkPort}`,
    ]),
    startRelay('kubelet-relay', [
      `-listen=127.0.0.1:${kubeletPort}`,
      `-dial=${layout.nodeIp}:10250`,
      `-dial-netns=/proc/${pid1}/ns/net`,
    ]),
  ]);
  for (const r of relays) if (r.status === 'rejected') throw r.reason;

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
  // After a reboot the image is still in containerd's root (its disk); a seeded root has it from the start.
  if (first && !ctx.seeded) await importImage(bins.pauseTar);
  await onFabric;
  progress(`${name}: namespaces, fabric, relays and containerd up in ${ms(t0)}`);
  // Started before the kubelet, awaited with it: the plugin watcher finds the socket whenever it comes.
  const csiReady = ctx.csi ? startCsiNodePlugin(ctx.csi, name, layout, inNode, components) : undefined;
  // Handled below, with the kubelet's readiness; not unhandled meanwhile.
  csiReady?.catch(() => {});
  await beforeKubelet?.();

  const kubelet = inNode('kubelet', join(bins.dir, 'kubelet'), kubeletArgs(layout));
  components.push(kubelet);
  kubelet.start();
  // knftables runs the nft CLI.
  const kubeProxy = inNode('kube-proxy', join(bins.dir, 'kube-proxy'), kubeProxyArgs(layout), [
    'PATH=/usr/sbin:/usr/bin:/sbin:/bin',
  ]);
  components.push(kubeProxy);
  kubeProxy.start();
  await Promise.all([
    csiReady,
    kubelet.waitReady(nodeReady, ctx.readyTimeoutMs),
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
  progress(`${name}: Ready ${ms(t0)} after ${first ? 'start' : 'boot'}`);
}

/**
 * Starts the driver's node part and its registrar (with `noAttachDriver` a second pair
 * for the attach-less name), in the node's namespaces like the
 * kubelet, both recorded in `components` before this returns; the promise resolves
 * once the registration socket exists (the registrar made it after the driver
 * answered). The kubelet's plugin watcher finds the socket, at its start or later.
 */
function startCsiNodePlugin(
  csi: NodeCsi,
  name: string,
  layout: NodeLayout,
  inNode: (what: string, bin: string, args: string[]) => Component,
  components: Component[],
): Promise<unknown> {
  const drivers: TestbedDriver[] = csi.noAttachDriver ? [DRIVER_NAME, NOATTACH_DRIVER_NAME] : [DRIVER_NAME];
  return Promise.all(
    drivers.map((driverName) => {
      const paths = nodePluginPaths(layout.kubeletRoot, driverName);
      const registration = registrationSocket(paths, driverName);
      const problem = [paths.socket, registration].map(socketPathProblem).find((p) => p !== undefined);
      if (problem) throw new LeaseholdError('E_NODE_CSI', `${name}'s CSI node plugin: ${problem}`);
      // After a crash the last boot's sockets are still on the node's disk: readiness must
      // see this boot's.
      for (const p of [paths.socket, registration]) rmSync(p, { force: true });
      const suffix = driverName === DRIVER_NAME ? '' : '-noattach';
      const driver = inNode(
        `csi-driver${suffix}`,
        csi.bins.driver,
        driverNodeArgs(paths, name, csi.backingDir, driverName),
      );
      components.push(driver);
      driver.start();
      const registrar = inNode(`csi-registrar${suffix}`, csi.bins.registrar, registrarArgs(paths));
      components.push(registrar);
      registrar.start();
      return Promise.all([
        driver.waitReady(async () => existsSync(paths.socket), 10_000),
        registrar.waitReady(async () => existsSync(registration), 40_000),
      ]);
    }),
  );
}

/**
 * The node's dirs, sysctl views and configs, before its first boot; its containerd root
 * from `containerdSeed` (containerd-seed.ts: the images already in it) when given.
 */
export async function writeNodeFiles(
  layout: NodeLayout,
  bins: NodeBinaries,
  caPath: string,
  containerdSeed?: string,
): Promise<void> {
  if (containerdSeed) await linkContainerdSeed(containerdSeed, layout.containerdRoot);
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
  await writeFile(layout.kubeletConfig, kubeletConfiguration(layout, { caPath: caPath }));
  await writeFile(layout.kubeProxyConfig, kubeProxyConfiguration(layout));
}

/**
 * Issues the kubelet's and kube-proxy's client certificates now (they come while the
 * namespaces and containerd come up); the function returned writes their kubeconfigs.
 * A failure is kept, not left unhandled, until that function is awaited.
 */
export function clientKubeconfigs(
  cluster: Cluster,
  name: string,
  layout: NodeLayout,
  apiAddress: string,
): () => Promise<void> {
  // Issued while the namespaces and containerd come up; a failure is kept, not left
  // unhandled, until it is awaited before the kubelet starts.
  const kept = <T>(p: Promise<T>) =>
    p.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
  const certPromises = Promise.all([
    kept(issueKubeletClientCert(cluster.kubeConfig, name, layout.kubeletCertDir)),
    kept(issueKubeProxyClientCert(cluster.kubeConfig, name, layout.kubeletCertDir)),
  ]);
  return async () => {
    const [kubeletCert, proxyCert] = (await certPromises).map((issued) => {
      if ('error' in issued) throw issued.error;
      return issued.value;
    }) as [{ cert: string; key: string }, { cert: string; key: string }];
    const server = `https://${apiAddress}`;
    await writeKubeconfig(layout.kubeletKubeconfig, server, cluster.caPath, {
      clientCert: kubeletCert.cert,
      clientKey: kubeletCert.key,
    });
    await writeKubeconfig(layout.kubeProxyKubeconfig, server, cluster.caPath, {
      clientCert: proxyCert.cert,
      clientKey: proxyCert.key,
    });
  };
}

const ms = (t0: number) => `${((performance.now() - t0) / 1000).toFixed(1)}s`;
