/**
 * The manager process: wiring only. Reads config (exit 2 on bad input), starts the
 * informers, the lease monitor, the failover driver, the ShareManager controller and
 * the HTTP endpoints; on SIGTERM/SIGINT stops them all and exits 0.
 *
 * Health: /healthz is ok while every informer is synced or still trying (it never
 * dies silently: restarts are counted); /readyz only while every cache has synced and
 * the Lease watch is open.
 */
import type {
  V1EndpointSlice,
  V1Node,
  V1PersistentVolume,
  V1PersistentVolumeClaim,
  V1Pod,
  V1Service,
  V1StorageClass,
} from '@kubernetes/client-node';
import { systemClock } from '../lib/clock.ts';
import { ConfigError } from '../lib/errors.ts';
import { serveEndpoints } from '../lib/http-endpoints.ts';
import { Informer, type InformerOptions } from '../lib/informer.ts';
import { type k8s, loadKubeConfig } from '../lib/kube-client.ts';
import { fromWire, LABEL_SHARE_MANAGER } from '../lib/lease-record.ts';
import { KubeLeaseStore } from '../lib/lease-store.ts';
import { createLogger } from '../lib/logger.ts';
import { createRegistry } from '../lib/metrics.ts';
import { witnessesOnNodes } from '../lib/witness-protocol.ts';
import { type ManagerConfig, readManagerConfig } from './config.ts';
import { fencedNow } from './detection/agent-fences.ts';
import { durationFloorMs } from './detection/lease-duration.ts';
import { LeaseLabelCheck } from './detection/lease-label-check.ts';
import { LeaseMonitor } from './detection/lease-monitor.ts';
import { NodeObserver } from './detection/node-observer.ts';
import { StaleConfirmation } from './detection/stale-confirmation.ts';
import { EventRecorder } from './events.ts';
import { FailoverExecutor } from './failover/execute-failover.ts';
import { FailoverDriver } from './failover/failover-driver.ts';
import { createManagerMetrics } from './manager-metrics.ts';
import { OutOfServiceExecutor } from './node-handling/execute-out-of-service.ts';
import {
  createOutOfServiceMetrics,
  OutOfServiceReconciler,
} from './node-handling/out-of-service-reconciler.ts';
import { ProvisionExecutor } from './provisioning/execute-provisioning.ts';
import { LABEL_PROVISIONED_FOR } from './provisioning/provisioned-objects.ts';
import { Provisioner } from './provisioning/provisioner.ts';
import { ProvisionerLeadership } from './provisioning/provisioner-leadership.ts';
import { LABEL_CONSUMER_NAMESPACE, LABEL_CONSUMER_OF } from './reconciliation/consumer-objects.ts';
import { ConsumerExecutor } from './reconciliation/execute-consumer.ts';
import { ReconcileExecutor } from './reconciliation/execute-reconcile.ts';
import { ShareManagerController } from './reconciliation/share-manager-controller.ts';
import { isLive } from './share-model/pod-spec.ts';
import { type ShareManager, SM_GROUP, SM_PLURAL, SM_VERSION } from './share-model/share-manager-spec.ts';
import { StatusWriter } from './share-model/status-writer.ts';
import { WitnessServer } from './witness/witness-server.ts';

let config: ManagerConfig;
try {
  config = readManagerConfig(process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`leasehold manager: ${err.message}\n`);
    process.exit(2);
  }
  throw err;
}

