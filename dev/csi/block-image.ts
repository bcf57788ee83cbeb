/**
 * Reading the testbed driver's block kind (dev/csi/README.md, the fencing mode; issue
 * 11): a volume that is one ext4 file system in an image file,
 * `<backing>/<volume>/disk.img` (made by the driver: plugin/driver/block.go), which
 * each node mounts through its own revocable view, so a revoked node's writeback,
 * journal commits and fsync fail with EIO. What the tests read of it, as a node
 * mounting it next would see it: readImageFile copies the image (sparse), replays its
 * journal and checks it with `e2fsck -fp` (the boot-time check), then reads the file
 * with debugfs; no mount, no loop device. `clean` is e2fsck's exit 0 or 1 with nothing
 * in its output but what a clean crash leaves (the journal replay; orphaned inodes:
 * open and unlinked when the node stopped) and the summary: preen fixes the free counts
 * ext4 does not keep current silently, and names every other repair (e.g. "Entry 'f'
 * ... has deleted/unused inode 12.  CLEARED.", still exit 1), which `damage` lists;
 * exit 4 and up is damage preen will not fix (test/unit/csi-block-image.test.ts proves
 * a damaged image is not clean).
 * Guarantees: readImageFile never touches the image (it reads a copy) and removes its copy.
 * Not guaranteed: a consistent read of an image mounted and written elsewhere (cp is
 * not atomic): read it once nothing holds it, or through a node's mount
 * (dev/system/real-share.ts readRealVolumeFile).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const IMAGE_FILE = 'disk.img';

export function imagePath(backing: string): string {
  return join(backing, IMAGE_FILE);
}

export interface ImageRead {
  /** The file's bytes; undefined when the file system has no such file. */
  content: Buffer | undefined;
  /** e2fsck -fp's exit code on the copy (0 clean, 1 fixed something; 4 and up: damage). */
  fsckCode: number;
  fsckOutput: string;
  /** e2fsck's lines other than the journal replay and the summary: each a repair. */
  damage: string[];
  /** Exit 0 or 1 and no damage: the file system as a clean crash would leave it. */
  clean: boolean;
}

/** What a clean crash leaves to preen: the journal replay, orphans (open, unlinked), the summary. */
const BENIGN = [
  /: recovering journal$/,
  /: (Clearing|Truncating) orphaned inode \d+ /,
  /: \d+\/\d+ files \(.*\), \d+\/\d+ blocks$/,
];

/** Pure: the lines of `e2fsck -fp` output that name a repair (not what a clean crash leaves). */
function fsckDamage(output: string): string[] {
  return output
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .filter((l) => !BENIGN.some((re) => re.test(l)));
}

/** `file` (a path from the file system's root) as the volume holds it now. */
export function readImageFile(image: string, file: string): ImageRead {
  if (!existsSync(image)) throw new Error(`read ${file} of ${image}: no such image`);
  if (/["\\\n]/.test(file))
    throw new Error(`read ${JSON.stringify(file)} of ${image}: no quotes, backslashes or newlines`);
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-image-read-'));
  const copy = join(dir, IMAGE_FILE);
  try {
    execFileSync('cp', ['--sparse=always', image, copy]);
    const fsck = spawnSync('e2fsck', ['-fp', copy], { encoding: 'utf8' });
    if (fsck.status === null)
      throw new Error(`e2fsck of a copy of ${image}: ${fsck.error?.message ?? fsck.signal}`);
    const path = file.startsWith('/') ? file : `/${file}`;
    const cat = spawnSync('debugfs', ['-R', `cat "${path}"`, copy], { maxBuffer: 1 << 30 });
    if (cat.status !== 0)
      throw new Error(`debugfs cat ${path} of a copy of ${image}: exit ${cat.status}: ${cat.stderr}`);
    const missing = /File not found by ext2_lookup/.test(cat.stderr.toString());
    const fsckOutput = `${fsck.stdout}${fsck.stderr}`.trim();
    const damage = fsckDamage(fsckOutput);
    return {
      content: missing ? undefined : cat.stdout,
      fsckCode: fsck.status,
      fsckOutput,
      damage,
      clean: fsck.status <= 1 && damage.length === 0,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
