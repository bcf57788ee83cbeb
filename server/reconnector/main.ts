/**
 * The reconnector process (a DaemonSet pod on every node, in the node's network
 * namespace): wiring only. Reads config (exit 2 on bad input), watches the manager's
 * EndpointSlices of every share, and feeds them to the Reconnector (reconnector.ts says
 * what it does and why); serves /healthz, /readyz (the slice cache synced) and /metrics;
 * on SIGTERM/SIGINT stops and exits 0.
 */
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { Counter } from 'prom-client';
import { sleep, systemClock } from '../../lib/clock.ts';
import { ConfigError } from '../../lib/errors.ts';
import { serveEndpoints } from '../../lib/http-endpoints.ts';
import { Informer } from '../../lib/informer.ts';
import { k8s, loadKubeConfig, withDeadline } from '../../lib/kube-client.ts';
import { LABEL_SHARE_MANAGER } from '../../lib/lease-record.ts';
import { createLogger } from '../../lib/logger.ts';
import { createRegistry } from '../../lib/metrics.ts';
import { probeRpcNull } from '../nfs-ganesha/rpc-null-probe.ts';
import { type ReconnectorConfig, readReconnectorConfig } from './config.ts';
import { conntrackEntriesFrom, endConnection, localAddresses } from './connection-ends.ts';
import { Reconnector } from './reconnector.ts';

let config: ReconnectorConfig;
try {
  config = readReconnectorConfig(process.env);
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`leasehold reconnector: ${err.message}\n`);
    process.exit(2);
  }
  throw err;
}

const log = createLogger('reconnector', config.logLevel).child({ node: config.nodeName });
const kc = loadKubeConfig(process.env);
const core = kc.makeApiClient(k8s.CoreV1Api);
const registry = createRegistry('leasehold_reconnector_');
const ended = new Counter({
  name: 'leasehold_reconnector_connections_ended_total',
  help: "Client connections to a share's lost server ended on this node, by how (destroy-socket: a socket of the node's own network namespace; tickle: a client behind the node) and outcome (ok, failed)",
  labelNames: ['how', 'outcome'],
  registers: [registry],
});
for (const how of ['destroy-socket', 'tickle'])
  for (const outcome of ['ok', 'failed']) ended.inc({ how, outcome }, 0);

const reconnector = new Reconnector(
  {
    clock: systemClock,
    sleep: (ms) => sleep(ms),
    log,
    readService: async (namespace, name) => {
      const svc = await core.readNamespacedService({ namespace, name }, withDeadline(5_000));
      const addresses = (svc.spec?.clusterIPs ?? [svc.spec?.clusterIP]).filter(
        (a): a is string => typeof a === 'string' && a !== '' && a !== 'None',
      );
      return { addresses, ports: (svc.spec?.ports ?? []).map((p) => p.port) };
    },
    serves: async (address, port) => {
      const outcome = await probeRpcNull(address, port, 4, 500);
      // A PROG_MISMATCH (a v3-only server) answers too: it serves.
      return outcome.kind !== 'unreachable';
    },
    entriesFrom: conntrackEntriesFrom,
    end: endConnection,
    localAddresses,
    counted: (how, ok) => ended.inc({ how, outcome: ok ? 'ok' : 'failed' }),
  },
  { waitMs: config.waitMs, rememberMs: config.rememberMs },
  LABEL_SHARE_MANAGER,
);

const ns = config.namespace ? `/namespaces/${config.namespace}` : '';
const slices = new Informer<V1EndpointSlice>({
  resource: 'endpointslices',
  kubeConfig: kc,
  path: `/apis/discovery.k8s.io/v1${ns}/endpointslices`,
  labelSelector: LABEL_SHARE_MANAGER,
  onEvent: (type, slice) => reconnector.sliceSeen(slice, type === 'deleted'),
  onDisconnected: (reason, err) => {
    if (reason !== 'ended') log.warn({ reason, err }, 'EndpointSlice watch broke; watching again');
  },
});

const endpoints = await serveEndpoints({
  port: config.httpPort,
  host: config.httpHost,
  registry,
  healthz: () => ({ ok: true, detail: `endpointslices: restarts ${slices.restarts}` }),
  readyz: () =>
    slices.synced
      ? { ok: true, detail: 'watching the shares’ EndpointSlices' }
      : { ok: false, detail: 'EndpointSlice cache not synced' },
});
slices.start();
log.info({ port: endpoints.port, namespace: config.namespace ?? '(all)' }, 'reconnector started');

let stopping = false;
async function shutdown(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'stopping');
  reconnector.stop();
  await slices.stop();
  await endpoints.close();
  process.exit(0);
}
process.on('SIGTERM', () => void shutdown('SIGTERM'));
process.on('SIGINT', () => void shutdown('SIGINT'));
