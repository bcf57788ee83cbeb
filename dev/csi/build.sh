#!/usr/bin/env bash
# Builds the CSI parts of the real nodes' testbed into one per-version cache directory
# and prints its path:
#   csi-attacher              github.com/kubernetes-csi/external-attacher/v4 cmd/csi-attacher
#                             at the release pinned in ./attacher/go.mod
#   csi-provisioner           github.com/kubernetes-csi/external-provisioner/v6 cmd/csi-provisioner
#                             at the release pinned in ./provisioner/go.mod
#   csi-resizer               github.com/kubernetes-csi/external-resizer/v2 cmd/csi-resizer
#                             at the release pinned in ./resizer/go.mod
#   leasehold-csi-hostdir     ./plugin/driver: the testbed's CSI driver (controller and node parts)
#   leasehold-csi-registrar   ./plugin/registrar: registers the driver's node socket with the kubelet
# Why the driver and the registrar are the project's own: README.md beside this file.
#
#   dev/csi/build.sh            build if not cached, print the bin directory
#   dev/csi/build.sh --check    exit 0 when cached and complete, 1 otherwise
#
# Everything comes from the Go module proxy. Each file is moved into place only when
# built, and the stamp .complete is written last: an interrupted build resumes with
# what is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

ATTACHER_VERSION="$(awk '$1=="require" && $2=="github.com/kubernetes-csi/external-attacher/v4"{print $3}' "$here/attacher/go.mod")"
PROVISIONER_VERSION="$(awk '$1=="require" && $2=="github.com/kubernetes-csi/external-provisioner/v6"{print $3}' "$here/provisioner/go.mod")"
RESIZER_VERSION="$(awk '$1=="require" && $2=="github.com/kubernetes-csi/external-resizer/v2"{print $3}' "$here/resizer/go.mod")"
PLUGIN_REV="$(cat "$here/plugin/go.mod" "$here/plugin/go.sum" "$here"/plugin/driver/*.go "$here"/plugin/registrar/*.go | sha256sum | cut -c1-12)"

cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
bin="$cache_root/csi/attacher$ATTACHER_VERSION-provisioner$PROVISIONER_VERSION-resizer$RESIZER_VERSION-plugin$PLUGIN_REV"
files=(csi-attacher csi-provisioner csi-resizer leasehold-csi-hostdir leasehold-csi-registrar)

complete() {
  [ -f "$bin/.complete" ] || return 1
  local f
  for f in "${files[@]}"; do [ -x "$bin/$f" ] || return 1; done
}
if [ "${1:-}" = "--check" ]; then complete; exit $?; fi
if complete; then echo "$bin"; exit 0; fi

if ! command -v go >/dev/null 2>&1; then
  echo "leasehold: csi build: no Go toolchain on PATH (Go >= 1.26 is needed); install it and run again" >&2
  exit 1
fi

mkdir -p "$bin"
log="$bin/build.log" start=$SECONDS
echo "--- $(date -u +%FT%TZ)" >>"$log"
echo "leasehold: building the CSI parts into $bin (first run on this machine only; log: $log)" >&2

# step NAME DIR PKG LDFLAGS: `go build` of PKG in the module DIR into $bin/NAME.
step() {
  local name="$1" dir="$2" pkg="$3" ldflags="$4"
  [ -x "$bin/$name" ] && return 0
  echo "leasehold:   $name ..." >&2
  local t0=$SECONDS
  if ! (cd "$dir" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg") >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "leasehold: csi build: building $name failed; full log: $log" >&2
    exit 1
  fi
  mv "$bin/$name.tmp" "$bin/$name"
  echo "leasehold:   $name built in $((SECONDS - t0))s" | tee -a "$log" >&2
}

step csi-attacher "$here/attacher" github.com/kubernetes-csi/external-attacher/v4/cmd/csi-attacher \
  "-s -w -X main.version=$ATTACHER_VERSION"
step csi-provisioner "$here/provisioner" github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner \
  "-s -w -X main.version=$PROVISIONER_VERSION"
step csi-resizer "$here/resizer" github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer \
  "-s -w -X main.version=$RESIZER_VERSION"
step leasehold-csi-hostdir "$here/plugin" ./driver "-s -w"
step leasehold-csi-registrar "$here/plugin" ./registrar "-s -w"

echo "built in $((SECONDS - start))s" >"$bin/.complete"
echo "leasehold: CSI parts built in $((SECONDS - start))s" >&2
echo "$bin"
