/**
 * A node's containerd root with the images already in it, as a node image with
 * pre-pulled images boots: built once per set of image tars by the nodes' own containerd
 * (`ctr images import`, unpacked into overlayfs snapshots), cached under
 * ~/.cache/leasehold/image/containerd-seed-<key>/, and given to each new node by hard
 * links (linkContainerdSeed) before its containerd first starts.
 *
 * Why: importing the two project images costs each node about 12 s of containerd's CPU
 * (zstd and unpacking; measured 2026-12-07 on the 2-core machine: 3.4 s and 10.4 s of
 * wall time alone), and a full test run starts about 22 nodes; hard-linking the unpacked
 * root costs about 1 s of system time per node.
 *
 * Guarantees: the files a containerd rewrites in place (its bolt databases, `*.db`) are
 * copies per node; everything else linked is content-addressed blobs and committed
 * snapshots, which containerd never writes (a container's writes go to a new upper
 * snapshot of its own). The seed is complete or absent: built in a scratch dir, renamed
 * into place; concurrent builders of the same key wait for one (a lock file holding the
 * builder's pid; a dead builder's lock is taken over). The seed's containerd ran in a
 * mount namespace of its own, so no mount of it outlives it on the host.
 * Not guaranteed: that a seed built by another containerd version works (the key names
 * the binaries' directory, which names their versions); old seeds beyond the newest
 * three are removed when a new one is made.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import {
  copyFile,
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  unlink,
  writeFile,
} from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';
import { cacheRoot } from '../image/build.ts';
import { CONTAINERD_DISABLED_PLUGINS, disabledPlugins } from './config.ts';

const run = promisify(execFile);

const KEEP_SEEDS = 3;

const seedsDir = () => join(cacheRoot(), 'image');

/** The seed's key: the containerd build (its directory names its versions) and each tar by path, size and mtime. */
export async function seedKey(binDir: string, tars: readonly string[]): Promise<string> {
  const h = createHash('sha256').update(`${basename(binDir)}\0`);
  for (const t of tars) {
    const s = await stat(t);
    h.update(`${t}\0${s.size}\0${s.mtimeMs}\0`);
  }
  return h.digest('hex').slice(0, 16);
}

/** The minimal config of the seed's containerd: the node's root layout (overlayfs), nothing else. */
export function seedContainerdConfig(root: string, state: string, socket: string): string {
  return `version = 3
root = '${root}'
state = '${state}'
disabled_plugins = [
${disabledPlugins([...CONTAINERD_DISABLED_PLUGINS, 'io.containerd.grpc.v1.cri'])}
]

[grpc]
  address = '${socket}'
`;
}

const pidAlive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
};

