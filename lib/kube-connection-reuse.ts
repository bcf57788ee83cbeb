/**
 * Connection reuse for API clients made from one KubeConfig.
 *
 * Why: @kubernetes/client-node 2.x builds a NEW undici Agent for every request (in
 * KubeConfig.applySecurityAuthentication), so no keep-alive connection is ever reused:
 * each call pays a TCP and TLS handshake. For a renewal every 2 s that is most of the
 * CPU and latency. This wraps the config so that every request made through it uses the
 * dispatcher built for the first request; auth headers are still applied per request
 * (a rotated service-account token is still picked up).
 *
 * NB: the shared dispatcher keeps the first request's TLS options (CA, client cert);
 * a process that must pick up rotated client certificates should not use this.
 * A request aborted by its deadline destroys its socket, so a dead connection is
 * never reused after a timeout.
 */
import type { KubeConfig } from '@kubernetes/client-node';

type AuthContext = Parameters<KubeConfig['applySecurityAuthentication']>[0];
type Dispatcher = NonNullable<ReturnType<AuthContext['getDispatcher']>>;

/** Makes `kc` share one connection pool across all its requests; returns `kc`. */
export function reuseConnections(kc: KubeConfig): KubeConfig {
  const applyAuth = kc.applySecurityAuthentication.bind(kc);
  let shared: Dispatcher | undefined;
  kc.applySecurityAuthentication = async (context: AuthContext) => {
    await applyAuth(context);
    const own = context.getDispatcher();
    if (own === undefined) return;
    if (shared === undefined) {
      shared = own;
      return;
    }
    context.setDispatcher(shared);
    // The per-request agent never connected; closing it only frees its bookkeeping.
    void own.close().catch(() => {});
  };
  return kc;
}
