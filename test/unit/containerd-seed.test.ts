import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { linkContainerdSeed } from '../../dev/node/containerd-seed.ts';

test('a seeded containerd root: blobs and snapshots hard-linked, every bolt database a copy of its own; never over an existing root', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-seed-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const seed = join(dir, 'seed');
  const files = {
    blob: 'io.containerd.content.v1.content/blobs/sha256/ab12',
    layer: 'io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/bin/sh',
    meta: 'io.containerd.metadata.v1.bolt/meta.db',
    snapMeta: 'io.containerd.snapshotter.v1.overlayfs/metadata.db',
  };
  for (const [name, path] of Object.entries(files)) {
    await mkdir(join(seed, path, '..'), { recursive: true });
    await writeFile(join(seed, path), name);
  }
  const node = join(dir, 'node-1', 'containerd', 'root');
  await linkContainerdSeed(seed, node);
  const ino = async (root: string, path: string) => (await stat(join(root, path))).ino;
  for (const path of [files.blob, files.layer])
    assert.equal(await ino(node, path), await ino(seed, path), `${path} is a hard link`);
  for (const path of [files.meta, files.snapMeta]) {
    assert.notEqual(await ino(node, path), await ino(seed, path), `${path} is a copy`);
    assert.equal(await readFile(join(node, path), 'utf8'), await readFile(join(seed, path), 'utf8'));
  }
  await writeFile(join(node, files.meta), 'node-1 wrote');
  assert.equal(
    await readFile(join(seed, files.meta), 'utf8'),
    'meta',
    "a node's database write stays its own",
  );
  await assert.rejects(linkContainerdSeed(seed, node), /exists: a seed goes only into a new containerd root/);
});
