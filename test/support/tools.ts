/**
 * Runs the project's Go-built tools in tests: kubectl (from the control-plane build)
 * and helm (dev/helm/build.sh; built on first use, then cached).
 */
import { execFile, spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);
export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const chartDir = join(repoRoot, 'charts', 'leasehold');

let helmPath: Promise<string> | undefined;
export function helmBinary(): Promise<string> {
  helmPath ??= process.env.LEASEHOLD_HELM_BIN
    ? Promise.resolve(join(process.env.LEASEHOLD_HELM_BIN, 'helm'))
    : execFileP('bash', [join(repoRoot, 'dev', 'helm', 'build.sh')], { maxBuffer: 1 << 20 }).then((r) =>
        join(r.stdout.trim().split('\n').at(-1) ?? '', 'helm'),
      );
  return helmPath;
}

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `bin args`, feeding `input` on stdin; never throws for a non-zero exit. */
export function runTool(
  bin: string,
  args: readonly string[],
  opts: { input?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { env: { ...process.env, ...opts.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(opts.input ?? '');
  });
}

/** Runs helm with an isolated home (no user config or repositories leak in). */
export async function helm(
  args: readonly string[],
  opts: { input?: string; kubeconfig?: string } = {},
): Promise<RunResult> {
  const home = join(repoRoot, '.leasehold', 'helm-home');
  return runTool(await helmBinary(), args, {
    ...(opts.input === undefined ? {} : { input: opts.input }),
    env: {
      HELM_CACHE_HOME: join(home, 'cache'),
      HELM_CONFIG_HOME: join(home, 'config'),
      HELM_DATA_HOME: join(home, 'data'),
      ...(opts.kubeconfig ? { KUBECONFIG: opts.kubeconfig } : {}),
    },
  });
}
