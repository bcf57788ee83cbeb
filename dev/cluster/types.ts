/**
 * The contract of the local control plane (see cluster.ts), shared by tests, the real
 * nodes, the demo and the benchmarks.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { NodeNetwork } from './node-network.ts';

export interface ClusterOptions {
  /** Where certificates, kubeconfig, data and logs go; a fresh temp dir when unset. */
  dir?: string;
  /** kube-controller-manager --node-monitor-period (default 1s for tests). */
  nodeMonitorPeriod?: string;
  /** kube-controller-manager --node-monitor-grace-period (default 8s for tests). */
  nodeMonitorGracePeriod?: string;
  /** kube-controller-manager --attach-detach-reconcile-sync-period (default 1m, the Kubernetes default). */
  attachDetachReconcileSyncPeriod?: string;
  /** Start kube-scheduler (default true). */
  scheduler?: boolean;
  /** Start kube-controller-manager (default true). */
  controllerManager?: boolean;
  /** Extra feature gates for every component, e.g. { NodeOutOfServiceVolumeDetach: true }. */
  featureGates?: Record<string, boolean>;
  /**
   * Ready the control plane for real nodes (dev/node; see node-network.ts): the API
   * server advertises the control plane's address on the node network and sends its
   * `cluster` traffic through leasehold-netns-relay's CONNECT proxy into the nodes'
   * namespaces (the relay comes from dev/node/build.sh). Default false.
   */
  realNodes?: boolean;
  /**
   * Write the API server's audit log (level Metadata, one JSON line per request at
   * ResponseComplete, long-running watches at ResponseStarted) to `<dir>/logs/audit.log`:
   * who sent which request, for benchmarks that count a component's requests. Default
   * false (it costs the API server a write per request).
   */
  audit?: boolean;
  /** Progress lines (component started, ready) go here; silent when unset. */
  onProgress?: (line: string) => void;
}

export interface Cluster {
  /** The temp dir holding certs/, logs/, etcd data and kubeconfig files. */
  readonly dir: string;
  /** https://127.0.0.1:<port> of kube-apiserver. */
  readonly server: string;
  /** Admin (system:masters) kubeconfig written to disk. */
  readonly kubeconfigPath: string;
  /** The admin KubeConfig, loaded from kubeconfigPath. */
  readonly kubeConfig: KubeConfig;
  /** Directory of the component logs (etcd.log, kube-apiserver.log, ...). */
  readonly logDir: string;
  /** Path to the kubectl binary of the same version. */
  readonly kubectl: string;
  /** CA certificate (PEM path) clients must trust to reach the API server. */
  readonly caPath: string;
  /** Set when started with realNodes: where the nodes and the API server meet. */
  readonly nodeNetwork?: NodeNetwork;
  /** Stops kube-apiserver only (etcd and the rest keep running): for outage tests. */
  stopApiServer(): Promise<void>;
  /** Starts kube-apiserver again on the same port and waits for /readyz. */
  startApiServer(): Promise<void>;
  /**
   * A file-level backup of etcd's data (API server and etcd stopped for the copy, then
   * started again: a short outage); returns the backup's path, for restoreEtcd.
   */
  backupEtcd(): Promise<string>;
  /**
   * Restores etcd's data from `backup` (API server and etcd stopped, the data replaced,
   * both started again): every object and resourceVersion goes back to the backup's.
   */
  restoreEtcd(backup: string): Promise<void>;
  /**
   * Writes a kubeconfig at `path` that authenticates with `token` (e.g. a
   * TokenRequest token for a service account) against `server` (defaults to the
   * API server; pass a proxy's address to route through it; the TLS server name
   * stays the API server's).
   */
  writeTokenKubeconfig(path: string, token: string, server?: string): Promise<void>;
  /** Stops every component and removes the temp dir unless keepDir. Idempotent. */
  stop(opts?: { keepDir?: boolean }): Promise<void>;
}
