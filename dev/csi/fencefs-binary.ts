/**
 * Where leasehold-fencefs (dev/fuse/) is: LEASEHOLD_FENCEFS_BIN when set (dev/toolchain.sh
 * --fuse), else built now into the per-version cache by dev/fuse/build.sh (seconds when
 * cached; needs Go the first time). Resolved once per process.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

let resolved: string | undefined;

export function fencefsBinary(): string {
  if (resolved) return resolved;
  if (!existsSync('/dev/fuse'))
    throw new Error(
      'the fencing storage needs FUSE: /dev/fuse does not exist (load the fuse module, or use storage shared)',
    );
  const fromEnv = process.env.LEASEHOLD_FENCEFS_BIN;
  if (fromEnv) {
    if (!existsSync(fromEnv)) throw new Error(`LEASEHOLD_FENCEFS_BIN=${fromEnv}: no such file`);
    resolved = fromEnv;
    return resolved;
  }
  // dev/csi -> dev/fuse (also from dist/dev/csi: ../../../dev/fuse)
  const here = fileURLToPath(new URL('.', import.meta.url));
  const candidates = [join(here, '../fuse/build.sh'), join(here, '../../../dev/fuse/build.sh')];
  const script = candidates.find((p) => existsSync(p));
  if (!script)
    throw new Error(`leasehold-fencefs: dev/fuse/build.sh not found (looked at ${candidates.join(', ')})`);
  let bin: string;
  try {
    bin = execFileSync('bash', [script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  } catch (err) {
    throw new Error(`leasehold-fencefs: building it with ${script} failed`, { cause: err });
  }
  resolved = join(bin, 'leasehold-fencefs');
  return resolved;
}
