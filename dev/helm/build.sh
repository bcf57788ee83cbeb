#!/usr/bin/env bash
# Builds the helm CLI (helm.sh/helm/v4) into the per-version cache and prints its path.
#
#   dev/helm/build.sh            build if not cached, print the bin directory
#   dev/helm/build.sh --check    exit 0 when cached and complete, 1 otherwise
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../go-build.sh"

HELM_VERSION="$(awk '$1=="require" && $2=="helm.sh/helm/v4"{print $3}' "$here/go.mod")"
cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
bin="$cache_root/helm/$HELM_VERSION"
targets=(helm=helm.sh/helm/v4/cmd/helm)

if [ "${1:-}" = "--check" ]; then go_build_complete "$bin" "${targets[@]}"; exit $?; fi
go_build_cached "$bin" "$here" "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" "${targets[@]}"
