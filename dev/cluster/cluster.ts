/**
 * A real Kubernetes control plane on loopback for development and tests: etcd,
 * kube-apiserver, kube-scheduler and kube-controller-manager, built from the Go module
 * proxy (dev/kube) and started on free ports with certificates made at start.
 *
 * Guarantees: startCluster() resolves only when every component is ready, or rejects
 * with one line naming the failed component and its log, leaving nothing running.
 * Several clusters can run at once (own temp dir, own ports). stop() is idempotent
 * and leaves no process behind; so does the exit of the Node process that started it.
 *
 * kube-scheduler reaches the API server through a readiness gate (a dev/net/tcp-proxy.ts
 * forwarder), a stand-in for the load balancer of an HA control plane that sends traffic
 * only to a ready API server: stopApiServer() resets its connections and refuses new
 * ones, startApiServer() lets them through once /readyz is ok. Why: a restarted
 * kube-apiserver serves before its RBAC cache is ready, and client-go's reflectors,
 * retrying together on one HTTP/2 connection, land in that window: every watch got 403
 * on every restart looked at (2026-12-01), which grew their backoff towards its 30 s cap
 * (jitter up to 2x): new pods were bound 19-45 s after the API returned (3 restarts after
 * 20 s outages, load 10-12), 2.1-5.5 s behind the gate. NB: kube-controller-manager
 * connects directly and still sees that window (its 403s were seen too, but the
 * attach-detach controller attached within ~2 s of the pods starting without a gate);
 * directly, its traffic stays out of the test process that runs the gate. Every other
 * client (kubelets, managers, agents, tests) talks to it directly too.
 */
import { rmSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { freePorts } from '../net/free-port.ts';
import { startTcpProxy, type TcpProxy } from '../net/tcp-proxy.ts';
import { kubeBinDir } from './binaries.ts';
import { makeCerts } from './certs.ts';
import { Component, ComponentError, httpOk, onAbruptExit } from './component.ts';
import { writeKubeconfig } from './kubeconfig.ts';
import { CONTROL_PLANE_IP, egressSelectorConfig, type NodeNetwork, nodeNetwork } from './node-network.ts';
import type { Cluster, ClusterOptions } from './types.ts';

export type { Cluster, ClusterOptions } from './types.ts';

const SERVICE_CIDR = '10.0.0.0/24';

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  try {
    return await startOnce(opts);
  } catch (err) {
    // Another process may take a chosen port before the component binds it.
    const portTaken =
      (err instanceof ComponentError && err.portTaken) ||
      (err as NodeJS.ErrnoException | undefined)?.code === 'EADDRINUSE'; // the readiness gate's
    if (!portTaken) throw err;
    opts.onProgress?.('a chosen port was taken meanwhile; starting again on new ports');
    return startOnce(opts);
  }
}

/**
 * LEASEHOLD_TIMINGS=1: every progress line also goes to stderr with the seconds since the
 * start began, so a test run shows where a cluster's start goes (docs/testing.md).
 */
export function timedProgress(what: string, onProgress?: (line: string) => void): (line: string) => void {
  if (process.env.LEASEHOLD_TIMINGS !== '1') return onProgress ?? (() => {});
  const t0 = performance.now();
  return (line) => {
    process.stderr.write(`[timings] ${what} +${((performance.now() - t0) / 1000).toFixed(2)} s: ${line}\n`);
    onProgress?.(line);
  };
}