const log = createLogger('manager', config.logLevel).child({
  manager: config.identity,
  node: config.nodeName,
});
const clock = systemClock;
const kc = loadKubeConfig(process.env);
const registry = createRegistry('leasehold_manager_');
const metrics = createManagerMetrics(registry);
const leaseStore = new KubeLeaseStore(kc);
const status = new StatusWriter(kc, config.requestTimeoutMs);
const events = new EventRecorder(kc, config.identity, config.nodeName, log, config.requestTimeoutMs);
const ns = config.namespace ? `/namespaces/${config.namespace}` : '';
// The witness (issue 28): every manager answers promises and clearances; whether it is in
// an agent's set is the agent's configuration.
const witness = new WitnessServer({
  clock,
  settings: config.witness,
  readLease: (namespace, name, deadlineMs) => leaseStore.get(namespace, name, deadlineMs),
  log: log.child({ part: 'witness' }),
  metrics,
  onCutOffAlone: (lease, holder) => {
    const [namespace, name] = lease.split('/') as [string, string];
    const sm = shareManagers.get(namespace, name);
    if (sm)
      void events.record(
        sm,
        'Warning',
        'CutOffFromApi',
        `holder ${holder} asked witness ${config.identity} (node ${config.nodeName}) for a promise while this witness reaches the API server: its node is cut off from the API alone, so its agent fences and the share fails over`,
      );
  },
});

function informer<T extends k8s.KubernetesObject>(
  opts: Omit<InformerOptions<T>, 'kubeConfig' | 'onDisconnected'> &
    Partial<Pick<InformerOptions<T>, 'onDisconnected'>>,
): Informer<T> {
  // The server ends every watch after its timeout (5-10 min): that end and the resume
  // after it are routine (debug); any other break is a warning.
  let routine = false;
  // Exported at 0 until the watch first opens: a manager that never gets its watch open
  // is as blind as one whose watch broke, and the chart's alert must see it.
  metrics.watchHealthy.set({ resource: opts.resource }, 0);
  metrics.watchRestarts.inc({ resource: opts.resource }, 0);
  return new Informer<T>({
    kubeConfig: kc,
    quietTimeoutMs: config.watchQuietTimeoutMs,
    ...opts,
    // Any event proves the API server answered: the witness promises only when none came.
    onEvent: (...args) => {
      witness.heardFromApi();
      opts.onEvent(...args);
    },
    onConnected: (kind) => {
      witness.heardFromApi();
      metrics.watchHealthy.set({ resource: opts.resource }, 1);
      const level = routine && kind === 'resumed' ? 'debug' : 'info';
      routine = false;
      log[level]({ resource: opts.resource, kind }, 'watch open');
      opts.onConnected?.(kind);
    },
    onDisconnected: (reason, error) => {
      metrics.watchHealthy.set({ resource: opts.resource }, 0);
      metrics.watchRestarts.inc({ resource: opts.resource });
      routine = reason === 'ended' && error === undefined;
      if (routine) log.debug({ resource: opts.resource, reason }, 'watch ended by the server; resuming');
      else
        log.warn({ resource: opts.resource, reason, err: error }, 'watch broken; re-watching with backoff');
      opts.onDisconnected?.(reason, error);
    },
  });
}

// The objects are wired in dependency order; the callbacks close over later ones.
let controller: ShareManagerController | undefined;
let driver: FailoverDriver | undefined;
let monitor: LeaseMonitor | undefined;
let nodeObserver: NodeObserver | undefined;
let outOfService: OutOfServiceReconciler | undefined;
let provisioner: Provisioner | undefined;

