/**
 * The fencing storage's block kind (real FUSE, loop devices and ext4; needs root like the
 * simulator): one ext4 image each node mounts through its own revocable view.
 *  - after revoke, a frozen writer that resumes gets EIO from fsync; the journal's next
 *    commit fails and aborts it, and from then every write fails (EROFS); the next node mounts the image (journal
 *    replay) and finds exactly what was fsynced before the revoke, as does a read of the
 *    image itself (e2fsck -fp clean); the views' stats show n1's last write before the
 *    revoke, n2's first after it, and n1's refused requests; stop() leaves nothing
 *    (leftover check);
 *  - an image whose metadata was damaged (an inode cleared under its entry) is not clean;
 *  - a killed run (the whole process group SIGKILLed, leasehold-fencefs with it) leaves an
 *    ext4 mount, its loop device and a dead view: the leftover check reports them (so it
 *    fails when something is left), and the next storage's sweep removes them.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { writesAcrossRevokes } from '../../dev/csi/access-log.ts';
import { BLOCK_FS_ATTRIBUTE, createImage, imagePath, readImageFile } from '../../dev/csi/block-image.ts';
import {
  FENCING_ATTRIBUTE,
  FencingStorage,
  viewLink,
  volumeKindOf,
} from '../../dev/sim/storage/fencing-storage.ts';
import {
  claimStorage,
  describeStorageLeftovers,
  findStorageLeftovers,
  hostStorageSnapshot,
  ownerFile,
  type StorageLeftover,
  sweepDeadStorage,
} from '../../dev/sim/storage/storage-leftovers.ts';
import { sleep } from '../../lib/clock.ts';

const WRITER = `
const fs = require('node:fs');
const fd = fs.openSync(process.argv[1], 'a');
let n = 0;
const t = setInterval(() => {
  try { fs.writeSync(fd, 'line ' + (n + 1) + '\\n'); fs.fsyncSync(fd); n++; console.log('synced ' + n); }
  catch (err) { console.log('error ' + err.code); clearInterval(t); process.exit(0); }
}, 30);
`;

const leftovers = (root: string) => findStorageLeftovers(hostStorageSnapshot(), root);

/** Removes a test's root once nothing of the storage is left in it (else keeps it for the sweep). */
async function removeIfClean(root: string): Promise<void> {
  if ((await waitNoLeftovers(root)).length === 0) rmSync(root, { recursive: true, force: true });
}

async function waitNoLeftovers(root: string, timeoutMs = 10_000): Promise<StorageLeftover[]> {
  const deadline = performance.now() + timeoutMs;
  let left = leftovers(root);
  while (left.length > 0 && performance.now() < deadline) {
    await sleep(100);
    left = leftovers(root);
  }
  return left;
}

test('the PV attributes pick the kind', () => {
  assert.equal(volumeKindOf(undefined), undefined);
  assert.equal(volumeKindOf({ [BLOCK_FS_ATTRIBUTE]: 'ext4' }), undefined, 'not fencing: the shared dir');
  assert.equal(volumeKindOf({ [FENCING_ATTRIBUTE]: 'true' }), 'directory');
  assert.equal(volumeKindOf({ [FENCING_ATTRIBUTE]: 'true', [BLOCK_FS_ATTRIBUTE]: 'ext4' }), 'ext4');
  const bad = volumeKindOf({ [FENCING_ATTRIBUTE]: 'true', [BLOCK_FS_ATTRIBUTE]: 'xfs' });
  assert.ok(bad instanceof Error && /makes only ext4/.test(bad.message), String(bad));
});

