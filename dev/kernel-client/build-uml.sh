#!/usr/bin/env bash
# Builds a User-Mode Linux kernel (ARCH=um) from Debian 12's linux-source-6.12 package,
# with the NFS client built in, into
#   ${LEASEHOLD_CACHE:-~/.cache/leasehold}/uml/<package version>/
#     linux       the kernel, stripped (run it as root, with TMPDIR or /dev/shm writable)
#     config      its .config
#     build.log   every step's output
# and prints the path of `linux` on stdout; all progress goes to stderr.
#
#   dev/kernel-client/build-uml.sh          build if not cached, print the kernel's path
#   dev/kernel-client/build-uml.sh --check  exit 0 when cached, 1 otherwise
#
# Cached by the installed package's version (dpkg-query): a second run prints the path at
# once; a new linux-source-6.12 (a security update) builds a new kernel beside the old.
# The kernel is built under a scratch name and renamed into place last, so an interrupted
# build is never taken for a finished one. Two concurrent runs serialise on a lock file
# (uml/.lock): the second waits and then finds the first one's kernel. An interrupted
# build keeps its unpacked tree (uml/<version>.work) and resumes in it; a finished one
# removes it (1.7 GB with the objects).
#
# Config: UML's defconfig, then the options the kernel client needs forced on (=y, no
# modules: the NFS client v3/v4.0/4.1/4.2, SUNRPC, the legacy UML network driver with its
# TUN/TAP transport, hostfs as the root, tmpfs, sysrq for the guest's halt) and what
# only bloats the build switched off; olddefconfig settles the dependencies, and every
# required option is checked to be =y afterwards (a failure names it).
#
# Needs root to install what is missing with apt-get: linux-source-6.12 and the build's
# tools (gcc, make, flex, bison, bc, libc6-dev, xz-utils, perl). The build runs niced
# (`nice -n 10 make -j2`): measured 11 s to unpack and 3 min 30 s to compile on two
# cores (free -m's used went from about 0.5 to 1.6 GB); the stripped kernel is 6 MB.
# Does not guarantee the kernel boots: that is checked by whoever runs it. NB: 6.12's
# UML still restores FP state with a fixed 2696-byte XSAVE buffer, so on a host with a
# larger XSAVE area (AMX) it needs host/uml-xstate-shim.c preloaded like 6.1 (without
# it: "userspace - ptrace set fp regs failed, errno = 14", then init is killed).
set -euo pipefail
say() { echo "leasehold: uml build: $*" >&2; }

pkg=linux-source-6.12
tarball=/usr/src/$pkg.tar.xz
build_deps=(gcc make flex bison bc libc6-dev xz-utils perl binutils)
# Built in (=y) or the kernel client cannot work; checked after olddefconfig.
required=(
  NETWORK_FILESYSTEMS NFS_FS NFS_V3 NFS_V4 NFS_V4_1 NFS_V4_2 SUNRPC
  NET INET UNIX HOSTFS UML_NET UML_NET_TUNTAP
  TMPFS SHMEM PROC_FS PROC_SYSCTL SYSFS DEVTMPFS FILE_LOCKING KEYS
  BINFMT_ELF BINFMT_SCRIPT MAGIC_SYSRQ TTY STDERR_CONSOLE SSL NULL_CHAN
)
# Off: bloat for a guest that only mounts NFS over one TAP device.
disabled=(
  MODULES STATIC_LINK DEBUG_KERNEL
  SOUND UML_SOUND SND USB USB_SUPPORT DRM FB FB_CORE VT INPUT INPUT_MOUSEDEV
  HID MMC SCSI ATA MD BLK_DEV_DM WLAN WIRELESS CFG80211 MAC80211 BT
  NETFILTER BRIDGE VLAN_8021Q IPV6 NET_SCHED WIREGUARD BTRFS_FS XFS_FS EXT4_FS EXT2_FS
  REISERFS_FS ISO9660_FS FAT_FS VFAT_FS MSDOS_FS QUOTA AUTOFS_FS FUSE_FS
  BLK_DEV_UBD BLK_DEV_LOOP BLK_DEV_NBD TUN PPP SLIP DUMMY BINFMT_MISC IOSCHED_BFQ
  UML_NET_ETHERTAP UML_NET_SLIP UML_NET_SLIRP UML_NET_DAEMON UML_NET_MCAST
  UML_NET_PCAP UML_NET_VDE UML_NET_VECTOR
  IKCONFIG KALLSYMS_ALL FTRACE PROFILING
)

cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
version() { dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || true; }

ver="$(version)"
cached() { [ -n "$ver" ] && [ -x "$cache_root/uml/$ver/linux" ]; }
if [ "${1:-}" = "--check" ]; then cached; exit $?; fi
if cached; then echo "$cache_root/uml/$ver/linux"; exit 0; fi

mkdir -p "$cache_root/uml"
exec {lock_fd}>"$cache_root/uml/.lock"
if ! flock -n "$lock_fd"; then
  say "another build holds $cache_root/uml/.lock; waiting for it"
  flock "$lock_fd"
fi

# Packages first (under the lock: two runs never race apt-get), then the version.
missing=()
for p in "$pkg" "${build_deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    say "missing Debian packages: ${missing[*]}; as root run:"
    say "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
    exit 1
  fi
  say "installing Debian packages: ${missing[*]}"
  apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=300 "${missing[@]}" >&2
  }
  # An empty or stale package list (a fresh container) fails the install: update once.
  if ! apt_install; then
    say "apt-get install failed; running apt-get update and trying again"
    apt-get update -qq -o DPkg::Lock::Timeout=300 >&2
    apt_install
  fi
fi
ver="$(version)"
[ -n "$ver" ] || { say "dpkg-query reports no version of $pkg after installing it"; exit 1; }
[ -f "$tarball" ] || { say "$pkg $ver is installed but $tarball is missing"; exit 1; }

dir="$cache_root/uml/$ver"
# The run that held the lock before us may have built it.
if cached; then exec {lock_fd}>&-; echo "$dir/linux"; exit 0; fi
work="$dir.work"
mkdir -p "$dir"
log="$dir/build.log" start=$SECONDS
echo "--- $(date -u +%FT%TZ) $pkg $ver" >>"$log"
say "building UML $ver into $dir (first run on this machine only; log: $log)"

# step WHAT COMMAND...: runs COMMAND with its output in the log; on failure shows the
# log's tail and exits naming WHAT.
step() {
  local what="$1"; shift
  local t0=$SECONDS
  say "  $what ..."
  echo "--- $what: $*" >>"$log"
  if ! "$@" >>"$log" 2>&1; then
    tail -n 25 "$log" >&2
    say "$what failed; full log: $log"
    exit 1
  fi
  echo "--- $what: done in $((SECONDS - t0))s" >>"$log"
}

if [ ! -f "$work/.unpacked" ]; then
  rm -rf "$work"
  mkdir -p "$work"
  step "unpacking $tarball" nice -n 10 tar -xJf "$tarball" -C "$work" --strip-components=1
  touch "$work/.unpacked"
fi

kmake() { nice -n 10 make -C "$work" ARCH=um "$@"; }
configure() {
  kmake defconfig
  local opt args=()
  for opt in "${required[@]}"; do args+=(--enable "$opt"); done
  for opt in "${disabled[@]}"; do args+=(--disable "$opt"); done
  # No debug info: a choice, so its "none" member is the one switched on.
  args+=(--enable DEBUG_INFO_NONE --disable DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT)
  "$work/scripts/config" --file "$work/.config" "${args[@]}"
  kmake olddefconfig
}
step "configuring (defconfig + NFS client built in)" configure
bad=()
for opt in "${required[@]}"; do
  grep -qx "CONFIG_$opt=y" "$work/.config" || bad+=("CONFIG_$opt ($(grep -E "^(# )?CONFIG_$opt[= ]" "$work/.config" || echo absent))")
done
if [ ${#bad[@]} -gt 0 ]; then
  say "after olddefconfig these required options are not =y (a dependency is off): ${bad[*]}; config: $work/.config"
  exit 1
fi
grep -qx 'CONFIG_MODULES=y' "$work/.config" && { say "CONFIG_MODULES is still on after olddefconfig; config: $work/.config"; exit 1; }

step "compiling (nice -n 10 make -j2 linux)" kmake -j2 linux
cp "$work/.config" "$dir/config"
cp "$work/linux" "$dir/linux.tmp"
if ! strip "$dir/linux.tmp" 2>>"$log"; then
  say "strip failed (kept unstripped); see $log"
  cp "$work/linux" "$dir/linux.tmp"
fi
mv "$dir/linux.tmp" "$dir/linux"
rm -rf "$work"
echo "--- built in $((SECONDS - start))s, $(stat -c %s "$dir/linux") bytes" >>"$log"
say "built $dir/linux in $((SECONDS - start))s"
exec {lock_fd}>&-
echo "$dir/linux"
