/**
 * Installs the project's Helm chart (charts/leasehold) into a local cluster with the
 * real helm CLI (dev/helm/build.sh builds it on first use; its progress goes to our
 * stderr), so the DaemonSet controller puts a manager pod on every simulated node.
 *
 * Helm runs with an isolated home (no user config or repositories leak in).
 * Errors: a failed build or install throws a LeaseholdError naming the command and
 * carrying helm's own output.
 */
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseholdError } from '../../lib/errors.ts';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CHART_DIR = join(REPO_ROOT, 'charts', 'leasehold');

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

function run(
  bin: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  showStderr: boolean,
): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      if (showStderr) process.stderr.write(d);
    });
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
  });
}

let helmDir: Promise<string> | undefined;

/** The directory of the helm binary: LEASEHOLD_HELM_BIN, else built (once) by dev/helm/build.sh. */
export function helmBinDir(showProgress = false): Promise<string> {
  helmDir ??= (async () => {
    if (process.env.LEASEHOLD_HELM_BIN) return process.env.LEASEHOLD_HELM_BIN;
    const built = await run('bash', [join(REPO_ROOT, 'dev', 'helm', 'build.sh')], process.env, showProgress);
    const dir = built.stdout.trim().split('\n').at(-1) ?? '';
    if (built.code !== 0 || dir === '') {
      throw new LeaseholdError(
        'E_HELM_BUILD',
        `building helm (dev/helm/build.sh) failed with code ${built.code}: ${built.stderr.slice(-2000)}`,
      );
    }
    return dir;
  })();
  return helmDir;
}

export interface HelmInstall {
  kubeconfigPath: string;
  release: string;
  namespace: string;
  /** --set-string key=value pairs (chart values). */
  values: Record<string, string>;
  showProgress?: boolean;
}

export async function helmInstall(opts: HelmInstall): Promise<void> {
  const bin = join(await helmBinDir(opts.showProgress), 'helm');
  const home = join(REPO_ROOT, '.leasehold', 'helm-home');
  mkdirSync(home, { recursive: true });
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
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_DATA_HOME: join(home, 'data'),
  };
  const result = await run(bin, args, env, false);
  if (result.code !== 0) {
    throw new LeaseholdError(
      'E_HELM_INSTALL',
      `helm ${args.join(' ')} failed with code ${result.code}: ${result.stderr.trim() || result.stdout.trim()}`,
    );
  }
}