const shareManagers = informer<ShareManager>({
  resource: 'sharemanagers',
  path: `/apis/${SM_GROUP}/${SM_VERSION}${ns}/${SM_PLURAL}`,
  onEvent: (type, sm) => {
    controller?.enqueueFor(sm, false);
    const key = `${sm.metadata?.namespace ?? ''}/${sm.metadata?.name ?? ''}`;
    monitor?.floorChanged(key);
    if (type !== 'deleted') driver?.shareManagerSeen(key);
    provisioner?.shareSeen(sm, type === 'deleted');
  },
});
// A removed share-manager label looks like a deletion to the label-selected watch: say so.
const labelCheck = new LeaseLabelCheck(
  { readLease: (namespace, name) => leaseStore.get(namespace, name, config.requestTimeoutMs) },
  log,
);
const leases = informer<k8s.V1Lease>({
  resource: 'leases',
  path: `/apis/coordination.k8s.io/v1${ns}/leases`,
  labelSelector: LABEL_SHARE_MANAGER,
  onEvent: (type, lease, _previous, origin) => {
    const [leaseNs, leaseName] = [lease.metadata?.namespace ?? '', lease.metadata?.name ?? ''];
    if (type === 'deleted') {
      monitor?.leaseDeleted(leaseNs, leaseName);
      witness.leaseDeleted(leaseNs, leaseName);
      void labelCheck.leaseLeft(leaseNs, leaseName);
    } else {
      witness.leaseSeen(fromWire(lease));
      labelCheck.leaseSeen(leaseNs, leaseName);
      monitor?.leaseSeen(lease, origin === 'list');
    }
    metrics.leasesTracked.set(monitor?.tracked ?? 0);
    controller?.enqueueFor(lease, false);
    outOfService?.shareLeaseSeen(lease);
  },
  onConnected: (kind) => monitor?.watchConnected(kind),
  onDisconnected: (reason) => monitor?.watchDisconnected(reason),
});
const pods = informer<V1Pod>({
  resource: 'pods',
  path: `/api/v1${ns}/pods`,
  labelSelector: LABEL_SHARE_MANAGER,
  onEvent: (type, pod, previous) => {
    if (type === 'modified' && fencedNow(pod, previous)) metrics.agentFences.inc();
    driver?.onPodChange(pod, type === 'deleted');
    controller?.enqueueFor(pod, true);
    monitor?.floorChanged(
      `${pod.metadata?.namespace ?? ''}/${pod.metadata?.labels?.[LABEL_SHARE_MANAGER] ?? ''}`,
    );
  },
});
// The shares' Services: a deleted one is re-created, a changed one put back (execute-reconcile.ts).
const services = informer<V1Service>({
  resource: 'services',
  path: `/api/v1${ns}/services`,
  labelSelector: LABEL_SHARE_MANAGER,
  onEvent: (_type, service) => controller?.enqueueFor(service, false),
});
// The manager's EndpointSlices of the shares (share-endpoints.ts): a deleted or changed one is written again.
const endpointSlices = informer<V1EndpointSlice>({
  resource: 'endpointslices',
  path: `/apis/discovery.k8s.io/v1${ns}/endpointslices`,
  labelSelector: LABEL_SHARE_MANAGER,
  onEvent: (_type, slice) => controller?.enqueueFor(slice, true),
});
const nodes = informer<V1Node>({
  resource: 'nodes',
  path: '/api/v1/nodes',
  onEvent: (type, node) => {
    outOfService?.nodeSeen(node, type === 'deleted');
    driver?.onNodeChange(node.metadata?.name ?? '');
    if (config.witnessNodes.length > 0) refreshWitnesses();
  },
});
// LEASEHOLD_WITNESS_NODES: the witness set from the Node objects' addresses, for the pods
// created from now on (pod-spec.ts reads config.witnesses); all of them or none.
let witnessesMissing = '';
function refreshWitnesses(): void {
  const known = new Map(
    nodes
      .list()
      .map((n) => [
        n.metadata?.name ?? '',
        { name: n.metadata?.name ?? '', addresses: n.status?.addresses ?? [] },
      ]),
  );
  const found = witnessesOnNodes(config.witnessNodes, known, config.httpPort);
  const missing = 'missing' in found ? found.missing.join(',') : '';
  if (missing !== witnessesMissing) {
    if (missing)
      log.warn(
        { nodes: missing },
        'witness nodes without a known InternalIP: new share pods get no witnesses',
      );
    else
      log.info(
        { witnesses: config.witnessNodes },
        'every witness node has an address: new share pods get the witness set',
      );
    witnessesMissing = missing;
  }
  config.witnesses = 'endpoints' in found ? found.endpoints : [];
}
const nodeLeases = informer<k8s.V1Lease>({
  resource: 'node-leases',
  path: '/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases',
  onEvent: (type, lease) => {
    if (type === 'deleted') nodeObserver?.heartbeatGone(lease);
    else nodeObserver?.heartbeatSeen(lease);
    outOfService?.heartbeatSeen(lease.metadata?.name ?? '');
  },
  onConnected: (kind) => nodeObserver?.watchConnected(kind),
  onDisconnected: (reason) => nodeObserver?.watchDisconnected(reason),
});
// spec.consumer's PVs (cluster-scoped: selected by the namespace label) and claims.
const volumes = informer<V1PersistentVolume>({
  resource: 'persistentvolumes',
  path: '/api/v1/persistentvolumes',
  labelSelector: config.namespace
    ? `${LABEL_CONSUMER_NAMESPACE}=${config.namespace}`
    : LABEL_CONSUMER_NAMESPACE,
  onEvent: (_type, volume) => controller?.enqueueForConsumer(volume),
});
const claims = informer<V1PersistentVolumeClaim>({
  resource: 'persistentvolumeclaims',
  path: `/api/v1${ns}/persistentvolumeclaims`,
  labelSelector: LABEL_CONSUMER_OF,
  onEvent: (_type, claim) => controller?.enqueueForConsumer(claim),
});
// Provisioning (LEASEHOLD_PROVISIONING): every claim (the users' and the backing ones),
// the StorageClasses and our PVs.
const provisioningSources = config.provisioning
  ? {
      claims: informer<V1PersistentVolumeClaim>({
        resource: 'provisioning-claims',
        path: '/api/v1/persistentvolumeclaims',
        onEvent: (type, claim) => provisioner?.claimSeen(claim, type === 'deleted'),
      }),
      storageClasses: informer<V1StorageClass>({
        resource: 'storageclasses',
        path: '/apis/storage.k8s.io/v1/storageclasses',
        onEvent: (_type, storageClass) => provisioner?.storageClassSeen(storageClass),
      }),
      volumes: informer<V1PersistentVolume>({
        resource: 'provisioned-volumes',
        path: '/api/v1/persistentvolumes',
        labelSelector: LABEL_PROVISIONED_FOR,
        onEvent: (type, volume) => provisioner?.volumeSeen(volume, type === 'deleted'),
      }),
      shareManagers,
    }
  : undefined;
