#!/usr/bin/env bash
# Builds the shipped NFS server's native part, recovery-tag.so (recovery-tag.c beside
# this file: ganesha's recovery records keyed by the client's identity, not its address),
# into OUT_DIR, where the entrypoint looks for it (beside main.js). One build for every
# place that needs it: dev/test.sh and `npm run build` (dist/ on the host), the local
# image build (dev/image/build.ts) and the Dockerfile's build stage. Needs gcc and
# libc6-dev.
#   bash server/nfs-ganesha/native/build.sh OUT_DIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: build.sh OUT_DIR}"
command -v gcc >/dev/null 2>&1 || { echo "leasehold: nfs-ganesha native build: gcc is missing" >&2; exit 1; }
mkdir -p "$out"
gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$out/recovery-tag.so.tmp" "$here/recovery-tag.c"
mv "$out/recovery-tag.so.tmp" "$out/recovery-tag.so"
