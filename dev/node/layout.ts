/**
 * Where one real node keeps everything, and the addresses it uses: a pure function of
 * the node's directory, name and index, so that start, stop and the leftover check
 * agree on every path without passing state around.
 *
 * Invariants: every file the node writes is under `dir`; its cgroups are under
 * `cgroupRoot` (named after `dir`, so two nodes, or two test runs, never share one);
 * its addresses (node IP, the control plane's address, pod range) live only inside the
 * node's network namespace.
 * Not guaranteed: that two nodes of one testbed get different indexes (the caller picks).
 */
import { basename, join } from 'node:path';
import { LeaseholdError } from '../../lib/errors.ts';
import { CONTROL_PLANE_IP } from '../cluster/node-network.ts';
import { MAX_NODE_INDEX, nodeIpOf, podRangeOf } from './fabric-plan.ts';

export interface NodeLayout {
  readonly name: string;
  readonly index: number;
  readonly dir: string;
  /** kubelet cgroupRoot (cgroupfs driver): one directory per hierarchy, made before the kubelet starts. */
  readonly cgroupRoot: string;
  /** The node's own address, on its `eth0` inside its network namespace. */
  readonly nodeIp: string;
  /** The control plane's address (dev/cluster/node-network.ts), a /32 on lo inside the namespace (fabric-plan.ts). */
  readonly controlPlaneIp: string;
  /** The pod range of the bridge CNI network (host-local IPAM). */
  readonly podSubnet: string;
  readonly logDir: string;
  readonly containerdConfig: string;
  readonly containerdSocket: string;
  readonly containerdRoot: string;
  readonly containerdState: string;
  readonly kubeletRoot: string;
  readonly kubeletConfig: string;
  readonly kubeletKubeconfig: string;
  readonly kubeletCertDir: string;
  readonly kubeProxyConfig: string;
  readonly kubeProxyKubeconfig: string;
  readonly cniConfDir: string;
  readonly cniDataDir: string;
  /** Per-node views bind-mounted over /proc/sys/<key> inside the node's mount namespace. */
  readonly sysctlDir: string;
  /** Per-node /run, /var/lib, /var/log (bind-mounted over the host's, inside the node only). */
  readonly hostDirs: { readonly run: string; readonly varLib: string; readonly varLog: string };
  /** Written by the node's first process once its namespaces are set up. */
  readonly readyFile: string;
}

const NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export function nodeLayout(dir: string, name: string, index: number): NodeLayout {
  if (!NAME.test(name) || name.length > 63)
    throw new LeaseholdError(
      'E_NODE_NAME',
      `node name '${name}' is not a DNS label (lowercase letters, digits and '-', at most 63)`,
    );
  if (!Number.isInteger(index) || index < 1 || index > MAX_NODE_INDEX)
    throw new LeaseholdError(
      'E_NODE_INDEX',
      `node index ${index} must be an integer from 1 to ${MAX_NODE_INDEX}`,
    );
  const state = (p: string) => join(dir, p);
  return {
    name,
    index,
    dir,
    cgroupRoot: `/${basename(dir)}`,
    nodeIp: nodeIpOf(index),
    controlPlaneIp: CONTROL_PLANE_IP,
    podSubnet: podRangeOf(index),
    logDir: state('logs'),
    containerdConfig: state('containerd.toml'),
    containerdSocket: state('containerd.sock'),
    containerdRoot: state('containerd/root'),
    containerdState: state('containerd/state'),
    kubeletRoot: state('kubelet'),
    kubeletConfig: state('kubelet-config.json'),
    kubeletKubeconfig: state('kubelet.kubeconfig'),
    kubeletCertDir: state('kubelet-pki'),
    kubeProxyConfig: state('kube-proxy-config.json'),
    kubeProxyKubeconfig: state('kube-proxy.kubeconfig'),
    cniConfDir: state('cni/net.d'),
    cniDataDir: state('cni/ipam'),
    sysctlDir: state('sysctl'),
    hostDirs: { run: state('host/run'), varLib: state('host/var-lib'), varLog: state('host/var-log') },
    readyFile: state('namespaces-ready'),
  };
}
