/**
 * node:test helper: one real control plane per test file, started in `before` and
 * stopped in `after` (also when a test fails). Set LEASEHOLD_KEEP_CLUSTER=1 to keep
 * the temp dir (logs, kubeconfig) of a failed run for reading.
 *
 * NB: call it at the top level of the file and put further setup in a `describe`'s
 * own `before`: another top-level `before` may run before the cluster is up.
 */
import { after, before } from 'node:test';
import { type Cluster, type ClusterOptions, startCluster } from '../../dev/cluster/cluster.ts';

export function useCluster(opts: ClusterOptions = {}): () => Cluster {
  let cluster: Cluster | undefined;
  before(
    async () => {
      cluster = await startCluster(opts);
    },
    { timeout: 300_000 },
  );
  after(async () => {
    await cluster?.stop({ keepDir: process.env.LEASEHOLD_KEEP_CLUSTER === '1' });
  });
  return () => {
    if (!cluster)
      throw new Error('the test cluster is not running (did its start fail? see the before hook)');
    return cluster;
  };
}

/** Polls `check` every `intervalMs` until it returns a value other than undefined. */
export async function eventually<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs = 30_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown;
  while (performance.now() < deadline) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      lastError = err;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? `: ${String(lastError)}` : ''}`,
  );
}
