/**
 * The address and route plan of the node network (the "fabric", fabric.ts), as pure
 * functions of a node's index: what the fabric's namespace holds, what `ip -batch`
 * lines attach a node to it, and the per-namespace sysctls that keep each node's
 * addresses its own. Like a kind cluster's docker network: one L2 segment with every
 * node's `eth0` on it, each node routing the other nodes' pod ranges to their node IPs
 * (what kindnet's routes or flannel's host-gw do).
 *
 * Invariants: node `i` (1..250) is 10.201.0.<i+1>/24 on its `eth0` and holds the pod
 * range 10.244.<i>.0/24 (layout.ts; the CNI plugin's host-local IPAM hands it out:
 * kube-controller-manager allocates no pod CIDRs here, so Node.spec.podCIDR is empty); its routes name every other index's range via
 * that index's node IP, whether or not that node exists (a route to an absent node
 * fails as on a LAN: ARP gets no answer, EHOSTUNREACH after about 3 s), so a node's
 * plan does not depend on which nodes started before it. The control plane's address
 * (dev/cluster/node-network.ts CONTROL_PLANE_IP) is a /32 on each node's `lo` and the node answers ARP on `eth0`
 * only for `eth0`'s own address (arp_ignore 1), so no node answers for another's API
 * relay. Not guaranteed: that two nodes of one fabric have different indexes (the
 * second attach fails: its port name is taken; fabric.ts says so).
 */
import { LeaseholdError } from '../../lib/errors.ts';

/** The fabric's bridge, in the fabric's own network namespace. */
export const FABRIC_BRIDGE = 'fabric0';

/** The highest node index (layout.ts): 10.201.0.251 is the last node IP. */
export const MAX_NODE_INDEX = 250;

/** Every node's pod range together: kube-proxy's clusterCIDR (traffic from it is a pod's, not masqueraded). */
export const CLUSTER_POD_CIDR = '10.244.0.0/16';

export const nodeIpOf = (index: number) => `10.201.0.${index + 1}`;
export const podRangeOf = (index: number) => `10.244.${index}.0/24`;

/** The fabric's end of node `index`'s veth pair (the node's end is its `eth0`). */
export const fabricPortOf = (index: number) => `node${index}`;

/** The holder's shell script: the fabric's namespace set up, then `exec` of the holder's argv. */
export function fabricSetupScript(holder: readonly string[]): string {
  if (holder.length === 0)
    throw new LeaseholdError('E_NODE_FABRIC', 'the fabric holder argv must not be empty');
  const sh = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
  return [
    'set -eu',
    'ip link set lo up',
    // No STP: ports forward as soon as they are up (a real switch port with portfast).
    `ip link add ${FABRIC_BRIDGE} type bridge stp_state 0`,
    `ip link set ${FABRIC_BRIDGE} up`,
    'echo "fabric: ready"',
    `exec ${holder.map(sh).join(' ')}`,
    '',
  ].join('\n');
}

/**
 * The per-namespace sysctls of a node's network namespace (written inside it, before
 * `eth0` or `cni0` exist, so the `default` values reach them): forwarding on (the
 * node routes its pods' traffic onto the fabric); ARP answered on an interface only
 * for its own addresses (the control plane's /32 is on `lo`, and the relay on it is
 * the node's own), and ARP asked with the interface's address; reverse-path filtering
 * off (the routes are symmetric, but the host's `all` value, which a new namespace
 * inherits, should not decide it).
 */
export const NODE_NET_SYSCTLS: Readonly<Record<string, string>> = {
  'net/ipv4/ip_forward': '1',
  'net/ipv4/conf/all/arp_ignore': '1',
  'net/ipv4/conf/all/arp_announce': '2',
  'net/ipv4/conf/all/rp_filter': '0',
  'net/ipv4/conf/default/rp_filter': '0',
};

/** Shell lines for the node's PID 1: lo, the control plane's address as a /32 on it, the sysctls. */
export function nodeNetSetupLines(controlPlaneIp: string): string[] {
  return [
    'ip link set lo up',
    `ip addr add ${controlPlaneIp}/32 dev lo`,
    ...Object.entries(NODE_NET_SYSCTLS).map(([key, value]) => `echo ${value} > /proc/sys/${key}`),
  ];
}

/** `ip -batch` lines run in the fabric's namespace: the veth pair, its node end into `nodeNetns` as `eth0`. */
export function fabricAttachBatch(index: number, nodeNetns: string): string[] {
  checkIndex(index);
  if (!nodeNetns.startsWith('/') || /\s/.test(nodeNetns))
    throw new LeaseholdError(
      'E_NODE_NETNS',
      `node netns path '${nodeNetns}' must be an absolute path without spaces`,
    );
  const port = fabricPortOf(index);
  return [
    `link add ${port} type veth peer name eth0 netns ${nodeNetns}`,
    `link set ${port} master ${FABRIC_BRIDGE}`,
    `link set ${port} up`,
  ];
}

/**
 * `ip -batch` lines run in the node's namespace once its `eth0` is there: the node IP,
 * the link up, a default route onto the fabric (nothing is beyond it: it carries a
 * local process's connect() to a ClusterIP past the route lookup, then kube-proxy's
 * OUTPUT DNAT rewrites it), and every other index's pod range via its node IP.
 */
export function nodeAttachBatch(index: number): string[] {
  checkIndex(index);
  const ip = nodeIpOf(index);
  const routes: string[] = [];
  for (let other = 1; other <= MAX_NODE_INDEX; other++)
    if (other !== index)
      routes.push(`route add ${podRangeOf(other)} via ${nodeIpOf(other)} dev eth0 src ${ip}`);
  return [
    `addr add ${ip}/24 dev eth0`,
    'link set eth0 up',
    `route add default dev eth0 src ${ip}`,
    ...routes,
  ];
}

function checkIndex(index: number): void {
  if (!Number.isInteger(index) || index < 1 || index > MAX_NODE_INDEX)
    throw new LeaseholdError(
      'E_NODE_INDEX',
      `node index ${index} must be an integer from 1 to ${MAX_NODE_INDEX}`,
    );
}
