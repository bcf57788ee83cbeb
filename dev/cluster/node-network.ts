/**
 * How the control plane and real nodes (dev/node) reach each other, with no address,
 * route or firewall rule in the host's network namespace. One place for the addresses
 * both sides must agree on, and the API server's egress configuration.
 *
 *  - Nodes to the API server: inside every node's network namespace the address
 *    CONTROL_PLANE_IP is the node's own (a /32 on its lo), and a relay there forwards
 *    CONTROL_PLANE_IP:<API port> to the API server on host loopback. The API server
 *    advertises that address, so the `kubernetes` Service's Endpoints point at it and
 *    kube-proxy carries a pod's 10.0.0.1:443 there; its serving certificate has it.
 *  - The API server to the nodes (kubelet logs, exec, port-forward, pod proxy): its
 *    egress selector sends `cluster` traffic as HTTP CONNECT over a Unix socket to
 *    leasehold-netns-relay's CONNECT mode, which dials each node IP inside that node's
 *    namespace, found in the routes directory (a file per node IP naming the netns).
 *    Addresses with no route file are dialed on the host as without a proxy, so the
 *    API server's other `cluster` traffic (webhooks, aggregated APIs) is unchanged.
 *
 *  - Node to node and pod to pod: the fabric (dev/node/fabric.ts, its plan
 *    dev/node/fabric-plan.ts), a bridge in a network namespace of its own that each
 *    node's `eth0` (10.201.0.<index+1>/24) is a port of; each node routes every other
 *    node's pod range (10.244.<index>.0/24) to that node's IP. The control plane's
 *    address stays node-local: no node answers ARP for it on the fabric.
 *
 * Not provided: cluster DNS, NodePorts, LoadBalancers; a route from the host into any
 * of these addresses (tests reach them from inside a node: RealNode.spawnInNetwork).
 */
import { join } from 'node:path';

/** The control plane's address on the node network (node IPs are 10.201.0.2-251). */
export const CONTROL_PLANE_IP = '10.201.0.254';

export interface NodeNetwork {
  /** `CONTROL_PLANE_IP:<API port>`: where a node's relay listens, inside the node. */
  readonly apiAddress: string;
  /** Each node writes a file `<node IP>` here holding its netns path; the CONNECT proxy reads them. */
  readonly routesDir: string;
  /** The Unix socket the API server's egress selector dials. */
  readonly egressSocket: string;
}

export function nodeNetwork(clusterDir: string, apiPort: number): NodeNetwork {
  return {
    apiAddress: `${CONTROL_PLANE_IP}:${apiPort}`,
    routesDir: join(clusterDir, 'node-routes'),
    egressSocket: join(clusterDir, 'node-egress.sock'),
  };
}

/** kube-apiserver --egress-selector-config-file contents: `cluster` over the CONNECT relay. */
export function egressSelectorConfig(net: NodeNetwork): string {
  return `${JSON.stringify(
    {
      apiVersion: 'apiserver.k8s.io/v1beta1',
      kind: 'EgressSelectorConfiguration',
      egressSelections: [
        {
          name: 'cluster',
          connection: { proxyProtocol: 'HTTPConnect', transport: { uds: { udsName: net.egressSocket } } },
        },
      ],
    },
    null,
    2,
  )}\n`;
}