/** Holds `lock` (O_EXCL, our pid inside) while `fn` runs; waits for a live holder, takes a dead one's. */
async function withLock<T>(lock: string, done: () => boolean, fn: () => Promise<T>): Promise<T | undefined> {
  for (;;) {
    try {
      const fh = await open(lock, 'wx');
      await fh.writeFile(String(process.pid));
      await fh.close();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const holder = Number((await readFile(lock, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(holder) && holder > 0 && !pidAlive(holder)) await unlink(lock).catch(() => {});
      else await sleep(500);
      if (done()) return undefined;
    }
  }
  try {
    return await fn();
  } finally {
    await unlink(lock).catch(() => {});
  }
}

/**
 * The cached containerd root holding `tars` (imported into namespace k8s.io), built on
 * first use with the containerd and ctr of `binDir`. Returns the root's path.
 */
export async function containerdSeed(
  binDir: string,
  tars: readonly string[],
  progress: (line: string) => void = () => {},
): Promise<string> {
  const dir = seedsDir();
  await mkdir(dir, { recursive: true });
  const final = join(dir, `containerd-seed-${await seedKey(binDir, tars)}`);
  const root = join(final, 'root');
  if (existsSync(join(final, '.complete'))) return root;
  await withLock(
    `${final}.lock`,
    () => existsSync(join(final, '.complete')),
    async () => {
      if (existsSync(join(final, '.complete'))) return;
      const t0 = performance.now();
      const work = `${final}.${process.pid}.tmp`;
      await rm(work, { recursive: true, force: true });
      await mkdir(join(work, 'state'), { recursive: true });
      const socket = join(work, 'containerd.sock');
      const config = join(work, 'config.toml');
      await writeFile(config, seedContainerdConfig(join(work, 'root'), join(work, 'state'), socket));
      // Its own mount namespace: the overlay mounts of unpacking never reach the host's.
      const containerd = spawn(
        'unshare',
        ['--mount', '--propagation', 'private', join(binDir, 'containerd'), '--config', config],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let log = '';
      containerd.stderr?.on('data', (d: Buffer) => {
        log = (log + d.toString()).slice(-4000);
      });
      const exited = new Promise<void>((resolve) => containerd.once('exit', () => resolve()));
      const ctr = (args: string[]) =>
        run(join(binDir, 'ctr'), ['--address', socket, '--namespace', 'k8s.io', ...args], {
          timeout: 300_000,
          maxBuffer: 16 << 20,
        });
      try {
        for (let i = 0; ; i++) {
          try {
            await ctr(['version']);
            break;
          } catch (err) {
            if (i >= 100 || containerd.exitCode !== null)
              throw new LeaseholdError('E_SEED', `the seed's containerd did not start: ${log.trim()}`, {
                cause: err,
              });
            await sleep(200);
          }
        }
        for (const tar of tars) await ctr(['images', 'import', '--platform', 'linux/amd64', tar]);
      } finally {
        containerd.kill('SIGTERM');
        await Promise.race([exited, sleep(15_000)]);
        if (containerd.exitCode === null && containerd.signalCode === null) {
          containerd.kill('SIGKILL');
          await exited;
        }
      }
      // Each node's containerd makes its own identity.
      await rm(join(work, 'root', 'io.containerd.grpc.v1.introspection'), { recursive: true, force: true });
      await rm(join(work, 'state'), { recursive: true, force: true });
      await writeFile(join(work, '.complete'), '');
      await rm(final, { recursive: true, force: true });
      await rename(work, final);
      progress(
        `containerd seed with ${tars.map((t) => basename(t)).join(', ')} made in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
      );
      await pruneSeeds(dir, basename(final));
    },
  );
  if (!existsSync(join(final, '.complete')))
    throw new LeaseholdError('E_SEED', `the containerd seed ${final} was not made (another builder failed?)`);
  return root;
}

/** Removes all but the newest KEEP_SEEDS seeds (never `keep`). */
async function pruneSeeds(dir: string, keep: string): Promise<void> {
  const seeds = [];
  for (const name of await readdir(dir)) {
    if (!/^containerd-seed-[0-9a-f]{16}$/.test(name) || name === keep) continue;
    const s = await stat(join(dir, name)).catch(() => undefined);
    if (s) seeds.push({ name, mtimeMs: s.mtimeMs });
  }
  seeds.sort((a, b) => b.mtimeMs - a.mtimeMs);
  for (const s of seeds.slice(KEEP_SEEDS - 1)) await rm(join(dir, s.name), { recursive: true, force: true });
}

/** The files under `dir` that a containerd rewrites in place (bolt databases). */
async function boltFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile() && e.name.endsWith('.db')) out.push(join(e.parentPath, e.name));
  }
  return out;
}

/** Gives `target` (which must not exist) the seed's content: hard links, the bolt databases copied. */
export async function linkContainerdSeed(seedRoot: string, target: string): Promise<void> {
  if (existsSync(target))
    throw new LeaseholdError('E_SEED', `${target} exists: a seed goes only into a new containerd root`);
  await mkdir(dirname(target), { recursive: true });
  await run('cp', ['-al', seedRoot, target]);
  for (const db of await boltFiles(target)) {
    const copy = `${db}.copy`;
    await copyFile(db, copy);
    await rename(copy, db);
  }
}
