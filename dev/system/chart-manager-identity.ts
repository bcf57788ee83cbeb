/**
 * The manager's identity exactly as the chart grants it, for tests and benchmarks that
 * run the manager process themselves: the chart's templates (its RBAC, and any other
 * template asked for, such as the StorageClass) rendered by helm and applied, and a
 * kubeconfig holding a token of the chart's manager ServiceAccount. A manager given that
 * kubeconfig can do what an installed one can, and nothing more.
 */
import * as k8s from '@kubernetes/client-node';
import { LeaseholdError } from '../../lib/errors.ts';
import type { Cluster } from '../cluster/types.ts';
import { CHART_DIR, helm, runTool } from '../helm/helm.ts';

/** The chart's manager ServiceAccount (templates/manager-rbac.yaml). */
export const CHART_MANAGER_ACCOUNT = 'leasehold-manager';

export async function applyChartManagerIdentity(
  cluster: Cluster,
  opts: {
    /** The release namespace (created when missing). */
    namespace: string;
    /** Where to write the kubeconfig. */
    kubeconfigPath: string;
    /** Further templates to apply, e.g. 'templates/storage-class.yaml'. */
    templates?: string[];
    /** Token lifetime (default 1 h). */
    expirationSeconds?: number;
  },
): Promise<void> {
  const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
  await core
    .createNamespace({ body: { metadata: { name: opts.namespace } } })
    .catch((err: { code?: number }) => {
      if (err.code !== 409) throw err;
    });
  const shown = ['templates/manager-rbac.yaml', ...(opts.templates ?? [])].flatMap((t) => ['--show-only', t]);
  const rendered = await helm(['template', 'leasehold', CHART_DIR, '--namespace', opts.namespace, ...shown]);
  if (rendered.code !== 0)
    throw new LeaseholdError(
      'E_CHART_RENDER',
      `helm template of the chart's manager identity failed: ${rendered.stderr}`,
    );
  const applied = await runTool(
    cluster.kubectl,
    ['--kubeconfig', cluster.kubeconfigPath, 'apply', '-f', '-'],
    {
      input: rendered.stdout,
    },
  );
  if (applied.code !== 0)
    throw new LeaseholdError(
      'E_CHART_APPLY',
      `kubectl apply of the chart's manager identity failed: ${applied.stderr}`,
    );
  const token = await core.createNamespacedServiceAccountToken({
    namespace: opts.namespace,
    name: CHART_MANAGER_ACCOUNT,
    body: { spec: { audiences: [], expirationSeconds: opts.expirationSeconds ?? 3600 } },
  });
  await cluster.writeTokenKubeconfig(opts.kubeconfigPath, token.status?.token ?? '');
}
