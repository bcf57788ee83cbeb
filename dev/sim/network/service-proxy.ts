/**
 * The simulator's kube-proxy stand-in: every Service with a ClusterIP gets, per TCP
 * port, a stable address on this machine that forwards each new connection to an
 * endpoint of the Service's EndpointSlices (written by the real EndpointSlice
 * controller), as a ClusterIP does in a cluster.
 *
 *   const { host, port } = await sim.serviceAddress('default', 'share-a', 'nfs');
 *
 * Addresses: 127.0.0.1 and a port the proxy allocates (any free one) per Service port,
 * stable while the Service exists (keyed by namespace, name and port name: a changed
 * port number keeps it; a deleted Service's listeners close, a Service created again
 * gets new ones). Not the ClusterIP itself: pods and tests share the host's loopback,
 * and several simulators may run on one machine at once.
 * Routing: service-routing.ts (ready endpoints, else serving terminating ones, uniform
 * random; none: the connection is reset at once); an endpoint's pod IP and port are
 * mapped to the pod's host port through the simulator's port map. Each connection
 * stays with its endpoint (proxied-connection.ts) and follows service-connection.ts
 * when the endpoint's node crashes, freezes, is partitioned or heals (fed by
 * `nodeChanged`, called by the simulator before the node's processes are touched).
 *
 * Not modelled: conntrack (its table, timeouts, the stale-entry reuse a reconnect
 * from the same source port can hit; each accepted connection is simply bound to its
 * endpoint), iptables/IPVS rule-sync timing (slices apply as soon as the watch
 * delivers them, typically milliseconds, where kube-proxy batches every 1 s by
 * default), session affinity, NodePorts, LoadBalancers, externalIPs, UDP and SCTP,
 * hairpin traffic, the ClusterIP address and Service port number themselves. A
 * rejected connection is accepted and reset (the client sees ECONNRESET, where
 * kube-proxy's REJECT gives ECONNREFUSED); a connection routed to a down node is
 * accepted and then hears nothing (in a cluster its SYN would go unanswered).
 */
