#!/usr/bin/env bash
# Builds what the kernel client (dev/kernel-client) runs besides the kernels, with gcc, into
#   ${LEASEHOLD_CACHE:-~/.cache/leasehold}/kernel-client/<sha256 of sources + flags + gcc>/
# and prints that directory on stdout:
#   lh-kload             the workloads on the guest's NFS mount (guest/lh-kload.c); linked
#                        dynamically against the host's glibc: the guest runs on the host's
#                        root file system (read-only), so the same libc is there
#   uml-xstate-shim.so   LD_PRELOAD shim that lets a UML older than its FP-state fix boot on
#                        a host with a large XSAVE area (host/uml-xstate-shim.c says why)
#   modules-6.1/lib/modules/<version> -> /usr/lib/uml/modules/<version>
#                        the tree `modprobe -d` needs for Debian's user-mode-linux modules
#                        (the guest sees the host's root, so the link resolves inside it too)
# Rebuilt only when a source, the flags, gcc or the UML modules change; built under a temp
# name and moved into place, so an interrupted build is never taken for a finished one.
# Needs gcc, libc6-dev and Debian's user-mode-linux (dev/debian-packages.sh installs them).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
guest_src="$here/guest/lh-kload.c"
shim_src="$here/host/uml-xstate-shim.c"
cflags="-O2 -Wall -Wextra -Werror"
uml_modules=/usr/lib/uml/modules
say() { echo "leasehold: kernel-client build: $*" >&2; }

command -v gcc >/dev/null 2>&1 || { say "gcc is missing (run bash dev/debian-packages.sh as root)"; exit 1; }
[ -d "$uml_modules" ] || { say "$uml_modules is missing: Debian's user-mode-linux is not installed (run bash dev/debian-packages.sh as root)"; exit 1; }
hash="$( (cat "$guest_src" "$shim_src"; echo "$cflags"; gcc -dumpfullversion; ls "$uml_modules") | sha256sum | cut -c1-16)"
dir="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}/kernel-client/$hash"
if [ -f "$dir/.complete" ]; then echo "$dir"; exit 0; fi
tmp="$dir.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/modules-6.1/lib/modules"
# shellcheck disable=SC2086 # word splitting of flags is intended
if ! gcc $cflags -std=c11 -o "$tmp/lh-kload" "$guest_src" 2>"$tmp/build.log" ||
  ! gcc $cflags -std=gnu11 -shared -fPIC -o "$tmp/uml-xstate-shim.so" "$shim_src" -ldl 2>>"$tmp/build.log"; then
  cat "$tmp/build.log" >&2
  say "compiling $guest_src or $shim_src failed"
  exit 1
fi
for v in "$uml_modules"/*; do ln -s "$v" "$tmp/modules-6.1/lib/modules/$(basename "$v")"; done
touch "$tmp/.complete"
rm -rf "$dir"
mv "$tmp" "$dir"
echo "$dir"
