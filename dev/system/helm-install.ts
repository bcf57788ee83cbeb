/**
 * Installs the project's Helm chart (charts/leasehold) into a local cluster with the
 * real helm CLI, so the DaemonSet controller puts a manager pod on every simulated node.
 * Errors: a failed build or install throws a LeaseholdError naming the command and
 * carrying helm's own output.
 */
import { LeaseholdError } from '../../lib/errors.ts';
import { CHART_DIR, helm } from '../helm/helm.ts';

export { CHART_DIR, REPO_ROOT } from '../helm/helm.ts';

export interface HelmInstall {
  kubeconfigPath: string;
  release: string;
  namespace: string;
  /** --set key=value pairs (chart values). */
  values: Record<string, string>;
  showProgress?: boolean;
}

export async function helmInstall(opts: HelmInstall): Promise<void> {
  const args = [
    'install',
    opts.release,
    CHART_DIR,
    '--namespace',
    opts.namespace,
    '--create-namespace',
    '--kubeconfig',
    opts.kubeconfigPath,
    ...Object.entries(opts.values).flatMap(([k, v]) => ['--set', `${k}=${v}`]),
  ];
  const result = await helm(args, {
    ...(opts.showProgress === undefined ? {} : { showProgress: opts.showProgress }),
  });
  if (result.code !== 0) {
    throw new LeaseholdError(
      'E_HELM_INSTALL',
      `helm ${args.join(' ')} failed with code ${result.code}: ${result.stderr.trim() || result.stdout.trim()}`,
    );
  }
}
