#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo use, when they are missing:
#   openssl (cluster certificates), faketime + libfaketime (the clock-skew scenarios),
#   util-linux (unshare, nsenter, setpriv: pod sandboxes; fsfreeze: a consistent copy of a
#   mounted ext4 image), procps (pgrep),
#   nfs-ganesha + nfs-ganesha-vfs (the shipped NFS server), libnfs-utils (nfs-cp,
#   nfs-cat: user-space NFS clients; this kernel has no NFS client), gcc + libc6-dev +
#   pkg-config + libnfs-dev (build dev/nfs-client's libnfs writer), rpcbind (a private
#   one per NFSv3 ganesha in the tests: dev/nfs-client/private-rpcbind.ts), and prometheus
#   for promtool (checks the agent's /metrics text; installed without recommends, so no
#   exporter daemon comes along), libseccomp-dev (runc's seccomp, built by dev/node/build.sh)
#   and iproute2 (`ip`: the real node's links inside its own network namespace), nftables
#   (`nft`: kube-proxy's nftables mode, in each real node's network namespace), and
#   mmdebstrap (the images' Debian base layers, dev/image/build.ts; without recommends:
#   it runs in root mode and needs none of them) and zstd (their layers' compression),
#   e2fsprogs (mkfs.ext4, e2fsck, debugfs) and mount (losetup, mount -o loop): the
#   fencing CSI driver's block kind, an ext4 image per volume (dev/csi/block-image.ts);
#   xfsprogs (mkfs.xfs, xfs_growfs): the block kind with XFS, which grows online (ext4 needs
#   CAP_SYS_RESOURCE to, which these machines lack);
#   user-mode-linux (Linux 6.1 as a process, its NFS client as modules: the kernel NFS
#   client of dev/kernel-client), nfs-common (mount.nfs, which the guest runs from the
#   host's root) and kmod (modprobe, for the guest's NFS modules); conntrack (the bench's
#   --flush-conntrack lever: bench/kernel-client/run.ts).
# With the argument render-dashboard (only `npm run render-dashboard` passes it, not the
# tests): also librsvg2-bin (rsvg-convert, the dashboard picture's SVG to PNG).
# Needs root for apt-get; without it, prints the command to run and exits 1.
set -euo pipefail
say() { echo "leasehold: $*" >&2; }

missing=()
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
dpkg -s libfaketime >/dev/null 2>&1 || missing+=(libfaketime)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
command -v pgrep >/dev/null 2>&1 || missing+=(procps)
command -v ganesha.nfsd >/dev/null 2>&1 || missing+=(nfs-ganesha)
dpkg -s nfs-ganesha-vfs >/dev/null 2>&1 || missing+=(nfs-ganesha-vfs)
command -v nfs-cp >/dev/null 2>&1 || missing+=(libnfs-utils)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
dpkg -s libc6-dev >/dev/null 2>&1 || missing+=(libc6-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
dpkg -s libnfs-dev >/dev/null 2>&1 || missing+=(libnfs-dev)
dpkg -s rpcbind >/dev/null 2>&1 || missing+=(rpcbind)
dpkg -s libseccomp-dev >/dev/null 2>&1 || missing+=(libseccomp-dev)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# dpkg, not command -v: nft lives in /usr/sbin.
dpkg -s nftables >/dev/null 2>&1 || missing+=(nftables)
lean=()
command -v promtool >/dev/null 2>&1 || lean+=(prometheus)
command -v mmdebstrap >/dev/null 2>&1 || lean+=(mmdebstrap)
command -v zstd >/dev/null 2>&1 || missing+=(zstd)
if [ "${1:-}" = render-dashboard ]; then command -v rsvg-convert >/dev/null 2>&1 || lean+=(librsvg2-bin); fi
# dpkg, not command -v: mkfs.ext4, debugfs and losetup live in /sbin, off a user's PATH.
dpkg -s e2fsprogs >/dev/null 2>&1 || missing+=(e2fsprogs)
# mkfs.xfs, xfs_growfs: the testbed driver's XFS volumes, which grow online (dev/csi).
dpkg -s xfsprogs >/dev/null 2>&1 || missing+=(xfsprogs)
dpkg -s mount >/dev/null 2>&1 || missing+=(mount)
dpkg -s user-mode-linux >/dev/null 2>&1 || missing+=(user-mode-linux)
dpkg -s nfs-common >/dev/null 2>&1 || missing+=(nfs-common)
dpkg -s kmod >/dev/null 2>&1 || missing+=(kmod)
dpkg -s conntrack >/dev/null 2>&1 || missing+=(conntrack)

[ ${#missing[@]} -eq 0 ] && [ ${#lean[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  say "missing Debian packages: ${missing[*]} ${lean[*]}; as root run:"
  say "  apt-get update && apt-get install -y ${missing[*]} && apt-get install -y --no-install-recommends ${lean[*]}"
  exit 1
fi
say "installing Debian packages: ${missing[*]} ${lean[*]}"
apt-get update -qq >&2
if [ ${#missing[@]} -gt 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2; fi
if [ ${#lean[@]} -gt 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${lean[@]}" >&2; fi
