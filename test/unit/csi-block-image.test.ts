/**
 * The testbed driver's block kind as the tests read it (dev/csi/block-image.ts
 * readImageFile): an ext4 image read back clean gives the file's bytes; one whose
 * metadata was damaged (an inode cleared under its entry, as a stale inode-table write
 * of an old node could) is not clean, and the repair is named. The e2e's "the image is
 * clean" check (real-node-failover.test.ts) can therefore fail. Needs e2fsprogs
 * (mkfs.ext4, e2fsck, debugfs: dev/debian-packages.sh).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { imagePath, readImageFile } from '../../dev/csi/block-image.ts';

test('an image whose metadata is damaged is not clean', { timeout: 30_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-block-image-'));
  try {
    const image = imagePath(dir);
    const mkfs = spawnSync('mkfs.ext4', ['-q', '-F', image, '16384k'], { encoding: 'utf8' });
    assert.equal(mkfs.status, 0, mkfs.stderr);
    writeFileSync(join(dir, 'src'), 'bytes\n');
    const debugfs = (cmd: string) => spawnSync('debugfs', ['-w', '-R', cmd, image], { encoding: 'utf8' });
    debugfs(`write ${join(dir, 'src')} f`);
    const good = readImageFile(image, 'f');
    assert.deepEqual([good.clean, good.content?.toString()], [true, 'bytes\n'], good.fsckOutput);
    assert.equal(readImageFile(image, 'nope').content, undefined, 'a file it does not hold');
    debugfs('clri /f');
    const bad = readImageFile(image, 'f');
    assert.equal(bad.clean, false, `e2fsck's repair is damage: ${bad.fsckOutput}`);
    assert.match(bad.damage.join('\n'), /deleted\/unused inode/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
