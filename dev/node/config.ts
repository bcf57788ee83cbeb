/**
 * The configuration files of one real node, rendered from its layout: containerd's
 * config (CRI with runc, overlayfs and the bridge CNI network), the kubelet's
 * KubeletConfiguration, kube-proxy's KubeProxyConfiguration, the CNI network list and
 * the sysctl views. Pure functions:
 * the values that keep the node off the host's settings are all here, in one place.
 *
 * Guarantees: nothing rendered points outside the node's directory except the binaries
 * and the cluster CA; containerd's NRI, TCP, tracing and the snapshotters this kernel
 * or build lacks are off. Not guaranteed: that the host kernel has overlayfs and
 * bridge (checked at run time by containerd and the CNI plugin).
 */
import { join } from 'node:path';
import { CLUSTER_POD_CIDR } from './fabric-plan.ts';
import type { NodeLayout } from './layout.ts';

/**
 * What kubelet 1.36 wants these sysctls to be. With protectKernelDefaults it only
 * checks them (and refuses to start on a mismatch) instead of writing them; the node
 * sees these values through files bind-mounted over /proc/sys/<key> in its own mount
 * namespace, so the host's values are never read by the kubelet nor written.
 */
export const KUBELET_SYSCTLS: Readonly<Record<string, string>> = {
  'vm/overcommit_memory': '1',
  'vm/panic_on_oom': '0',
  'kernel/panic': '10',
  'kernel/panic_on_oops': '1',
  'kernel/keys/root_maxkeys': '1000000',
  'kernel/keys/root_maxbytes': '25000000',
};

const q = (s: string) => `'${s.replace(/'/g, '')}'`;

/** What containerd leaves out on a node: NRI, tracing, the snapshotters this kernel or build lacks. */
export const CONTAINERD_DISABLED_PLUGINS: readonly string[] = [
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing',
];

/** A TOML array's lines for `plugins`. */
export const disabledPlugins = (plugins: readonly string[]) => plugins.map((p) => `  ${q(p)},`).join('\n');

export function containerdConfig(layout: NodeLayout, binDir: string, pauseImage: string): string {
  const rt = "plugins.'io.containerd.cri.v1.runtime'";
  const img = "plugins.'io.containerd.cri.v1.images'";
  return `version = 3
root = ${q(layout.containerdRoot)}
state = ${q(layout.containerdState)}
disabled_plugins = [
${disabledPlugins(CONTAINERD_DISABLED_PLUGINS)}
]

[grpc]
  address = ${q(layout.containerdSocket)}

[ttrpc]
  address = ${q(`${layout.containerdSocket}.ttrpc`)}

[plugins.'io.containerd.internal.v1.opt']
  path = ${q(join(layout.containerdRoot, 'opt'))}

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'

[${rt}]
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # This machine gives root no CAP_SYS_RESOURCE, so no process may lower its OOM score
  # (the sandbox's -998 fails in runc init): clamp scores to containerd's own instead.
  restrict_oom_score_adj = true

[${rt}.containerd]
  default_runtime_name = 'runc'

[${rt}.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[${rt}.containerd.runtimes.runc.options]
  BinaryName = ${q(join(binDir, 'runc'))}
  SystemdCgroup = false

[${rt}.cni]
  bin_dirs = [${q(join(binDir, 'cni'))}]
  conf_dir = ${q(layout.cniConfDir)}
  max_conf_num = 1

[${img}]
  snapshotter = 'overlayfs'

[${img}.pinned_images]
  sandbox = ${q(pauseImage)}
`;
}

/**
 * The bridge network inside the node's namespace. Nothing is masqueraded: the node routes
 * its pods' traffic to other nodes' pod ranges over the fabric (fabric-plan.ts) as is.
 */
export function cniConfList(layout: NodeLayout): string {
  return `${JSON.stringify(
    {
      cniVersion: '1.0.0',
      name: 'leasehold-pods',
      plugins: [
        {
          type: 'bridge',
          bridge: 'cni0',
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            ranges: [[{ subnet: layout.podSubnet }]],
            // The pod's default route, via cni0 into the node's namespace (Service IPs
            // and the control plane's address are reached there, not on the pod subnet).
            routes: [{ dst: '0.0.0.0/0' }],
            dataDir: layout.cniDataDir,
          },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
      ],
    },
    null,
    2,
  )}\n`;
}

