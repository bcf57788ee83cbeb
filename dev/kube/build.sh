#!/usr/bin/env bash
# Builds the control-plane binaries into the per-version cache and prints its path.
#
#   dev/kube/build.sh            build if not cached, print the bin directory
#   dev/kube/build.sh --check    exit 0 when cached and complete, 1 otherwise
#
# Only the first run on a machine builds (about 15-25 min on 2 cores, see README).
# A cache entry counts only when its stamp file exists, and the stamp is written
# last: an interrupted build is never mistaken for a finished one.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUBE_VERSION="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$here/go.mod")"
ETCD_VERSION="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$here/go.mod")"
cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
bin="$cache_root/kube/$KUBE_VERSION-etcd$ETCD_VERSION"
stamp="$bin/.complete"
components=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl)

complete() {
  [ -f "$stamp" ] || return 1
  for c in "${components[@]}"; do [ -x "$bin/$c" ] || return 1; done
}

if [ "${1:-}" = "--check" ]; then complete; exit $?; fi
if complete; then echo "$bin"; exit 0; fi

fail() { echo "leasehold: control-plane build: $*" >&2; exit 1; }
command -v go >/dev/null 2>&1 || fail "no Go toolchain on PATH (Go >= 1.26 is needed to build the control plane; install it and run again)"

mkdir -p "$bin"
rm -f "$stamp"
log="$bin/build.log"
: >"$log"

major_minor="${KUBE_VERSION#v}"
major="${major_minor%%.*}"
minor="$(echo "$major_minor" | cut -d. -f2)"
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION"

echo "leasehold: building the control plane $KUBE_VERSION (etcd $ETCD_VERSION) into $bin" >&2
echo "leasehold: first run on this machine only; progress in $log" >&2
cd "$here"
start=$SECONDS
build_one() {
  local name="$1" pkg="$2"
  echo "leasehold:   $name ..." >&2
  if ! CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg" >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    fail "building $name failed; full log: $log"
  fi
  mv "$bin/$name.tmp" "$bin/$name"
}
build_one etcd ./cmd/etcd
build_one kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build_one kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build_one kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
build_one kubectl k8s.io/kubernetes/cmd/kubectl
echo "$KUBE_VERSION etcd $ETCD_VERSION built in $((SECONDS - start))s" >"$stamp"
echo "leasehold: control plane built in $((SECONDS - start))s" >&2
echo "$bin"
