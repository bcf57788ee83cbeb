/**
 * The stable-fsid shim (server/nfs-ganesha/native/stable-fsid.c) on real file systems:
 * one XFS image mounted through two loop devices in turn, as a volume attached to one node
 * and then to another. Proves the premise (without the shim statfs's f_fsid is the device
 * number, so it differs between the two attachments, and ganesha's file handles with it)
 * and the fix (with the shim and the entrypoint's two variables both attachments give
 * the volume's fsid); an ext4 volume, whose f_fsid comes from its UUID, keeps it; a
 * statfs of another file system is left alone. The probe is a small C program calling
 * statfs(2) as ganesha does (src/FSAL/commonlib.c posix_get_fsid). Needs root, loop
 * devices, gcc, mkfs.xfs and mkfs.ext4 (dev/debian-packages.sh). Cost: about 2 s.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { deviceName, stableFsidOf } from '../../server/nfs-ganesha/volume.ts';

const dir = mkdtempSync(join(tmpdir(), 'leasehold-fsid-'));
const shim = join(dir, 'stable-fsid.so');
const probe = join(dir, 'statfs-probe');
const loops: string[] = [];
const mounts: string[] = [];

const run = (cmd: string, args: string[], env?: NodeJS.ProcessEnv) =>
  execFileSync(cmd, args, { encoding: 'utf8', env: env ?? process.env }).trim();

/** f_fsid of `path` as statfs(2) returns it, with the shim preloaded for `volume` when given. */
function fsidOf(path: string, volume?: { owner: string; mount: string }): string {
  if (!volume) return run(probe, [path]);
  return run(probe, [path], {
    ...process.env,
    LD_PRELOAD: shim,
    LEASEHOLD_NFS_STABLE_FSID: stableFsidOf(volume.owner),
    LEASEHOLD_NFS_STABLE_FSID_DEV: deviceName(statSync(volume.mount, { bigint: true }).dev),
  });
}

/** Attaches `image` to the next free loop device and mounts it at a new directory. */
function attach(image: string, name: string): { loop: string; mount: string } {
  const loop = run('losetup', ['--find', '--show', image]);
  loops.push(loop);
  const mount = join(dir, name);
  mkdirSync(mount);
  run('mount', [loop, mount]);
  mounts.push(mount);
  return { loop, mount };
}

function unmount(mount: string): void {
  run('umount', [mount]);
  mounts.splice(mounts.indexOf(mount), 1);
}

before(() => {
  run('bash', [join(import.meta.dirname, '../../server/nfs-ganesha/native/build.sh'), dir]);
  const source = join(dir, 'statfs-probe.c');
  writeFileSync(
    source,
    '#include <stdio.h>\n#include <sys/vfs.h>\nint main(int c, char **v) { struct statfs s; (void)c;\n' +
      '  if (statfs(v[1], &s) != 0) { perror("statfs"); return 1; }\n' +
      '  printf("%u.%u\\n", (unsigned)s.f_fsid.__val[0], (unsigned)s.f_fsid.__val[1]); return 0; }\n',
  );
  run('gcc', ['-O2', '-o', probe, source]);
});

after(() => {
  for (const m of [...mounts].reverse()) execFileSync('umount', [m], { stdio: 'ignore' });
  for (const l of loops) execFileSync('losetup', ['-d', l], { stdio: 'ignore' });
  rmSync(dir, { recursive: true, force: true });
});

it('XFS attached under another loop device: f_fsid follows the device without the shim, the volume with it', () => {
  const image = join(dir, 'xfs.img');
  run('truncate', ['-s', '320M', image]);
  run('mkfs.xfs', ['-q', '-f', image]);
  const owner = 'leasehold-00000000-0000-4000-8000-000000000001';
  const first = attach(image, 'first');
  const bare1 = fsidOf(first.mount);
  const shimmed1 = fsidOf(first.mount, { owner, mount: first.mount });
  unmount(first.mount);
  // The first loop device stays attached, as on a crashed node: the next attach gets another.
  const second = attach(image, 'second');
  assert.notEqual(second.loop, first.loop);
  const bare2 = fsidOf(second.mount);
  const shimmed2 = fsidOf(second.mount, { owner, mount: second.mount });
  assert.notEqual(bare1, bare2, 'the premise: XFS derives f_fsid from the device number');
  assert.equal(shimmed1, stableFsidOf(owner));
  assert.equal(shimmed2, stableFsidOf(owner), 'the same fsid under either device');
  // Another file system in the same process is left alone.
  assert.equal(fsidOf(dir, { owner, mount: second.mount }), fsidOf(dir));
  unmount(second.mount);
});

it('ext4 keeps its own (UUID-derived) f_fsid: the shim changes nothing', () => {
  const image = join(dir, 'ext4.img');
  run('truncate', ['-s', '64M', image]);
  run('mkfs.ext4', ['-q', '-F', image]);
  const v = attach(image, 'ext4');
  assert.equal(fsidOf(v.mount, { owner: 'leasehold-x', mount: v.mount }), fsidOf(v.mount));
  unmount(v.mount);
});

it('stableFsidOf: the same owner the same fsid, two u32, never 0.0; deviceName decodes glibc dev_t', () => {
  assert.equal(stableFsidOf('leasehold-a'), stableFsidOf('leasehold-a'));
  assert.notEqual(stableFsidOf('leasehold-a'), stableFsidOf('leasehold-b'));
  assert.match(stableFsidOf('leasehold-a'), /^\d{1,10}\.\d{1,10}$/);
  assert.equal(deviceName(0x0700n), '7:0');
  assert.equal(deviceName((259n << 8n) | 1n), '259:1');
  // makedev(8, 272): the minor's high bits above bit 20.
  assert.equal(deviceName((8n << 8n) | (0x1n << 20n) | 0x10n), '8:272');
});
