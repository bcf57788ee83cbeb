/**
 * Where the locally built images are: $LEASEHOLD_IMAGE_DIR when set (`dev/toolchain.sh
 * --image` sets it), else what build.ts makes (it builds what is missing, showing
 * progress on stderr, and answers from its cache afterwards).
 * Each image: the OCI layout tarball to import (RealNode.importImage) and the name the
 * pods use (imagePullPolicy: Never; nothing is pulled from a registry).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { LeaseholdError } from '../../lib/errors.ts';
import { buildImages } from './build.ts';
import { IMAGE_RECIPES } from './recipes.ts';

export interface LocalImage {
  tar: string;
  ref: string;
}

export async function localImages(): Promise<Record<string, LocalImage>> {
  const dir =
    process.env.LEASEHOLD_IMAGE_DIR ||
    (await buildImages((l) => process.stderr.write(`leasehold: image ${l}\n`))).dir;
  const out: Record<string, LocalImage> = {};
  for (const { name } of IMAGE_RECIPES) {
    const tar = join(dir, `${name}.oci.tar`);
    const refFile = join(dir, `${name}.image`);
    if (!existsSync(tar) || !existsSync(refFile))
      throw new LeaseholdError(
        'E_IMAGE_MISSING',
        `${dir} has no ${name}.oci.tar and ${name}.image: run dev/image/build.ts`,
      );
    out[name] = { tar, ref: readFileSync(refFile, 'utf8').trim() };
  }
  return out;
}
