#!/usr/bin/env bash
# Builds dev/nfs-client/nfs-writer.c with gcc against Debian's libnfs (libnfs-dev) into
#   ${LEASEHOLD_CACHE:-~/.cache/leasehold}/nfs-client/<sha256 of source + flags>/nfs-writer
# and prints the binary's path on stdout. Rebuilt only when the source or the flags
# change; a build is written under a temp name and moved into place, so an interrupted
# build is never taken for a finished one. Needs gcc, libc6-dev and libnfs-dev
# (dev/debian-packages.sh installs them).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/nfs-writer.c"
cflags="-O2 -std=c11 -Wall -Wextra -Werror"
say() { echo "leasehold: nfs-client build: $*" >&2; }

for tool in gcc pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || { say "$tool is missing (run bash dev/debian-packages.sh as root)"; exit 1; }
done
if ! pkg-config --exists libnfs; then
  say "libnfs-dev is missing (run bash dev/debian-packages.sh as root)"
  exit 1
fi
libs="$(pkg-config --libs libnfs)"
incs="$(pkg-config --cflags libnfs)"
hash="$( (cat "$src"; echo "$cflags $incs $libs"; gcc -dumpfullversion; pkg-config --modversion libnfs) | sha256sum | cut -c1-16)"
dir="${LEASEHOLD_CACHE:-$HOME/.cache/leasehold}/nfs-client/$hash"
bin="$dir/nfs-writer"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$dir"
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# shellcheck disable=SC2086 # word splitting of flags is intended
if ! gcc $cflags $incs -o "$tmp" "$src" $libs 2>"$dir/build.log"; then
  cat "$dir/build.log" >&2
  say "compiling $src failed (log: $dir/build.log)"
  exit 1
fi
mv "$tmp" "$bin"
echo "$bin"
