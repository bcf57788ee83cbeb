/**
 * The previous release, for the tests that cross versions (an upgrade from it, its agent
 * with today's manager and the reverse): its sources taken from git at a pinned commit
 * (`git archive`, extracted once under ~/.cache/leasehold/image/src-<commit>/), its images
 * built from them by today's builder (build.ts) with that tree's own recipes
 * (dev/image/recipes.ts there: data only, so its Debian packages are its own), its chart
 * the one in that tree.
 *
 * leasehold has no tagged releases yet: the pin is the last main that landed before the
 * current line of work changed the agent, the manager and the chart; bump it (commit and
 * `what`) when a release is cut. Not guaranteed: that today's builder reads a future
 * pin's recipes (their shape is today's), nor that the tree compiles with today's
 * TypeScript and @types (tsc runs with this repository's dev dependencies; the runtime
 * node_modules are the old tree's own `npm ci --omit=dev`).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { LeaseholdError } from '../../lib/errors.ts';
import { REPO_ROOT } from '../helm/helm.ts';
import { buildImages, cacheRoot } from './build.ts';
import type { LocalImage } from './images.ts';
import type { ImageRecipe } from './recipes.ts';

const run = promisify(execFile);

export const PREVIOUS_RELEASE = {
  commit: 'b56362ed548254f29f3d121f14870612c0f8c186',
  what: 'main as landed on 2026-12-04: before witness promises, the storage gate without takeover by expiry, StorageClass provisioning, the monitoring pieces and the manager in layers',
} as const;

/** The pinned tree's sources, extracted once; throws naming the commit when this clone lacks it. */
export async function previousReleaseSource(commit: string = PREVIOUS_RELEASE.commit): Promise<string> {
  const dir = join(cacheRoot(), 'image', `src-${commit.slice(0, 16)}`);
  if (existsSync(join(dir, '.complete'))) return dir;
  const present = () =>
    run('git', ['-C', REPO_ROOT, 'cat-file', '-e', `${commit}^{commit}`]).then(
      () => undefined,
      (err: unknown) => err,
    );
  let missing = await present();
  if (missing) {
    // A shallow clone lacks it: deepen from the clone's origin when it can be reached.
    const { stdout } = await run('git', ['-C', REPO_ROOT, 'rev-parse', '--is-shallow-repository']);
    if (stdout.trim() === 'true') {
      await run('git', ['-C', REPO_ROOT, 'fetch', '--quiet', '--unshallow']).catch(() => {});
      missing = await present();
    }
  }
  if (missing) {
    const err = missing;
    throw new LeaseholdError(
      'E_PREVIOUS_RELEASE',
      `the previous release's commit ${commit} is not in this clone, nor could a \`git fetch --unshallow\` bring it`,
      { cause: err },
    );
  }
  const tmp = `${dir}.${process.pid}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  await run('bash', [
    '-c',
    `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`,
    'archive',
    REPO_ROOT,
    commit,
    tmp,
  ]);
  await writeFile(join(tmp, '.complete'), '');
  await rm(dir, { recursive: true, force: true });
  await rename(tmp, dir);
  return dir;
}

export interface PreviousRelease {
  commit: string;
  chartDir: string;
  images: { leasehold: LocalImage; nfsGanesha: LocalImage };
}

/** The previous release's chart and images (built on first use, cached like today's). */
export async function previousRelease(progress: (line: string) => void = () => {}): Promise<PreviousRelease> {
  const source = await previousReleaseSource();
  // Its own recipes (data only, no imports), so its images have its own packages.
  const { IMAGE_RECIPES: recipes } = (await import(join(source, 'dev', 'image', 'recipes.ts'))) as {
    IMAGE_RECIPES: readonly ImageRecipe[];
  };
  const { images } = await buildImages((l) => progress(`previous release's image ${l}`), source, recipes);
  const of = (name: string): LocalImage => {
    const i = images.find((x) => x.name === name);
    if (!i) throw new LeaseholdError('E_IMAGE_MISSING', `the previous release built no ${name} image`);
    return { tar: i.tar, ref: i.ref };
  };
  return {
    commit: PREVIOUS_RELEASE.commit,
    chartDir: join(source, 'charts', 'leasehold'),
    images: { leasehold: of('leasehold'), nfsGanesha: of('nfs-ganesha') },
  };
}
