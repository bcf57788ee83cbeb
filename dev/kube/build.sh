#!/usr/bin/env bash
# Builds the control-plane binaries (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl) into the per-version cache and prints its path.
#
#   dev/kube/build.sh            build if not cached, print the bin directory
#   dev/kube/build.sh --check    exit 0 when cached and complete, 1 otherwise
#
# Only the first run on a machine builds (about 4 min on 2 cores, plus downloads).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$here/../go-build.sh"

KUBE_VERSION="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$here/go.mod")"
ETCD_VERSION="$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$here/go.mod")"
cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
bin="$cache_root/kube/$KUBE_VERSION-etcd$ETCD_VERSION"
targets=(
  etcd=./cmd/etcd
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
  kubectl=k8s.io/kubernetes/cmd/kubectl
)

if [ "${1:-}" = "--check" ]; then go_build_complete "$bin" "${targets[@]}"; exit $?; fi

major_minor="${KUBE_VERSION#v}"
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=${major_minor%%.*}"
  ldflags+=" -X $pkg.gitMinor=$(echo "$major_minor" | cut -d. -f2) -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
ldflags+=" -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$ETCD_VERSION"

go_build_cached "$bin" "$here" "$ldflags" "${targets[@]}"
