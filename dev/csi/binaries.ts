/**
 * Where the CSI parts are: $LEASEHOLD_CSI_BIN when set (`dev/toolchain.sh --node` sets
 * it), else whatever dev/csi/build.sh prints (it builds on first use, showing progress
 * on stderr, and answers from the cache afterwards).
 */
import { execFile } from 'node:child_process';
import { access, constants } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseholdError } from '../../lib/errors.ts';

export const CSI_BINARIES = [
  'csi-attacher',
  'csi-provisioner',
  'csi-resizer',
  'leasehold-csi-hostdir',
  'leasehold-csi-registrar',
] as const;

export interface CsiBinaries {
  /** external-attacher's cmd/csi-attacher. */
  attacher: string;
  /** external-provisioner's cmd/csi-provisioner. */
  provisioner: string;
  /** external-resizer's cmd/csi-resizer. */
  resizer: string;
  /** The testbed's driver (plugin/driver): `-mode=controller` or `-mode=node`. */
  driver: string;
  /** Registers the driver's node socket with the kubelet (plugin/registrar). */
  registrar: string;
}

const buildScript = join(dirname(fileURLToPath(import.meta.url)), 'build.sh');

export async function csiBinaries(): Promise<CsiBinaries> {
  const dir = process.env.LEASEHOLD_CSI_BIN || (await build());
  for (const name of CSI_BINARIES) {
    try {
      await access(join(dir, name), constants.X_OK);
    } catch {
      throw new LeaseholdError(
        'E_CSI_BIN',
        `CSI binary ${name} is missing from ${dir}: run 'bash dev/csi/build.sh' (or unset LEASEHOLD_CSI_BIN)`,
      );
    }
  }
  return {
    attacher: join(dir, 'csi-attacher'),
    provisioner: join(dir, 'csi-provisioner'),
    resizer: join(dir, 'csi-resizer'),
    driver: join(dir, 'leasehold-csi-hostdir'),
    registrar: join(dir, 'leasehold-csi-registrar'),
  };
}

function build(): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile('bash', [buildScript], { maxBuffer: 1 << 20 }, (err, stdout) => {
      if (err)
        reject(
          new LeaseholdError('E_CSI_BUILD', `building the CSI parts failed (${buildScript}); see above`, {
            cause: err,
          }),
        );
      else resolve(stdout.trim().split('\n').at(-1) ?? '');
    });
    child.stderr?.pipe(process.stderr);
  });
}