export interface KubeletInputs {
  caPath: string;
}

export function kubeletConfiguration(layout: NodeLayout, inputs: KubeletInputs): string {
  return `${JSON.stringify(
    {
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      // This machine has the cgroup v1 hybrid layout; kubelet 1.36 refuses v1 unless told.
      failCgroupV1: false,
      cgroupDriver: 'cgroupfs',
      cgroupRoot: layout.cgroupRoot,
      protectKernelDefaults: true,
      containerRuntimeEndpoint: `unix://${layout.containerdSocket}`,
      address: layout.nodeIp,
      port: 10250,
      readOnlyPort: 0,
      healthzBindAddress: '127.0.0.1',
      healthzPort: 10248,
      authentication: {
        anonymous: { enabled: false },
        webhook: { enabled: true },
        x509: { clientCAFile: inputs.caPath },
      },
      authorization: { mode: 'Webhook' },
      clusterDomain: 'cluster.local',
      resolvConf: '',
      podLogsDir: join(layout.kubeletRoot, 'pod-logs'),
      volumePluginDir: join(layout.kubeletRoot, 'volume-plugins'),
      failSwapOn: false,
      rotateCertificates: false,
      serverTLSBootstrap: false,
      // A shared test machine's disk and memory are not this node's to guard: eviction
      // at the defaults would taint the node whenever the host's disk is 85 % full.
      evictionHard: { 'memory.available': '50Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
      imageGCHighThresholdPercent: 100,
      imageGCLowThresholdPercent: 99,
      // Faster pod start and status in tests than the defaults (20 s / 1 m).
      syncFrequency: '10s',
      fileCheckFrequency: '10s',
      // The test control plane's node-monitor grace is 8 s (dev/cluster): the default
      // 40 s lease renewed every 10 s would flap the Node. 8 s renews every 2 s (a
      // quarter); a status check every 2 s brings Ready back within
      // 2 s of a heal, while a full status report stays at 1 m.
      nodeLeaseDurationSeconds: 8,
      nodeStatusUpdateFrequency: '2s',
      nodeStatusReportFrequency: '1m',
    },
    null,
    2,
  )}\n`;
}

export function kubeletArgs(layout: NodeLayout): string[] {
  return [
    `--config=${layout.kubeletConfig}`,
    `--kubeconfig=${layout.kubeletKubeconfig}`,
    `--root-dir=${layout.kubeletRoot}`,
    `--cert-dir=${layout.kubeletCertDir}`,
    `--hostname-override=${layout.name}`,
    `--node-ip=${layout.nodeIp}`,
    '--v=1',
  ];
}

/**
 * kube-proxy in nftables mode, in the node's network namespace only: its table holds
 * the Services' ClusterIPs (the `kubernetes` Service's goes to the control plane's
 * address, where the API relay listens). Its clusterCIDR is every node's pod range, so
 * a pod's traffic to a Service keeps its source and a node's own (from its node IP)
 * is masqueraded. Its conntrack tuning and OOM score are off:
 * nf_conntrack_max is host-wide, and root here cannot lower an OOM score.
 */
export function kubeProxyConfiguration(layout: NodeLayout): string {
  return `${JSON.stringify(
    {
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      mode: 'nftables',
      clientConnection: { kubeconfig: layout.kubeProxyKubeconfig },
      hostnameOverride: layout.name,
      healthzBindAddress: '127.0.0.1:10256',
      metricsBindAddress: '127.0.0.1:10249',
      detectLocalMode: 'ClusterCIDR',
      clusterCIDR: CLUSTER_POD_CIDR,
      oomScoreAdj: 0,
      conntrack: {
        maxPerCore: 0,
        min: 0,
        tcpEstablishedTimeout: '0s',
        tcpCloseWaitTimeout: '0s',
        udpTimeout: '0s',
        udpStreamTimeout: '0s',
      },
    },
    null,
    2,
  )}\n`;
}

export function kubeProxyArgs(layout: NodeLayout): string[] {
  return [`--config=${layout.kubeProxyConfig}`, '--v=1'];
}
