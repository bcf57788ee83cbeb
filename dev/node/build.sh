#!/usr/bin/env bash
# Builds the components of a real Kubernetes node into one per-version cache directory
# and prints its path:
#   kubelet, kube-proxy        k8s.io/kubernetes at the control plane's version (./kubelet/go.mod)
#   containerd, containerd-shim-runc-v2, ctr   github.com/containerd/containerd/v2, CGO_ENABLED=0
#   runc                       github.com/opencontainers/runc, cgo + Debian's libseccomp-dev
#   cni/{bridge,host-local,loopback,portmap}   github.com/containernetworking/plugins
#   pause, pause.oci.tar       the pod sandbox's process (./pause, a static Go binary; also
#                              PID 1 of each node) and the image holding it: an OCI image
#                              layout tarball that `ctr images import` takes, named
#                              $PAUSE_IMAGE (also written to pause.image)
#   leasehold-netns-relay      ./relay: TCP from a node's network namespace to host loopback,
#                              and the API server's CONNECT proxy into the nodes' namespaces
#   api-probe, api-probe.oci.tar   ./api-probe (static Go): a pod's in-cluster call to the API
#                              server; its image, named $PROBE_IMAGE (also in api-probe.image)
#
#   dev/node/build.sh            build if not cached, print the bin directory
#   dev/node/build.sh --check    exit 0 when cached and complete, 1 otherwise
#
# Everything comes from the Go module proxy with `go install module/pkg@version`, so each
# tool builds against its own released go.mod, as upstream ships it. Each file is moved
# into place only when built, and the stamp .complete is written last: an interrupted
# build resumes with what is missing. After the control plane's build (dev/kube) the
# kubelet shares most of its packages in Go's build cache.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

KUBE_VERSION="$(awk '$1=="require" && $2=="k8s.io/kubernetes"{print $3}' "$here/kubelet/go.mod")"
CONTROL_PLANE_VERSION="$(awk '$1=="k8s.io/kubernetes"{print $2}' "$here/../kube/go.mod")"
# Avoid containerd 2.3.0-2.3.3: they fail on digest-pinned pause images.
CONTAINERD_VERSION=v2.3.7
# The runc that containerd v2.3.7 is tested with is v1.5.2 (script/setup/runc-version).
RUNC_VERSION=v1.5.3
CNI_PLUGINS_VERSION=v1.10.0
PAUSE_REV="$(cat "$here/pause/go.mod" "$here/pause/main.go" | sha256sum | cut -c1-12)"
PAUSE_IMAGE="localhost/leasehold/pause:$PAUSE_REV"
RELAY_REV="$(cat "$here/relay/go.mod" "$here/relay/go.sum" "$here/relay/main.go" | sha256sum | cut -c1-12)"
PROBE_REV="$(cat "$here/api-probe/go.mod" "$here/api-probe/main.go" | sha256sum | cut -c1-12)"
PROBE_IMAGE="localhost/leasehold/api-probe:$PROBE_REV"

if [ "$KUBE_VERSION" != "$CONTROL_PLANE_VERSION" ]; then
  echo "leasehold: node build: dev/node/kubelet/go.mod has k8s.io/kubernetes $KUBE_VERSION but dev/kube/go.mod has $CONTROL_PLANE_VERSION; the kubelet must match the control plane" >&2
  exit 1
fi

cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
bin="$cache_root/node/kubelet$KUBE_VERSION-containerd$CONTAINERD_VERSION-runc$RUNC_VERSION-cni$CNI_PLUGINS_VERSION-pause$PAUSE_REV-relay$RELAY_REV-probe$PROBE_REV"
files=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr runc cni/bridge cni/host-local cni/loopback cni/portmap
  pause pause.oci.tar pause.image leasehold-netns-relay api-probe api-probe.oci.tar api-probe.image)

complete() {
  [ -f "$bin/.complete" ] || return 1
  local f
  for f in "${files[@]}"; do [ -s "$bin/$f" ] || return 1; done
}
if [ "${1:-}" = "--check" ]; then complete; exit $?; fi
if complete; then echo "$bin"; exit 0; fi

if ! command -v go >/dev/null 2>&1; then
  echo "leasehold: node build: no Go toolchain on PATH (Go >= 1.26.8 is needed); install it and run again" >&2
  exit 1
fi
if ! pkg-config --exists libseccomp 2>/dev/null; then
  echo "leasehold: node build: runc needs libseccomp (Debian's libseccomp-dev, and pkg-config): run dev/debian-packages.sh as root" >&2
  exit 1
fi

mkdir -p "$bin/cni"
log="$bin/build.log" start=$SECONDS
echo "--- $(date -u +%FT%TZ)" >>"$log"
echo "leasehold: building node components into $bin (first run on this machine only; log: $log)" >&2

# step NAME COMMAND...: runs COMMAND (which writes $bin/NAME.tmp) unless NAME is in place.
step() {
  local name="$1"; shift
  [ -s "$bin/$name" ] && return 0
  echo "leasehold:   $name ..." >&2
  local t0=$SECONDS
  if ! "$@" >>"$log" 2>&1; then
    tail -n 20 "$log" >&2
    echo "leasehold: node build: building $name failed; full log: $log" >&2
    exit 1
  fi
  mv "$bin/$name.tmp" "$bin/$name"
  echo "leasehold:   $name built in $((SECONDS - t0))s" | tee -a "$log" >&2
}

