/**
 * Makes every request of one KubeConfig reuse the same connection pool.
 *
 * NB: @kubernetes/client-node 2.0.1 builds a new undici Agent inside
 * `applySecurityAuthentication` for every request, so each API call opens a new TLS
 * connection (handshake with client certificate included) and leaves its idle socket to
 * time out. Measured with the manager benchmark: at a few hundred requests per second
 * the handshakes, not the work, saturated a 2-core machine. This wraps the KubeConfig's
 * `applySecurityAuthentication` so that, after it ran (headers such as bearer tokens are
 * still refreshed per request), the request uses one shared dispatcher built from the
 * first request's TLS settings.
 *
 * Not guaranteed: a client certificate or CA that changes on disk while the process
 * runs is not picked up (bearer tokens are).
 */
import type { KubeConfig, RequestContext } from '@kubernetes/client-node';

type Dispatcher = ReturnType<RequestContext['getDispatcher']>;

export function reuseConnections(kc: KubeConfig): KubeConfig {
  const original = kc.applySecurityAuthentication.bind(kc);
  let shared: Dispatcher;
  kc.applySecurityAuthentication = async (ctx: RequestContext): Promise<void> => {
    await original(ctx);
    shared ??= ctx.getDispatcher();
    if (shared) ctx.setDispatcher(shared);
  };
  return kc;
}