async function startOnce(opts: ClusterOptions): Promise<Cluster> {
  const progress = timedProgress('cluster', opts.onProgress);
  const bin = await kubeBinDir();
  const dir = opts.dir ?? (await mkdtemp(join(tmpdir(), 'leasehold-cluster-')));
  const logDir = join(dir, 'logs');
  const certDir = join(dir, 'certs');
  await mkdir(logDir, { recursive: true });
  await mkdir(certDir, { recursive: true });

  const started: Component[] = [];
  let gate: TcpProxy | undefined;
  // Ctrl-C or a signal: the components are killed at once; the temp dir goes too.
  const forgetDir =
    opts.dir === undefined && process.env.LEASEHOLD_KEEP_CLUSTER !== '1'
      ? onAbruptExit(() => rmSync(dir, { recursive: true, force: true }))
      : () => {};
  // The final stop (its data goes with the dir). NB: the API server stops listening and
  // drains within milliseconds of SIGTERM, then waits about 1 s more before it exits
  // (measured 1.04 s, v1.36.3; most likely Go's 1 s HTTP/2 GOAWAY timeout on its own
  // loopback connections), so here it gets 0.3 s, then SIGKILL. stopApiServer() (the
  // outage tests) keeps the full graceful stop.
  const stopAll = async () => {
    for (const c of [...started].reverse()) await c.stop(c.name === 'kube-apiserver' ? 300 : undefined);
    await gate?.close();
  };
  try {
    const [etcdClient, etcdPeer, apiPort, kcmPort, schedPort, gatePort] = (await freePorts(6)) as [
      number,
      number,
      number,
      number,
      number,
      number,
    ];
    const makeEtcd = () =>
      new Component(
        'etcd',
        join(bin, 'etcd'),
        [
          '--name=leasehold',
          `--data-dir=${join(dir, 'etcd')}`,
          `--listen-client-urls=http://127.0.0.1:${etcdClient}`,
          `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
          `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
          `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
          `--initial-cluster=leasehold=http://127.0.0.1:${etcdPeer}`,
          // Throwaway test data: skip fsync so a loaded 2-core machine stays responsive.
          '--unsafe-no-fsync',
          '--log-level=warn',
        ],
        join(logDir, 'etcd.log'),
      );
    let etcd = makeEtcd();
    started.push(etcd);
    etcd.start();
    // etcd needs no certificate (plain HTTP on loopback): it starts while openssl makes them.
    const [made, etcdUp] = await Promise.allSettled([
      makeCerts(certDir),
      etcd.waitReady(() => httpOk(`http://127.0.0.1:${etcdClient}/health`), 30_000),
    ]);
    if (etcdUp.status === 'rejected') throw etcdUp.reason;
    if (made.status === 'rejected') throw made.reason;
    const certs = made.value;
    progress(`etcd ready on 127.0.0.1:${etcdClient}, certificates made`);
    const ca = await readFile(certs.caCert);
    const server = `https://127.0.0.1:${apiPort}`;
    // kube-scheduler reaches the API server through the readiness gate (see the
    // header); every other client directly.
    const gated = `https://127.0.0.1:${gatePort}`;
    const kubeconfigPath = join(dir, 'admin.kubeconfig');
    await writeKubeconfig(kubeconfigPath, server, certs.caCert, {
      clientCert: certs.admin.cert,
      clientKey: certs.admin.key,
    });
    const kcmKubeconfig = join(dir, 'kube-controller-manager.kubeconfig');
    await writeKubeconfig(kcmKubeconfig, server, certs.caCert, {
      clientCert: certs.controllerManager.cert,
      clientKey: certs.controllerManager.key,
    });
    const schedKubeconfig = join(dir, 'kube-scheduler.kubeconfig');
    await writeKubeconfig(schedKubeconfig, gated, certs.caCert, {
      clientCert: certs.scheduler.cert,
      clientKey: certs.scheduler.key,
    });
    const gates = Object.entries(opts.featureGates ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(',');
    const gateArgs = gates ? [`--feature-gates=${gates}`] : [];

    let nodeNet: NodeNetwork | undefined;
    const nodeArgs: string[] = [];
    if (opts.realNodes) {
      nodeNet = nodeNetwork(dir, apiPort);
      await mkdir(nodeNet.routesDir, { recursive: true });
      const egressConfig = join(dir, 'egress-selector.json');
      await writeFile(egressConfig, egressSelectorConfig(nodeNet));
      // The relay is dev/node's: imported here only when real nodes are asked for.
      const { nodeBinaries } = await import('../node/binaries.ts');
      const proxy = new Component(
        'node-egress-proxy',
        join((await nodeBinaries()).dir, 'leasehold-netns-relay'),
        [`-connect-unix=${nodeNet.egressSocket}`, `-routes=${nodeNet.routesDir}`],
        join(logDir, 'node-egress-proxy.log'),
      );
      started.push(proxy);
      proxy.start();
      const log = proxy.logPath;
      await proxy.waitReady(async () => (await readFile(log, 'utf8')).includes('relay: listening'), 10_000);
      nodeArgs.push(
        `--advertise-address=${CONTROL_PLANE_IP}`,
        `--egress-selector-config-file=${egressConfig}`,
        // The nodes' Hostname addresses resolve nowhere; their InternalIP has a route file.
        '--kubelet-preferred-address-types=InternalIP',
      );
    }

    const auditArgs: string[] = [];
    if (opts.audit) {
      const policy = join(dir, 'audit-policy.yaml');
      await writeFile(
        policy,
        'apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n',
      );
      auditArgs.push(
        `--audit-policy-file=${policy}`,
        `--audit-log-path=${join(logDir, 'audit.log')}`,
        '--audit-log-format=json',
        // Batching would lose the tail at a stop; one write per event is fine for a bench.
        '--audit-log-mode=blocking',
      );
    }
    const apiserverArgs = [
      ...auditArgs,
      `--etcd-servers=http://127.0.0.1:${etcdClient}`,
      `--secure-port=${apiPort}`,
      '--bind-address=127.0.0.1',
      ...(nodeArgs.length > 0 ? nodeArgs : ['--advertise-address=127.0.0.1']),
      `--kubelet-client-certificate=${certs.kubeletClient.cert}`,
      `--kubelet-client-key=${certs.kubeletClient.key}`,
      `--tls-cert-file=${certs.servingCert}`,
      `--tls-private-key-file=${certs.servingKey}`,
      `--client-ca-file=${certs.caCert}`,
      `--service-account-key-file=${certs.saPub}`,
      `--service-account-signing-key-file=${certs.saKey}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      '--authorization-mode=Node,RBAC',
      '--allow-privileged=true',
      '--profiling=false',
      `--cert-dir=${certDir}`,
      // Only to quiet the aggregation layer's "missing requestheader CA" errors.
      `--requestheader-client-ca-file=${certs.caCert}`,
      '--requestheader-allowed-names=leasehold-front-proxy',
      ...gateArgs,
    ];
    let apiserver = new Component(
      'kube-apiserver',
      join(bin, 'kube-apiserver'),
      apiserverArgs,
      join(logDir, 'kube-apiserver.log'),
    );
    started.push(apiserver);
    const startApiServer = async () => {
      apiserver.start();
      await apiserver.waitReady(() => httpOk(`${server}/readyz`, { ca }), 90_000);
      gate?.setMode('pass');
    };
    // Closed until the API server is ready; listening first, so a taken port fails early.
    gate = await startTcpProxy({ target: { host: '127.0.0.1', port: apiPort }, port: gatePort });
    gate.setMode('close');
    await startApiServer();
    progress(`kube-apiserver ready on ${server}`);

    // The scheduler and the controller manager serve the API server's certificate (it
    // names 127.0.0.1), so their health checks verify it is ours that answers: a port
    // taken meanwhile by another cluster's component answered /healthz to an insecure
    // check while ours had failed to bind (CI, 2026-12-01), and the start waited 60 s.
    const servingCertArgs = [
      `--tls-cert-file=${certs.servingCert}`,
      `--tls-private-key-file=${certs.servingKey}`,
    ];
    const waits: Promise<void>[] = [];
    if (opts.scheduler !== false) {
      const scheduler = new Component(
        'kube-scheduler',
        join(bin, 'kube-scheduler'),
        [
          `--kubeconfig=${schedKubeconfig}`,
          `--authentication-kubeconfig=${schedKubeconfig}`,
          `--authorization-kubeconfig=${schedKubeconfig}`,
          `--secure-port=${schedPort}`,
          '--bind-address=127.0.0.1',
          ...servingCertArgs,
          '--leader-elect=false',
          ...gateArgs,
        ],
        join(logDir, 'kube-scheduler.log'),
      );
      started.push(scheduler);
      scheduler.start();
      waits.push(scheduler.waitReady(() => httpOk(`https://127.0.0.1:${schedPort}/readyz`, { ca }), 60_000));
    }
    if (opts.controllerManager !== false) {
      const kcm = new Component(
        'kube-controller-manager',
        join(bin, 'kube-controller-manager'),
        [
          `--kubeconfig=${kcmKubeconfig}`,
          `--authentication-kubeconfig=${kcmKubeconfig}`,
          `--authorization-kubeconfig=${kcmKubeconfig}`,
          `--secure-port=${kcmPort}`,
          '--bind-address=127.0.0.1',
          ...servingCertArgs,
          '--leader-elect=false',
          // Every on-by-default controller, among them node-lifecycle, attach-detach,
          // endpointslice, garbage-collector and serviceaccount-token.
          '--controllers=*',
          '--use-service-account-credentials=true',
          // At start, with a credential per controller, it gets or creates a ServiceAccount
          // and a token for each of some 40 controllers through one client limited to its
          // default 20 requests/s (burst 30): the default ServiceAccount (below) came 4.7-5 s
          // after it was ready (2026-12-01, load 1-2), 0.3-1.5 s with these. Past the start
          // each controller's client is limited alike, and the testbed's traffic stays far
          // below either rate.
          '--kube-api-qps=100',
          '--kube-api-burst=200',
          `--service-account-private-key-file=${certs.saKey}`,
          `--root-ca-file=${certs.caCert}`,
          `--cluster-signing-cert-file=${certs.caCert}`,
          `--cluster-signing-key-file=${certs.caKey}`,
          `--service-cluster-ip-range=${SERVICE_CIDR}`,
          `--node-monitor-period=${opts.nodeMonitorPeriod ?? '1s'}`,
          `--node-monitor-grace-period=${opts.nodeMonitorGracePeriod ?? '8s'}`,
          `--attach-detach-reconcile-sync-period=${opts.attachDetachReconcileSyncPeriod ?? '1m'}`,
          // Its default, /usr/libexec/kubernetes/kubelet-plugins/volume/exec, is created on
          // the host at start: the testbed leaves the host alone.
          `--flex-volume-plugin-dir=${join(dir, 'flexvolume')}`,
          ...gateArgs,
        ],
        join(logDir, 'kube-controller-manager.log'),
      );
      started.push(kcm);
      kcm.start();
      waits.push(kcm.waitReady(() => httpOk(`https://127.0.0.1:${kcmPort}/healthz`, { ca }), 60_000));
    }
    await Promise.all(waits);
    progress('kube-scheduler and kube-controller-manager ready');

    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(kubeconfigPath);
    if (opts.controllerManager !== false) {
      // Pods need the namespace's default ServiceAccount, which the controller
      // manager creates a moment after it is ready.
      await waitFor(
        'the default ServiceAccount',
        started,
        join(logDir, 'kube-controller-manager.log'),
        async () => {
          const core = kubeConfig.makeApiClient(CoreV1Api);
          await core.readNamespacedServiceAccount({ namespace: 'default', name: 'default' });
          return true;
        },
      );
      progress('the default ServiceAccount exists');
    }
    let stopped = false;
    // A file-level backup or restore of etcd, as an operator does it: the API server
    // stopped first, then etcd; etcd started on the data, then a fresh API server (its
    // watch cache must not outlive the store it mirrored).
    let backups = 0;
    const offline = async (work: () => Promise<void>) => {
      gate?.setMode('close');
      await apiserver.stop();
      await etcd.stop();
      await work();
      const nextEtcd = makeEtcd();
      started[started.indexOf(etcd)] = nextEtcd;
      etcd = nextEtcd;
      etcd.start();
      await etcd.waitReady(() => httpOk(`http://127.0.0.1:${etcdClient}/health`), 30_000);
      const next = new Component(
        'kube-apiserver',
        join(bin, 'kube-apiserver'),
        apiserverArgs,
        join(logDir, 'kube-apiserver.log'),
      );
      started[started.indexOf(apiserver)] = next;
      apiserver = next;
      await startApiServer();
    };
    return {
      dir,
      server,
      kubeconfigPath,
      kubeConfig,
      logDir,
      kubectl: join(bin, 'kubectl'),
      caPath: certs.caCert,
      ...(nodeNet ? { nodeNetwork: nodeNet } : {}),
      stopApiServer: async () => {
        gate?.setMode('close');
        await apiserver.stop();
      },
      startApiServer: async () => {
        const next = new Component(
          'kube-apiserver',
          join(bin, 'kube-apiserver'),
          apiserverArgs,
          join(logDir, 'kube-apiserver.log'),
        );
        started[started.indexOf(apiserver)] = next;
        apiserver = next;
        await startApiServer();
      },
      backupEtcd: async () => {
        backups += 1;
        const backup = join(dir, `etcd-backup-${backups}`);
        await offline(async () => {
          await cp(join(dir, 'etcd'), backup, { recursive: true });
        });
        return backup;
      },
      restoreEtcd: async (backup) => {
        await offline(async () => {
          await rm(join(dir, 'etcd'), { recursive: true, force: true });
          await cp(backup, join(dir, 'etcd'), { recursive: true });
        });
      },
      writeTokenKubeconfig: (path, token, via) =>
        writeKubeconfig(path, via ?? server, certs.caCert, { token }),
      stop: async (stopOpts) => {
        if (stopped) return;
        stopped = true;
        await stopAll();
        forgetDir();
        if (!stopOpts?.keepDir && opts.dir === undefined) await rm(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await stopAll();
    forgetDir();
    if (opts.dir === undefined) await rm(dir, { recursive: true, force: true }).catch(() => {});
    throw err;
  }
}

async function waitFor(
  what: string,
  components: readonly Component[],
  logPath: string,
  check: () => Promise<boolean>,
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    // A component that died after it was ready (or never was ours) ends the wait now.
    for (const c of components) c.throwIfExited();
    if (await check().catch(() => false)) return;
    await sleep(200);
  }
  throw new ComponentError(
    'kube-controller-manager',
    `did not create ${what} within ${timeoutMs / 1000}s`,
    logPath,
  );
}
