#!/usr/bin/env bash
# Builds leasehold-fencefs (the revocable per-node volume view of the fencing CSI driver,
# dev/csi/) and leasehold-fhandle (file
# handles taken and opened as an NFS server does, for the driver's tests) into the
# per-version cache and prints its bin directory.
#
#   dev/fuse/build.sh            build if not cached, print the bin directory
#   dev/fuse/build.sh --check    exit 0 when cached and complete, 1 otherwise
# The cache key is a hash of this module's sources, so an edit rebuilds.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../go-build.sh"

key="$(cd "$here" && cat go.mod go.sum $(find . -name '*.go' | sort) | sha256sum | cut -c1-16)"
cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
bin="$cache_root/fencefs/$key"
targets=(leasehold-fencefs=./cmd/leasehold-fencefs leasehold-fhandle=./cmd/leasehold-fhandle)

if [ "${1:-}" = "--check" ]; then go_build_complete "$bin" "${targets[@]}"; exit $?; fi
go_build_cached "$bin" "$here" "-s -w" "${targets[@]}"
