/**
 * The block kind of the fencing storage (issue 11): a volume that is one ext4 file
 * system in an image file, `<root>/volumes/<pv>/disk.img`, as a network disk is one
 * block device. Each node mounts it through its own revocable view (a loop device over
 * the view's file, dev/fuse/ --ext4-image), so the kernel has real file handles
 * (name_to_handle_at / open_by_handle_at: what ganesha's VFS FSAL needs, stable across
 * nodes: inode + generation, and the fsid from the image's UUID) and a revoked node's
 * page-cache writeback, journal commits and fsync fail with EIO, as on fenced storage.
 *
 *  - createImage: the image, sparse, made once (CreateVolume), before any grant;
 *  - readImageFile: what the volume holds now, as a node mounting it next would see it:
 *    a sparse copy of the image, its journal replayed and checked by `e2fsck -fp` (the
 *    boot-time check), then the file read by debugfs. No mount, no loop device. `clean`
 *    is e2fsck's exit 0 or 1 with nothing in its output but what a clean crash leaves
 *    (the journal replay; orphaned inodes: open and unlinked when the node stopped) and
 *    the summary: preen fixes the free counts ext4 does not keep current silently, and names
 *    every other repair (e.g. "Entry 'f' ... has deleted/unused inode 12.  CLEARED.",
 *    still exit 1), which `damage` lists; exit 4 and up is damage preen will not fix.
 *
 * Guarantees: createImage never overwrites an image; readImageFile never touches the
 * image (it reads a copy) and removes its copy.
 * NB: cp is not atomic. Of a file system mounted somewhere, pass its mount point as
 * `frozen`: it is frozen (fsfreeze: synced, writes held) for the copy, as a storage
 * snapshot would, and thawed after. Not guaranteed: a consistent read of an image
 * mounted and written elsewhere without that.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** PV csi.volumeAttributes key (with the fencing attribute): the volume's file system kind. */
export const BLOCK_FS_ATTRIBUTE = 'storage.leasehold.dev/block-filesystem';
export const BLOCK_FS = 'ext4';
export const IMAGE_FILE = 'disk.img';
/** Sparse: only what the file system writes takes space (some 4 MB after mkfs). */
export const IMAGE_BYTES = 128 * 1024 * 1024;

export function imagePath(backing: string): string {
  return join(backing, IMAGE_FILE);
}

/** Makes the volume's ext4 image in `backing` unless it is there; true when made now. */
export function createImage(backing: string, bytes = IMAGE_BYTES): boolean {
  const image = imagePath(backing);
  if (existsSync(image)) return false;
  const tmp = `${image}.mkfs`;
  rmSync(tmp, { force: true });
  // -e remount-ro: an I/O error never panics the (host's) kernel; the mount says so too.
  const r = spawnSync(
    'mkfs.ext4',
    ['-q', '-F', '-e', 'remount-ro', '-E', 'lazy_itable_init=0,lazy_journal_init=0', tmp, `${bytes / 1024}k`],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) {
    rmSync(tmp, { force: true });
    throw new Error(
      `make the ext4 image ${image}: mkfs.ext4 ${r.error ? r.error.message : `exited ${r.status}`}: ${(r.stderr ?? '').trim()} (Debian e2fsprogs: dev/debian-packages.sh)`,
    );
  }
  execFileSync('mv', ['-n', tmp, image]);
  return true;
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
export function fsckDamage(output: string): string[] {
  return output
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '')
    .filter((l) => !BENIGN.some((re) => re.test(l)));
}

/** `file` (a path from the file system's root) as the volume holds it now. */
export function readImageFile(image: string, file: string, frozen?: string): ImageRead {
  if (!existsSync(image)) throw new Error(`read ${file} of ${image}: no such image`);
  if (/["\\\n]/.test(file))
    throw new Error(`read ${JSON.stringify(file)} of ${image}: no quotes, backslashes or newlines`);
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-image-read-'));
  const copy = join(dir, IMAGE_FILE);
  try {
    if (frozen !== undefined) {
      execFileSync('fsfreeze', ['--freeze', frozen]);
      try {
        execFileSync('cp', ['--sparse=always', image, copy]);
      } finally {
        execFileSync('fsfreeze', ['--unfreeze', frozen]);
      }
    } else {
      execFileSync('cp', ['--sparse=always', image, copy]);
    }
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