test('ext4 through a revoked view: fsync fails with EIO, then every write; the next node sees only what was synced before', {
  timeout: 60_000,
}, async () => {
  const root = mkdtempSync(join(tmpdir(), 'leasehold-storage-block-'));
  const storage = new FencingStorage(root);
  try {
    const fs1 = await storage.grant('pv-b', 'n1', 'ext4');
    assert.equal(realpathSync(viewLink(root, 'pv-b', 'n1')), fs1);
    assert.equal(await storage.grant('pv-b', 'n1', 'ext4'), fs1, 'grant is idempotent while live');
    const mount = hostStorageSnapshot().mounts.find((m) => m.mountpoint === fs1);
    assert.equal(mount?.fstype, 'ext4', `an ext4 file system at ${fs1}`);
    assert.match(mount?.source ?? '', /^\/dev\/loop\d+$/);
    writeFileSync(join(fs1, 'hello'), 'through the view\n');
    assert.equal(spawnSync('sync', ['-f', fs1]).status, 0, 'syncfs through a live view');

    const writer = spawn(process.execPath, ['-e', WRITER, join(fs1, 'records')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const lines: string[] = [];
    createInterface({ input: writer.stdout }).on('line', (l) => lines.push(l));
    const exited = new Promise<void>((resolve) => writer.on('exit', () => resolve()));
    while (lines.length < 3) await sleep(20);
    writer.kill('SIGSTOP');
    await storage.revoke('pv-b', 'n1');
    writer.kill('SIGCONT');
    await exited;
    // Counted once the writer is gone: a stop between a line's fsync and its print shows
    // the line's `synced` only after SIGCONT, and an fsync begun after the revoke fails,
    // so the final count is exactly what was durable before the revoke.
    const synced = lines.filter((l) => l.startsWith('synced')).length;
    assert.equal(
      lines.at(-1),
      'error EIO',
      `the resumed writer's fsync fails with EIO: ${lines.join(' | ')}`,
    );

    // Its next journal commit fails and aborts the journal: syncfs forces one (NB: its
    // exit status reports only errors since its own open), else ext4's 5 s commit timer.
    spawnSync('sync', ['-f', fs1]);
    let late: NodeJS.ErrnoException | undefined;
    const until = performance.now() + 15_000;
    for (let i = 0; late === undefined && performance.now() < until; i++) {
      try {
        writeFileSync(join(fs1, `late-${i}`), 'x');
        await sleep(200);
      } catch (err) {
        late = err as NodeJS.ErrnoException;
      }
    }
    assert.ok(
      late && ['EIO', 'EROFS'].includes(late.code ?? ''),
      `once its journal aborted, every write fails: ${late?.code}`,
    );
    assert.throws(
      () => writeFileSync(join(fs1, 'later'), 'x'),
      (err: NodeJS.ErrnoException) => ['EIO', 'EROFS'].includes(err.code ?? ''),
    );

    const fs2 = await storage.grant('pv-b', 'n2', 'ext4');
    const expected = Array.from({ length: synced }, (_, i) => `line ${i + 1}\n`).join('');
    assert.equal(readFileSync(join(fs2, 'hello'), 'utf8'), 'through the view\n');
    assert.equal(
      readFileSync(join(fs2, 'records'), 'utf8'),
      expected,
      'n2 sees what was synced before the revoke',
    );
    writeFileSync(join(fs2, 'records'), 'n2\n', { flag: 'a' });
    spawnSync('sync', ['-f', fs2]);
    const read = readImageFile(imagePath(join(root, 'volumes', 'pv-b')), 'records', fs2);
    assert.ok(read.clean, `e2fsck -fp finds the image clean: ${read.fsckOutput}`);
    assert.equal(read.content?.toString(), `${expected}n2\n`);
    assert.equal(readImageFile(imagePath(join(root, 'volumes', 'pv-b')), 'nope').content, undefined);

    // The storage's own record: n1's last write before its revoke, n2's first after; n1 kept trying.
    const views = await storage.viewStats('pv-b');
    assert.deepEqual(
      views.map((v) => v.node),
      ['n1', 'n2'],
    );
    assert.ok(
      views.every((v) => (v.stats?.writes ?? 0) > 0),
      JSON.stringify(views),
    );
    assert.deepEqual(
      writesAcrossRevokes(
        storage.log,
        'pv-b',
        views.flatMap((v) => (v.stats ? [{ node: v.node, grantSeq: v.grantSeq, ...v.stats }] : [])),
      ),
      [],
    );
    assert.ok(
      (views[0]?.stats?.refused ?? 0) > 0,
      `the revoked view refused the resumed writer: ${JSON.stringify(views)}`,
    );
  } finally {
    await storage.stop();
    await removeIfClean(root);
  }
  const left = await waitNoLeftovers(root);
  assert.deepEqual(left, [], describeStorageLeftovers(root, left));
});

test('an image whose metadata is damaged is not clean', { timeout: 30_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-storage-block-'));
  try {
    assert.equal(createImage(dir, 16 * 1024 * 1024), true);
    assert.equal(createImage(dir), false, 'an image is never made twice');
    const image = imagePath(dir);
    writeFileSync(join(dir, 'src'), 'bytes\n');
    const debugfs = (cmd: string) => spawnSync('debugfs', ['-w', '-R', cmd, image], { encoding: 'utf8' });
    debugfs(`write ${join(dir, 'src')} f`);
    const good = readImageFile(image, 'f');
    assert.deepEqual([good.clean, good.content?.toString()], [true, 'bytes\n'], good.fsckOutput);
    // As a stale inode-table write of an old node could: the entry's inode cleared.
    debugfs('clri /f');
    const bad = readImageFile(image, 'f');
    assert.equal(bad.clean, false, `e2fsck's repair is damage: ${bad.fsckOutput}`);
    assert.match(bad.damage.join('\n'), /deleted\/unused inode/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a killed run leaves an ext4 mount, a loop device and a dead view: the check finds them, the next storage sweeps them', {
  timeout: 60_000,
}, async () => {
  const root = mkdtempSync(join(tmpdir(), 'leasehold-storage-block-'));
  const script = `
    import { FencingStorage } from ${JSON.stringify(new URL('../../dev/sim/storage/fencing-storage.ts', import.meta.url).href)};
    const s = new FencingStorage(${JSON.stringify(root)});
    await s.grant('pv-k', 'n1', 'ext4');
    console.log('granted');
    setInterval(() => {}, 1000);
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
    detached: true, // its own process group: SIGKILL to it takes leasehold-fencefs along
  });
  await new Promise<void>((resolve) =>
    createInterface({ input: child.stdout }).on('line', (l) => l === 'granted' && resolve()),
  );
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  // Other test files' storages sweep every dead owner's root when they start, so the
  // killed run's root is marked ours (alive) until checkKilledRun gives it back.
  const deadOwner = readFileSync(ownerFile(root), 'utf8');
  claimStorage(root);
  process.kill(-(child.pid ?? 0), 'SIGKILL');
  await exited;
  try {
    await checkKilledRun(root, deadOwner);
  } finally {
    sweepDeadStorage();
    await removeIfClean(root);
  }
});

async function checkKilledRun(root: string, deadOwner: string): Promise<void> {
  await sleep(300);
  const left = leftovers(root);
  const kinds = new Set(left.map((l) => (l.kind === 'mount' ? `mount ${l.fstype}` : l.kind)));
  assert.ok(
    kinds.has('mount ext4') && kinds.has('loop') && kinds.has('mount fuse.leasehold-fencefs'),
    `the leftover check finds what the killed run left: ${describeStorageLeftovers(root, left)}`,
  );
  // The killed owner back, and swept in the same tick (before another file's sweep).
  writeFileSync(ownerFile(root), deadOwner);
  const sweep = sweepDeadStorage();
  assert.deepEqual(sweep.problems, []);
  assert.ok(sweep.swept.length >= 2, JSON.stringify(sweep));
  const after = await waitNoLeftovers(root);
  assert.deepEqual(after, [], describeStorageLeftovers(root, after));
}