# go_install NAME PKG@VERSION CGO TAGS LDFLAGS: `go install` into a scratch GOBIN.
go_install() {
  local name="$1" pkg="$2" cgo="$3" tags="$4" ldflags="$5" gobin
  gobin="$(mktemp -d "$bin/.gobin.XXXXXX")"
  CGO_ENABLED="$cgo" GOBIN="$gobin" GOFLAGS=-buildvcs=false \
    go install -trimpath -tags "$tags" -ldflags "$ldflags" "$pkg"
  mv "$gobin/$(basename "${pkg%@*}")" "$bin/$name.tmp"
  rm -rf "$gobin"
}

# build_kube NAME: k8s.io/kubernetes/cmd/NAME, stamped with the version like upstream's.
build_kube() {
  local major_minor="${KUBE_VERSION#v}" ldflags="-s -w" pkg
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=${major_minor%%.*}"
    ldflags+=" -X $pkg.gitMinor=$(echo "$major_minor" | cut -d. -f2) -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  (cd "$here/kubelet" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "$ldflags" -o "$bin/$1.tmp" "k8s.io/kubernetes/cmd/$1")
}

# go_build_here DIR NAME: a static binary from this folder's DIR module.
go_build_here() {
  (cd "$here/$1" && CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "-s -w" -o "$bin/$2.tmp" .)
}

ctrd_pkg=github.com/containerd/containerd/v2
ctrd_ldflags="-s -w -X $ctrd_pkg/version.Version=$CONTAINERD_VERSION -X $ctrd_pkg/version.Revision=module-$CONTAINERD_VERSION -X $ctrd_pkg/version.Package=$ctrd_pkg"

# build_image BINARY IMAGE: BINARY.oci.tar, an OCI image layout (oci-layout, index.json,
# blobs/sha256/*) holding one uncompressed layer with /BINARY, its entrypoint, run as
# 65535:65535. Written by hand with tar and sha256sum: the format is four small JSON
# documents, so no image tool (umoci, go-containerregistry) is needed.
build_image() {
  local name="$1" image="$2" work; work="$(mktemp -d "$bin/.$1.XXXXXX")"
  mkdir -p "$work/rootfs" "$work/layout/blobs/sha256"
  cp "$bin/$name" "$work/rootfs/$name"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/rootfs" -cf "$work/layer.tar" "$name"
  blob() { # FILE -> prints "sha256:<hex> <size>", stores the blob
    local hex; hex="$(sha256sum "$1" | cut -d' ' -f1)"
    cp "$1" "$work/layout/blobs/sha256/$hex"
    echo "sha256:$hex $(stat -c %s "$1")"
  }
  local layer config manifest
  layer="$(blob "$work/layer.tar")"
  printf '{"architecture":"amd64","os":"linux","config":{"User":"65535:65535","Entrypoint":["/%s"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "$name" "${layer% *}" >"$work/config.json"
  config="$(blob "$work/config.json")"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}' \
    "${config% *}" "${config#* }" "${layer% *}" "${layer#* }" >"$work/manifest.json"
  manifest="$(blob "$work/manifest.json")"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "${manifest% *}" "${manifest#* }" "$image" "$image" >"$work/layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/layout" -cf "$bin/$name.oci.tar.tmp" oci-layout index.json blobs
  rm -rf "$work"
}

step kubelet build_kube kubelet
step kube-proxy build_kube kube-proxy
step containerd go_install containerd "$ctrd_pkg/cmd/containerd@$CONTAINERD_VERSION" 0 urfave_cli_no_docs "$ctrd_ldflags"
step containerd-shim-runc-v2 go_install containerd-shim-runc-v2 "$ctrd_pkg/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" 0 "urfave_cli_no_docs no_grpc" "$ctrd_ldflags"
step ctr go_install ctr "$ctrd_pkg/cmd/ctr@$CONTAINERD_VERSION" 0 urfave_cli_no_docs "$ctrd_ldflags"
# runc's Makefile also sets the libpathrs tag, which needs the Rust libpathrs library
# (not in Debian 12); without it runc uses its Go path-resolution fallback.
step runc go_install runc "github.com/opencontainers/runc@$RUNC_VERSION" 1 "seccomp urfave_cli_no_docs" \
  "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=module-$RUNC_VERSION"
for plugin in main/bridge ipam/host-local main/loopback meta/portmap; do
  step "cni/${plugin#*/}" go_install "cni/${plugin#*/}" \
    "github.com/containernetworking/plugins/plugins/$plugin@$CNI_PLUGINS_VERSION" 0 "" \
    "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION"
done
step pause go_build_here pause pause
step pause.oci.tar build_image pause "$PAUSE_IMAGE"
step leasehold-netns-relay go_build_here relay leasehold-netns-relay
step api-probe go_build_here api-probe api-probe
step api-probe.oci.tar build_image api-probe "$PROBE_IMAGE"
printf '%s\n' "$PAUSE_IMAGE" >"$bin/pause.image"
printf '%s\n' "$PROBE_IMAGE" >"$bin/api-probe.image"

echo "built in $((SECONDS - start))s" >"$bin/.complete"
echo "leasehold: node components built in $((SECONDS - start))s" >&2
echo "$bin"
