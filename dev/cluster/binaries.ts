/**
 * Where the control-plane binaries are: $LEASEHOLD_KUBE_BIN when set (dev/toolchain.sh
 * sets it), else whatever dev/kube/build.sh prints (it builds on first use, showing
 * progress on stderr, and answers from the cache afterwards).
 */
import { execFile } from 'node:child_process';
import { access, constants } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseholdError } from '../../lib/errors.ts';

export const COMPONENTS = [
  'etcd',
  'kube-apiserver',
  'kube-scheduler',
  'kube-controller-manager',
  'kubectl',
] as const;
const buildScript = join(dirname(fileURLToPath(import.meta.url)), '..', 'kube', 'build.sh');

export async function kubeBinDir(): Promise<string> {
  const dir = process.env.LEASEHOLD_KUBE_BIN || (await build());
  for (const name of COMPONENTS) {
    try {
      await access(join(dir, name), constants.X_OK);
    } catch {
      throw new LeaseholdError(
        'E_KUBE_BIN',
        `control-plane binary ${name} is missing from ${dir}: run 'bash dev/kube/build.sh' (or unset LEASEHOLD_KUBE_BIN)`,
      );
    }
  }
  return dir;
}

function build(): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile('bash', [buildScript], { maxBuffer: 1 << 20 }, (err, stdout) => {
      if (err)
        reject(
          new LeaseholdError(
            'E_KUBE_BUILD',
            `building the control plane failed (${buildScript}); see the messages above`,
            { cause: err },
          ),
        );
      else resolve(stdout.trim().split('\n').at(-1) ?? '');
    });
    child.stderr?.pipe(process.stderr);
  });
}
