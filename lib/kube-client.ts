/**
 * Kubernetes client setup, once for every process: `KUBECONFIG` when set, else the
 * in-cluster service account, with one shared connection pool (reuse-connections.ts). Also the per-request deadline every caller uses, so
 * that no request can outlive the time its caller has to act.
 */
import * as k8s from '@kubernetes/client-node';
import { KubeApiError } from './errors.ts';
import { reuseConnections } from './reuse-connections.ts';

export { k8s };

export function loadKubeConfig(
  env: Readonly<Record<string, string | undefined>> = process.env,
): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  if (env.KUBECONFIG) kc.loadFromFile(env.KUBECONFIG);
  else kc.loadFromCluster();
  return reuseConnections(kc);
}

/**
 * Per-call options that abort the request after `ms` (connect, send and read
 * included). Pass as the second argument of any generated API method.
 */
export function withDeadline(ms: number): k8s.ConfigurationOptions {
  return {
    // NB: the object-parameter API takes observable-style middleware.
    middleware: [
      {
        pre: (ctx) => {
          // NB: AbortSignal.timeout throws on fractional milliseconds.
          ctx.setSignal(AbortSignal.timeout(Math.max(1, Math.floor(ms))));
          return new k8s.Observable(Promise.resolve(ctx));
        },
        post: (res) => new k8s.Observable(Promise.resolve(res)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}

/** The HTTP status of a failed API call, or undefined when no answer came back. */
export function statusOf(err: unknown): number | undefined {
  if (err instanceof KubeApiError) return err.status;
  // NB: client-node's ApiException carries the HTTP status as `code`; Node's own errors
  // use `code` too (e.g. 23 for an aborted request), which is no HTTP status.
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'number' && code >= 100 && code <= 599 ? code : undefined;
}

/** Runs one API call and turns its failure into a KubeApiError naming `operation`. */
export async function kubeCall<T>(operation: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw new KubeApiError(operation, statusOf(err), { cause: err });
  }
}
