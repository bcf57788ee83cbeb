#!/usr/bin/env bash
# Builds the shipped NFS server's native parts, the shims the entrypoint preloads into
# ganesha: recovery-tag.so (recovery-tag.c beside this file: ganesha's recovery records
# keyed by the client's identity, not its address) and stable-fsid.so (stable-fsid.c: the
# exported file system's fsid from the volume, not the device number) and bus-stay.so
# (bus-stay.c: a dead private message bus does not end ganesha) and grace-kick.so
# (grace-kick.c: grace lifted within 250 ms of the last reclaim), into OUT_DIR, where the entrypoint looks for it (beside main.js);
# and the reconnector's tickle (server/reconnector/native/tickle.c, a program run by the
# reconnector from the same image), into OUT_DIR too. One build for every
# place that needs it: dev/test.sh and `npm run build` (dist/ on the host), the local
# image build (dev/image/build.ts) and the Dockerfile's build stage. Needs gcc and
# libc6-dev.
#   bash server/nfs-ganesha/native/build.sh OUT_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: build.sh OUT_DIR}"
command -v gcc >/dev/null 2>&1 || { echo "leasehold: nfs-ganesha native build: gcc is missing" >&2; exit 1; }
mkdir -p "$out"
for shim in recovery-tag stable-fsid bus-stay grace-kick; do
  gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$out/$shim.so.tmp" "$here/$shim.c"
  mv "$out/$shim.so.tmp" "$out/$shim.so"
done
gcc -O2 -Wall -Wextra -Werror -o "$out/tickle.tmp" "$here/../../reconnector/native/tickle.c"
mv "$out/tickle.tmp" "$out/tickle"
