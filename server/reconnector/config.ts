/**
 * The reconnector's configuration, read from env vars only and validated before any
 * work; every problem is reported at once, naming the variable, the value and the rule
 * (main exits with code 2).
 *
 * | variable                       | default        | meaning |
 * |--------------------------------|----------------|---------|
 * | LEASEHOLD_NODE_NAME            | required       | the node it runs on (logs) |
 * | LEASEHOLD_WATCH_NAMESPACE      | all namespaces | watch the shares' EndpointSlices of one namespace only |
 * | LEASEHOLD_RECONNECT_WAIT       | 5m             | how long to wait, after a share's slice changed, for the listed server to answer NFS before leaving stale connections to the clients' own timeouts (1s..1h) |
 * | LEASEHOLD_RECONNECT_REMEMBER   | 10m            | how long a share's gone address is remembered; connections still leading there are ended while it is (1m..24h) |
 * | LEASEHOLD_HTTP_PORT            | 8092           | /healthz /readyz /metrics (0 = any free port) |
 * | LEASEHOLD_HTTP_HOST            | 0.0.0.0        | address the endpoints listen on (the node's network: hostNetwork) |
 * | LEASEHOLD_LOG_LEVEL            | info           | fatal, error, warn, info, debug, trace, silent |
 *
 * KUBECONFIG is read by lib/kube-client.ts (in-cluster service account when unset).
 */
import { type Env, EnvReader } from '../../lib/env-config.ts';
import { LOG_LEVELS, type LogLevel } from '../../lib/logger.ts';

export interface ReconnectorConfig {
  nodeName: string;
  namespace: string | undefined;
  waitMs: number;
  rememberMs: number;
  httpPort: number;
  httpHost: string;
  logLevel: LogLevel;
}

export function readReconnectorConfig(env: Env): ReconnectorConfig {
  const r = new EnvReader(env);
  const config: ReconnectorConfig = {
    nodeName: r.string('LEASEHOLD_NODE_NAME', {
      rule: 'it is required: the node this reconnector runs on (downward API spec.nodeName)',
    }),
    namespace: env.LEASEHOLD_WATCH_NAMESPACE?.trim() ? r.objectName('LEASEHOLD_WATCH_NAMESPACE') : undefined,
    waitMs: r.duration('LEASEHOLD_RECONNECT_WAIT', 300_000, 1_000, 3_600_000),
    rememberMs: r.duration('LEASEHOLD_RECONNECT_REMEMBER', 600_000, 60_000, 86_400_000),
    httpPort: r.port('LEASEHOLD_HTTP_PORT', 8092),
    httpHost: r.string('LEASEHOLD_HTTP_HOST', { fallback: '0.0.0.0' }),
    logLevel: r.oneOf('LEASEHOLD_LOG_LEVEL', LOG_LEVELS, 'info'),
  };
  r.done();
  return config;
}
