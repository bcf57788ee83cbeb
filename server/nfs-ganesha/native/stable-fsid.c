/*
 * LD_PRELOAD shim for ganesha.nfsd: the exported file system's fsid, as statfs(2) tells
 * it, is the volume's own (set by the entrypoint) instead of the device number the
 * kernel derived it from, so the file handles ganesha hands out stay valid when the
 * volume is attached to another node under another device number.
 *
 * Why: ganesha's VFS file handle carries the file system's fsid (src/FSAL/commonlib.c
 * posix_get_fsid): the file system's UUID through libblkid when it can read the block
 * device, else statfs's f_fsid. In a container it cannot (no device node), so f_fsid it
 * is. ext4 and btrfs derive f_fsid from their UUID, but XFS derives it from the device
 * number (fs/xfs/xfs_super.c: huge_encode_dev of the data device), which differs between
 * nodes (another loop or sdX/nvme index): after a failover every handle a client holds
 * is unknown to the replacement (NFS4ERR_STALE: its opens cannot be recovered, each
 * open file fails with EBADF/EIO, its cwd with ESTALE). Measured with a Linux 6.12 client
 * on an XFS volume whose loop device index changed across the failover.
 *
 * What it does: statfs/fstatfs (and their 64 variants, the same struct on 64-bit Linux)
 * run the system call; when the file system is the one named by
 * LEASEHOLD_NFS_STABLE_FSID_DEV ("major:minor", the export's st_dev) AND its f_fsid is
 * exactly the kernel's encoding of that device number, f_fsid becomes
 * LEASEHOLD_NFS_STABLE_FSID ("<u32>.<u32>", derived from the volume's identity). A file
 * system whose f_fsid comes from its UUID (ext4, btrfs) keeps it: its handles stay as
 * they were. Without the two variables nothing changes.
 *
 * Ganesha 4.3 (Debian 12) reads it through glibc's statfs64, which its
 * libganesha_nfsd.so imports dynamically (`nm -D`), so a preloaded one is the one it
 * calls. Not guaranteed: that a later ganesha still does
 * (test/integration/nfs-ganesha-stable-fsid.test.ts checks the value a preloaded statfs
 * returns on a real XFS mount, not ganesha's handles themselves).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

/* The kernel's new_encode_dev (include/linux/kdev_t.h), which huge_encode_dev returns. */
static uint64_t kernel_dev_encoding(dev_t dev) {
  uint64_t maj = major(dev), min = minor(dev);
  return (min & 0xff) | (maj << 8) | ((min & ~(uint64_t)0xff) << 12);
}

static void stabilize(const struct stat *st, struct statfs *buf) {
  const char *want = getenv("LEASEHOLD_NFS_STABLE_FSID");
  const char *dev = getenv("LEASEHOLD_NFS_STABLE_FSID_DEV");
  unsigned int maj, min, hi, lo;
  if (want == NULL || dev == NULL) return;
  if (sscanf(dev, "%u:%u", &maj, &min) != 2 || sscanf(want, "%u.%u", &hi, &lo) != 2) return;
  if (major(st->st_dev) != maj || minor(st->st_dev) != min) return;
  uint64_t enc = kernel_dev_encoding(st->st_dev);
  if ((uint32_t)buf->f_fsid.__val[0] != (uint32_t)enc || (uint32_t)buf->f_fsid.__val[1] != (uint32_t)(enc >> 32))
    return; /* not derived from the device: stable already */
  buf->f_fsid.__val[0] = (int)hi;
  buf->f_fsid.__val[1] = (int)lo;
}

int statfs(const char *path, struct statfs *buf) {
  long r = syscall(SYS_statfs, path, buf);
  struct stat st;
  if (r == 0 && stat(path, &st) == 0) stabilize(&st, buf);
  return (int)r;
}

int fstatfs(int fd, struct statfs *buf) {
  long r = syscall(SYS_fstatfs, fd, buf);
  struct stat st;
  if (r == 0 && fstat(fd, &st) == 0) stabilize(&st, buf);
  return (int)r;
}

/* On 64-bit Linux struct statfs64 is laid out as struct statfs (glibc aliases the two). */
_Static_assert(sizeof(struct statfs64) == sizeof(struct statfs), "statfs64 is statfs on this target");
int statfs64(const char *path, struct statfs64 *buf) { return statfs(path, (struct statfs *)buf); }
int fstatfs64(int fd, struct statfs64 *buf) { return fstatfs(fd, (struct statfs *)buf); }