let leadership: ProvisionerLeadership | undefined;
if (config.provisioning && provisioningSources) {
  const settings = config.provisioning;
  leadership = new ProvisionerLeadership({
    identity: config.identity,
    namespace: settings.namespace,
    durationMs: settings.leaseDurationMs,
    requestTimeoutMs: config.requestTimeoutMs,
    store: leaseStore,
    clock,
    log: log.child({ part: 'provisioner' }),
    onChange: (leader) => {
      if (leader) provisioner?.resync();
    },
  });
  const lead = leadership;
  provisioner = new Provisioner(
    { defaultNamespace: settings.namespace, onlyNamespace: config.namespace, defaults: config.defaults },
    log.child({ part: 'provisioner' }),
    provisioningSources,
    new ProvisionExecutor(kc, events, log.child({ part: 'provisioner' }), config.requestTimeoutMs),
    () => lead.leader,
  );
}
nodeObserver = new NodeObserver(clock, nodes, config.nodeLeaseGraceMs);
const observer = nodeObserver;
outOfService = new OutOfServiceReconciler(
  config,
  clock,
  log,
  createOutOfServiceMetrics(registry),
  new OutOfServiceExecutor(kc, config.identity, events, config.requestTimeoutMs),
  {
    nodes: () => nodes.list(),
    node: (name) => nodes.get('', name),
    shareLeases: () => leases.list(),
    heartbeatObservedAt: (node) => observer.heartbeatObservedAt(node),
    heartbeatsWatched: () => nodeLeases.healthy,
  },
);

