/**
 * Installs the project's Helm chart (charts/leasehold) into a local cluster with the
 * real helm CLI, so the DaemonSet controller puts a manager pod on every node; and
 * upgrades it to other values (`helmUpgrade`: the install's own values plus others,
 * everything else back to the chart's defaults), as a user changes a setting.
 * Errors: a failed build, install, upgrade or read throws a LeaseholdError naming the
 * command and carrying helm's own output.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
  /** The chart's directory; default this repository's charts/leasehold (CHART_DIR). */
  chart?: string;
}

export async function helmInstall(opts: HelmInstall): Promise<void> {
  const args = [
    'install',
    opts.release,
    opts.chart ?? CHART_DIR,
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

export interface HelmRelease {
  kubeconfigPath: string;
  release: string;
  namespace: string;
}

/** The values the release was installed or last upgraded with (`helm get values -o json`). */
export async function helmUserValues(opts: HelmRelease): Promise<Record<string, unknown>> {
  const args = [
    'get',
    'values',
    opts.release,
    '--namespace',
    opts.namespace,
    '--kubeconfig',
    opts.kubeconfigPath,
  ];
  const result = await helm([...args, '--output', 'json']);
  if (result.code !== 0)
    throw new LeaseholdError(
      'E_HELM_VALUES',
      `helm ${args.join(' ')} failed with code ${result.code}: ${result.stderr.trim() || result.stdout.trim()}`,
    );
  const parsed: unknown = JSON.parse(result.stdout.trim() || '{}');
  return parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : {};
}

/**
 * `helm upgrade --reset-values -f <base> --set <values>`: the release gets exactly `base`
 * (e.g. what helmUserValues read after the install) and `values` on top; every other
 * value is the chart's default again, so one upgrade's settings never leak into the next.
 */
export async function helmUpgrade(
  opts: HelmRelease & { base: Record<string, unknown>; values: Record<string, string>; chart?: string },
): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-helm-'));
  try {
    const baseFile = join(dir, 'base.json');
    writeFileSync(baseFile, JSON.stringify(opts.base));
    const args = [
      'upgrade',
      opts.release,
      opts.chart ?? CHART_DIR,
      '--namespace',
      opts.namespace,
      '--kubeconfig',
      opts.kubeconfigPath,
      '--reset-values',
      '--values',
      baseFile,
      ...Object.entries(opts.values).flatMap(([k, v]) => ['--set', `${k}=${v}`]),
    ];
    const result = await helm(args);
    if (result.code !== 0)
      throw new LeaseholdError(
        'E_HELM_UPGRADE',
        `helm ${args.join(' ')} failed with code ${result.code}: ${result.stderr.trim() || result.stdout.trim()}`,
      );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
