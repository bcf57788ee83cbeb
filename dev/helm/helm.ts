/**
 * Running the project's helm CLI (dev/helm/build.sh builds it on first use, then it
 * comes from the cache) and other tools as child processes, for the demo, tests and
 * benchmarks. Helm runs with an isolated home, so no user config or repository leaks in.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseholdError } from '../../lib/errors.ts';

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const CHART_DIR = join(REPO_ROOT, 'charts', 'leasehold');

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  /** Fed on stdin (stdin is closed either way). */
  input?: string;
  /** Added to (or, with replaceEnv, instead of) this process's environment. */
  env?: NodeJS.ProcessEnv;
  replaceEnv?: boolean;
  /** Copy the tool's stderr to ours as it comes (build progress). */
  showStderr?: boolean;
}

/** Runs `bin args`; never throws for a non-zero exit (the caller reads `code`). */
export function runTool(bin: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const env = opts.replaceEnv ? opts.env : { ...process.env, ...opts.env };
    const child = spawn(bin, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
      if (opts.showStderr) process.stderr.write(d);
    });
    child.once('error', reject);
    child.once('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(opts.input ?? '');
  });
}

let helmDir: Promise<string> | undefined;

/** The directory of the helm binary: LEASEHOLD_HELM_BIN, else built (once) by dev/helm/build.sh. */
export function helmBinDir(showProgress = false): Promise<string> {
  helmDir ??= (async () => {
    if (process.env.LEASEHOLD_HELM_BIN) return process.env.LEASEHOLD_HELM_BIN;
    const built = await runTool('bash', [join(REPO_ROOT, 'dev', 'helm', 'build.sh')], {
      showStderr: showProgress,
    });
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

/** Runs helm with an isolated home; `kubeconfig` selects the cluster. */
export async function helm(
  args: readonly string[],
  opts: { input?: string; kubeconfig?: string; showProgress?: boolean } = {},
): Promise<RunResult> {
  const home = join(REPO_ROOT, '.leasehold', 'helm-home');
  return runTool(join(await helmBinDir(opts.showProgress), 'helm'), args, {
    ...(opts.input === undefined ? {} : { input: opts.input }),
    replaceEnv: true,
    env: {
      PATH: process.env.PATH,
      HOME: home,
      HELM_CACHE_HOME: join(home, 'cache'),
      HELM_CONFIG_HOME: join(home, 'config'),
      HELM_DATA_HOME: join(home, 'data'),
      ...(opts.kubeconfig ? { KUBECONFIG: opts.kubeconfig } : {}),
    },
  });
}