const failoverExecutor = new FailoverExecutor(kc, leaseStore, status, config);
driver = new FailoverDriver(config, clock, log, metrics, failoverExecutor, events, {
  shareManager: (key) => {
    const [namespace, name] = key.split('/') as [string, string];
    return shareManagers.get(namespace, name);
  },
  pod: (namespace, name) => pods.get(namespace, name),
  livePods: (key) => {
    const [namespace, name] = key.split('/') as [string, string];
    return pods
      .list()
      .filter(
        (p) =>
          p.metadata?.namespace === namespace &&
          p.metadata?.labels?.[LABEL_SHARE_MANAGER] === name &&
          isLive(p),
      );
  },
  nodeHealth: (node) => nodeObserver?.health(node) ?? 'unknown',
  heartbeatChangedAt: (node) => nodeObserver?.heartbeatChangedAt(node),
  heartbeat: (node) => nodeObserver?.heartbeat(node),
  heartbeatRead: (lease) => nodeObserver?.heartbeatSeen(lease),
});
const failovers = driver;
const confirmation = new StaleConfirmation(
  failoverExecutor,
  clock,
  log,
  config.defaults.retryPeriodMs,
  (verdict) => failovers.onStale(verdict),
);
monitor = new LeaseMonitor(
  clock,
  // D is never below the holder agent's (lease-duration.ts), whatever the Lease says.
  (key, lease) => {
    const [namespace, name] = key.split('/') as [string, string];
    return durationFloorMs(
      shareManagers.get(namespace, name),
      lease.holder ? pods.get(namespace, lease.holder) : undefined,
      config.defaults,
    );
  },
  {
    onStale: (verdict) => confirmation.check(verdict),
    onLeaseChange: (key, lease, renewed) => failovers.onLeaseChange(key, lease, renewed),
    onLeaseGone: (key) => failovers.onLeaseGone(key),
  },
  log,
);
driver.monitor = monitor;
confirmation.monitor = monitor;
const consumerExecutor = new ConsumerExecutor(
  kc,
  clock,
  events,
  log,
  config.requestTimeoutMs,
  async (sm, conditions) => {
    await status.patch(sm.metadata.namespace ?? '', sm.metadata.name ?? '', { conditions });
  },
);
controller = new ShareManagerController(
  config,
  clock,
  log,
  {
    shareManagers,
    leases,
    pods,
    services,
    endpointSlices,
    volumes,
    claims,
    failoverRunning: (key) => failovers.phaseOf(key) !== 'idle',
  },
  new ReconcileExecutor(kc, leaseStore, status, config, events, log, consumerExecutor),
  consumerExecutor,
);

const all = [
  shareManagers,
  leases,
  pods,
  services,
  endpointSlices,
  nodes,
  nodeLeases,
  volumes,
  claims,
  ...(provisioningSources
    ? [provisioningSources.claims, provisioningSources.storageClasses, provisioningSources.volumes]
    : []),
];
const stormTimer = setInterval(() => failovers.refreshStormGauge(), 5000);
const endpoints = await serveEndpoints({
  port: config.httpPort,
  host: config.httpHost,
  registry,
  healthz: () => ({ ok: true, detail: all.map((i) => `${i.resource}: restarts ${i.restarts}`).join(', ') }),
  routes: witness.routes(),
  readyz: () => {
    const unsynced = all.filter((i) => !i.synced).map((i) => i.resource);
    if (unsynced.length > 0) return { ok: false, detail: `caches not synced: ${unsynced.join(', ')}` };
    if (!leases.healthy) return { ok: false, detail: 'lease watch not open (blind: no verdicts)' };
    return {
      ok: true,
      detail: `tracking ${monitor?.tracked ?? 0} leases, ${failovers.running} failovers running`,
    };
  },
});
for (const i of all) i.start();
outOfService.start();
leadership?.start();
log.info(
  {
    port: endpoints.port,
    observeOnly: config.observeOnly,
    fastFailover: config.fastFailover,
    outOfServiceTaint: config.outOfServiceTaint,
    namespace: config.namespace ?? '(all)',
  },
  'manager started',
);

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'stopping');
  clearInterval(stormTimer);
  controller?.queue.stop();
  leadership?.stop();
  provisioner?.queue.stop();
  monitor?.stop();
  confirmation.stop();
  failovers.stop();
  outOfService?.stop();
  await Promise.all(all.map((i) => i.stop()));
  await endpoints.close();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