import { createServer, type Server, type Socket } from 'node:net';
import type { V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { monotonicMs } from '../../../lib/clock.ts';
import { LeaseholdError } from '../../../lib/errors.ts';
import { k8s, withDeadline } from '../../../lib/kube-client.ts';
import { type ListWatch, startListWatch } from '../../../test/support/list-watch.ts';
import { ProxiedConnection } from './proxied-connection.ts';
import type { ConnectionState, NodeCondition } from './service-connection.ts';
import {
  type PortEndpoint,
  portEndpoints,
  type ResolvedEndpoint,
  routeNewConnection,
} from './service-routing.ts';

export interface ServiceAddress {
  host: string;
  port: number;
}

export interface ServiceProxyOptions {
  kubeConfig: k8s.KubeConfig;
  /** The endpoint's node state and the host port of the pod behind its address. */
  resolve(endpoint: PortEndpoint): ResolvedEndpoint;
  log(msg: string, extra?: Record<string, unknown>): void;
  /** [0, 1) for the endpoint choice (default Math.random). */
  random?: () => number;
}

/** One proxied connection, for tests and logs. */
export interface ServiceConnectionView {
  /** `namespace/name:portName` */
  servicePort: string;
  endpoint: string;
  pod: string | undefined;
  node: string | undefined;
  state: ConnectionState['kind'];
  openedMonoMs: number;
  /** What the backend side did, if anything (even while the client heard nothing). */
  upstreamEvent: string | undefined;
}

const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

interface PortListener {
  key: string;
  namespace: string;
  service: string;
  portName: string;
  server: Server;
  address: ServiceAddress;
}

export class ServiceProxy {
  private readonly services = new Map<string, V1Service>();
  private readonly slices = new Map<string, V1EndpointSlice>();
  private readonly listeners = new Map<string, PortListener>();
  private readonly opening = new Map<string, Promise<void>>();
  private readonly connectionsOpen = new Set<ProxiedConnection>();
  private readonly watches: ListWatch[] = [];
  private readonly changed = new Set<() => void>();
  private stopped = false;
  private readonly random: () => number;

  constructor(private readonly opts: ServiceProxyOptions) {
    this.random = opts.random ?? Math.random;
  }

  start(): void {
    const kc = this.opts.kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const discovery = kc.makeApiClient(k8s.DiscoveryV1Api);
    this.watches.push(
      startListWatch<V1Service>({
        kubeConfig: kc,
        what: 'Services (service proxy)',
        path: '/api/v1/services',
        list: async () => {
          const list = await core.listServiceForAllNamespaces({}, withDeadline(10_000));
          return { items: list.items, resourceVersion: list.metadata?.resourceVersion ?? '' };
        },
        onList: (items) => {
          this.services.clear();
          for (const s of items) this.services.set(keyOf(s), s);
          this.sync();
        },
        onEvent: (type, s) => {
          if (type === 'DELETED') this.services.delete(keyOf(s));
          else this.services.set(keyOf(s), s);
          this.sync();
        },
        onError: (err) => this.opts.log('service list failed; listing again', { error: String(err) }),
      }),
      startListWatch<V1EndpointSlice>({
        kubeConfig: kc,
        what: 'EndpointSlices (service proxy)',
        path: '/apis/discovery.k8s.io/v1/endpointslices',
        list: async () => {
          const list = await discovery.listEndpointSliceForAllNamespaces({}, withDeadline(10_000));
          return { items: list.items, resourceVersion: list.metadata?.resourceVersion ?? '' };
        },
        onList: (items) => {
          this.slices.clear();
          for (const s of items) this.slices.set(keyOf(s), s);
        },
        onEvent: (type, s) => {
          if (type === 'DELETED') this.slices.delete(keyOf(s));
          else this.slices.set(keyOf(s), s);
        },
        onError: (err) => this.opts.log('endpointslice list failed; listing again', { error: String(err) }),
      }),
    );
  }

  /**
   * The stable address of a Service port (its name, or its `port` number), once the
   * proxy has seen the Service (waits up to `timeoutMs`). Throws naming the Service
   * when it has no ClusterIP or no such TCP port.
   */
  async address(
    namespace: string,
    name: string,
    port: string | number,
    timeoutMs = 10_000,
  ): Promise<ServiceAddress> {
    const what = `Service ${namespace}/${name} port ${JSON.stringify(port)}`;
    const deadline = monotonicMs() + timeoutMs;
    for (;;) {
      const service = this.services.get(`${namespace}/${name}`);
      if (service) {
        const ports = servicePorts(service);
        const match = ports.find((p) => (typeof port === 'number' ? p.port === port : p.name === port));
        if (!hasClusterIP(service))
          throw new LeaseholdError(
            'E_SIM_SERVICE_ADDRESS',
            `${what}: the Service has no ClusterIP (headless or ExternalName)`,
          );
        if (!match)
          throw new LeaseholdError(
            'E_SIM_SERVICE_ADDRESS',
            `${what}: no such TCP port (it has ${ports.map((p) => `${p.name || '""'}=${p.port}`).join(', ') || 'none'})`,
          );
        const key = listenerKey(namespace, name, match.name);
        await this.opening.get(key);
        const listener = this.listeners.get(key);
        if (listener) return listener.address;
      }
      const left = deadline - monotonicMs();
      if (left <= 0 || this.stopped)
        throw new LeaseholdError(
          'E_SIM_SERVICE_ADDRESS',
          `${what}: ${this.stopped ? 'the simulator stopped' : `not seen by the service proxy within ${timeoutMs} ms`}`,
        );
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.changed.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(left, 200));
        this.changed.add(wake);
      });
    }
  }

  /** The node of some endpoints changed condition: apply it to their connections. */
  nodeChanged(nodeName: string, condition: NodeCondition): void {
    for (const c of [...this.connectionsOpen])
      if (c.endpoint.nodeName === nodeName) c.apply({ kind: 'node', condition });
  }

  connections(): ServiceConnectionView[] {
    return [...this.connectionsOpen].map((c) => ({
      servicePort: c.servicePort,
      endpoint: `${c.endpoint.address}:${c.endpoint.port}`,
      pod: c.endpoint.pod,
      node: c.endpoint.nodeName,
      state: c.state.kind,
      openedMonoMs: c.openedMonoMs,
      upstreamEvent: c.upstreamEvent,
    }));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const w of this.watches.splice(0)) w.stop();
    await Promise.all([...this.opening.values()]);
    for (const c of [...this.connectionsOpen]) c.splice.destroy();
    this.connectionsOpen.clear();
    await Promise.all([...this.listeners.values()].map((l) => closeServer(l.server)));
    this.listeners.clear();
    for (const wake of [...this.changed]) wake();
  }

  /** Opens a listener for every ClusterIP Service port, closes those of Services gone. */
  private sync(): void {
    if (this.stopped) return;
    const wanted = new Map<string, { namespace: string; service: string; portName: string }>();
    for (const s of this.services.values()) {
      if (!hasClusterIP(s)) continue;
      const namespace = s.metadata?.namespace ?? '';
      const service = s.metadata?.name ?? '';
      for (const p of servicePorts(s))
        wanted.set(listenerKey(namespace, service, p.name), { namespace, service, portName: p.name });
    }
    for (const [key, listener] of this.listeners) {
      if (wanted.has(key)) continue;
      this.listeners.delete(key);
      void closeServer(listener.server);
      this.opts.log('service port address closed', { servicePort: key, port: listener.address.port });
    }
    for (const [key, want] of wanted) {
      if (this.listeners.has(key) || this.opening.has(key)) continue;
      const opening = this.open(key, want).finally(() => this.opening.delete(key));
      this.opening.set(key, opening);
    }
    for (const wake of [...this.changed]) wake();
  }

  private async open(
    key: string,
    want: { namespace: string; service: string; portName: string },
  ): Promise<void> {
    const server = createServer({ allowHalfOpen: true }, (client) => this.accept(key, want, client));
    const listening = await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    }).catch((err: unknown) => {
      // NB: address() for it then times out naming the Service; the next Service event retries.
      this.opts.log('service port address could not listen', { servicePort: key, error: String(err) });
      return 'failed' as const;
    });
    if (listening === 'failed') return;
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    if (this.stopped) {
      await closeServer(server);
      return;
    }
    this.listeners.set(key, { key, ...want, server, address: { host: '127.0.0.1', port } });
    this.opts.log('service port address open', { servicePort: key, host: '127.0.0.1', port });
  }

  private accept(
    key: string,
    want: { namespace: string; service: string; portName: string },
    client: Socket,
  ): void {
    client.on('error', () => {});
    const slices = [...this.slices.values()].filter(
      (s) =>
        s.metadata?.namespace === want.namespace && s.metadata?.labels?.[SERVICE_NAME_LABEL] === want.service,
    );
    const decision = routeNewConnection(portEndpoints(slices, want.portName), this.random, (e) =>
      this.opts.resolve(e),
    );
    if (decision.kind === 'reject') {
      this.opts.log('service connection rejected', { servicePort: key, why: decision.why });
      client.resetAndDestroy();
      return;
    }
    const condition: NodeCondition =
      decision.kind === 'connect' ? 'running' : nodeCondition(decision.endpoint, this.opts.resolve);
    const connection = new ProxiedConnection(client, key, decision.endpoint, condition, {
      resolve: (e) => this.opts.resolve(e),
      forget: (c) => this.connectionsOpen.delete(c),
    });
    this.connectionsOpen.add(connection);
    if (decision.kind === 'connect')
      connection.splice.connect({ host: '127.0.0.1', port: decision.hostPort });
    else connection.splice.hold();
    this.opts.log('service connection', {
      servicePort: key,
      endpoint: `${decision.endpoint.address}:${decision.endpoint.port}`,
      pod: decision.endpoint.pod,
      node: decision.endpoint.nodeName,
      ...(decision.kind === 'silent' ? { silent: decision.why } : { hostPort: decision.hostPort }),
    });
  }
}

/** The condition of a down endpoint's node, for a connection's first state. */
function nodeCondition(
  endpoint: PortEndpoint,
  resolve: (e: PortEndpoint) => ResolvedEndpoint,
): NodeCondition {
  const state = resolve(endpoint).nodeState;
  return state === 'frozen' || state === 'partitioned' ? state : state === 'running' ? 'running' : 'crashed';
}

function keyOf(o: { metadata?: { namespace?: string; name?: string } }): string {
  return `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;
}

function listenerKey(namespace: string, service: string, portName: string): string {
  return `${namespace}/${service}:${portName}`;
}

function hasClusterIP(s: V1Service): boolean {
  const ip = s.spec?.clusterIP;
  return s.spec?.type !== 'ExternalName' && ip !== undefined && ip !== '' && ip !== 'None';
}

function servicePorts(s: V1Service): Array<{ name: string; port: number }> {
  return (s.spec?.ports ?? [])
    .filter((p) => (p.protocol ?? 'TCP') === 'TCP')
    .map((p) => ({ name: p.name ?? '', port: p.port }));
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}
