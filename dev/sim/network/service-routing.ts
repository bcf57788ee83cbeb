/**
 * Which endpoint a new connection to a Service port goes to, read from the Service's
 * EndpointSlices the way kube-proxy reads them (pure; the sockets are service-proxy.ts).
 *
 * Rules (kube-proxy, pkg/proxy/endpointslicecache.go and topology.go CategorizeEndpoints):
 *  - a Service port is matched to the slices' ports by name ('' for an unnamed port) and
 *    protocol; the slice's port number is the resolved targetPort, per slice;
 *  - conditions: `ready` unset counts as true, `serving` unset as `ready`, `terminating`
 *    unset as false (the EndpointSlice API's own rules). NB: for a Service with
 *    `publishNotReadyAddresses` the real controller writes ready=true for every pod it
 *    lists, not yet Ready and terminating ones too (podToEndpoint, k8s.io/endpointslice
 *    1.36), so all of them are candidates here as in kube-proxy;
 *  - the candidates are the ready endpoints; only when there is none, the serving
 *    endpoints that are terminating (kube-proxy's fallback, so a rolling update drops
 *    nothing); none at all: the connection is rejected (kube-proxy's REJECT rule);
 *  - one endpoint per address: the same address in two slices counts once (the first seen);
 *  - the choice among candidates is uniform random (iptables mode's `statistic` rule).
 *
 * What a chosen endpoint means for the connection depends on the node the endpoint is
 * on (the slice's `nodeName`) and the pod behind its address (`ResolvedEndpoint`):
 * on a node that is down the connection hears nothing (a SYN to a dead machine is not
 * answered); on a running node without a listener behind the address it is reset.
 *
 * Not modelled: topology-aware routing and traffic distribution, internal/external
 * traffic policy Local, session affinity (ClientIP), IPv6 and dual-stack slices,
 * UDP and SCTP, endpoints of other address types (FQDN).
 */
import type { V1EndpointSlice } from '@kubernetes/client-node';

/** One endpoint of a Service port, as kube-proxy keeps it. */
export interface PortEndpoint {
  address: string;
  /** The slice's port number for this Service port (the resolved targetPort). */
  port: number;
  /** The node the endpoint is on (slice `nodeName`); undefined when the slice says none. */
  nodeName: string | undefined;
  /** `namespace/name` of the pod behind it (slice targetRef), for logs. */
  pod: string | undefined;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
}

/** Every endpoint of the Service port named `portName` (protocol TCP) in `slices`. */
export function portEndpoints(slices: readonly V1EndpointSlice[], portName: string): PortEndpoint[] {
  const seen = new Set<string>();
  const out: PortEndpoint[] = [];
  // Stable order (slice name), so the same slices always give the same list.
  const sorted = [...slices].sort((a, b) => (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''));
  for (const slice of sorted) {
    if (slice.addressType !== 'IPv4') continue;
    const port = (slice.ports ?? []).find(
      (p) => (p.name ?? '') === portName && (p.protocol ?? 'TCP') === 'TCP' && p.port !== undefined,
    );
    if (port?.port === undefined) continue;
    for (const e of slice.endpoints ?? []) {
      const address = e.addresses[0];
      if (address === undefined || seen.has(address)) continue;
      seen.add(address);
      const ready = e.conditions?.ready ?? true;
      const ref = e.targetRef;
      out.push({
        address,
        port: port.port,
        nodeName: e.nodeName,
        pod: ref?.kind === 'Pod' ? `${ref.namespace ?? slice.metadata?.namespace}/${ref.name}` : undefined,
        ready,
        serving: e.conditions?.serving ?? ready,
        terminating: e.conditions?.terminating ?? false,
      });
    }
  }
  return out;
}

/** The endpoints a new connection may go to: ready ones, else serving terminating ones. */
export function candidateEndpoints(endpoints: readonly PortEndpoint[]): PortEndpoint[] {
  const ready = endpoints.filter((e) => e.ready);
  return ready.length > 0 ? ready : endpoints.filter((e) => e.serving && e.terminating);
}

/** What the simulator knows about an endpoint's address right now. */
export interface ResolvedEndpoint {
  /** The node's state: see SimNodeState (only `running` answers). */
  nodeState: 'running' | 'crashed' | 'frozen' | 'partitioned' | 'stopped' | 'unknown';
  /** The host port the pod behind the address listens on for the endpoint's port. */
  hostPort: number | undefined;
}

export type NewConnection =
  | { kind: 'reject'; why: string }
  | { kind: 'connect'; endpoint: PortEndpoint; hostPort: number }
  /** The endpoint's node is down: accept nothing on its behalf, say nothing (a SYN into the void). */
  | { kind: 'silent'; endpoint: PortEndpoint; why: string };

/**
 * The decision for one new connection. `random` returns [0, 1) (Math.random in the
 * shell, fixed in tests); `resolve` looks an endpoint up in the simulator.
 */
export function routeNewConnection(
  endpoints: readonly PortEndpoint[],
  random: () => number,
  resolve: (e: PortEndpoint) => ResolvedEndpoint,
): NewConnection {
  const candidates = candidateEndpoints(endpoints);
  if (candidates.length === 0)
    return {
      kind: 'reject',
      why:
        endpoints.length === 0
          ? 'the Service has no endpoints'
          : `none of the Service's ${endpoints.length} endpoint(s) is ready or serving while terminating`,
    };
  const index = Math.min(candidates.length - 1, Math.floor(random() * candidates.length));
  const endpoint = candidates[index] as PortEndpoint;
  const at = resolve(endpoint);
  if (at.nodeState !== 'running' && at.nodeState !== 'unknown')
    return { kind: 'silent', endpoint, why: `node ${endpoint.nodeName} is ${at.nodeState}` };
  if (at.hostPort === undefined)
    return {
      kind: 'reject',
      why: `no simulated pod listens behind ${endpoint.address}:${endpoint.port} (node ${endpoint.nodeName ?? 'unknown'})`,
    };
  return { kind: 'connect', endpoint, hostPort: at.hostPort };
}
