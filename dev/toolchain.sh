#!/usr/bin/env bash
# Runs a command with the project's toolchain in place, bringing what is missing:
#   - Node.js >= 22.19 (the system Node 20 is too old for @kubernetes/client-node 2.x):
#     when `node` on PATH is older, Node 24 is installed from the npm registry into
#     ~/.cache/leasehold/node24 and put first on PATH;
#   - node_modules, by `npm ci`, when missing or older than package-lock.json;
#   - with --debs, the Debian packages the tests and the demo use (dev/debian-packages.sh);
#   - with --kube, the control-plane binaries (dev/kube/build.sh; first run builds),
#     exported as LEASEHOLD_KUBE_BIN; with --helm, the helm CLI (dev/helm/build.sh),
#     exported as LEASEHOLD_HELM_BIN; with --fuse, leasehold-fencefs (dev/fuse/build.sh,
#     the fencing CSI driver's volume view), exported as LEASEHOLD_FENCEFS_BIN (without it
#     dev/csi/fencefs-binary.ts builds it on first use); with --node, the real
#     node's components (dev/node/build.sh: kubelet, containerd, runc, CNI plugins, the
#     pause image), exported as LEASEHOLD_NODE_BIN, the CSI parts the nodes' volumes use
#     (dev/csi/build.sh: external-attacher, the testbed's driver and registrar), exported as
#     LEASEHOLD_CSI_BIN, and the kernel NFS clients' parts (dev/kernel-client: build.sh
#     and build-uml.sh, the 6.12 UML kernel); with --image, the project's images
#     (dev/image/build.ts: leasehold and nfs-ganesha as OCI layout tarballs, built from
#     Debian packages without a registry or a Docker daemon), exported as LEASEHOLD_IMAGE_DIR.
#
#   bash dev/toolchain.sh [--debs] [--kube] [--helm] [--fuse] [--node] [--image] COMMAND [ARGS...]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_root="${LEASEHOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold}"
say() { echo "leasehold: $*" >&2; }

need_kube=0 need_helm=0 need_debs=0 need_fuse=0 need_node=0 need_image=0
while :; do
  case "${1:-}" in
    --debs) need_debs=1; shift ;;
    --kube) need_kube=1; shift ;;
    --helm) need_helm=1; shift ;;
    --fuse) need_fuse=1; shift ;;
    --node) need_node=1; shift ;;
    --image) need_image=1; shift ;;
    *) break ;;
  esac
done

node_ok() {
  command -v node >/dev/null 2>&1 || return 1
  node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=19)?0:1)'
}

if ! node_ok; then
  node24="$cache_root/node24"
  if [ ! -x "$node24/bin/node" ]; then
    command -v npm >/dev/null 2>&1 || { say "no npm on PATH: install Node.js (any version with npm) first"; exit 1; }
    say "system Node $(node --version 2>/dev/null || echo none) is too old; installing Node 24 from the npm registry into $node24"
    rm -rf "$node24.tmp"
    npm install --no-audit --no-fund --loglevel=error -g --prefix "$node24.tmp" node@24 >&2
    rm -rf "$node24" && mv "$node24.tmp" "$node24"
  fi
  export PATH="$node24/bin:$PATH"
  node_ok || { say "Node in $node24 is not usable ($(node --version 2>&1)); remove that folder and run again"; exit 1; }
fi

if [ "$need_debs" = 1 ]; then bash "$root/dev/debian-packages.sh"; fi

cd "$root"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "installing npm packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error >&2
fi
export PATH="$root/node_modules/.bin:$PATH"

if [ "$need_kube" = 1 ]; then
  LEASEHOLD_KUBE_BIN="$(bash "$root/dev/kube/build.sh")"
  export LEASEHOLD_KUBE_BIN
fi
if [ "$need_helm" = 1 ]; then
  LEASEHOLD_HELM_BIN="$(bash "$root/dev/helm/build.sh")"
  export LEASEHOLD_HELM_BIN
fi
if [ "$need_fuse" = 1 ]; then
  LEASEHOLD_FENCEFS_BIN="$(bash "$root/dev/fuse/build.sh")/leasehold-fencefs"
  export LEASEHOLD_FENCEFS_BIN
fi
if [ "$need_node" = 1 ]; then
  LEASEHOLD_NODE_BIN="$(bash "$root/dev/node/build.sh")"
  LEASEHOLD_CSI_BIN="$(bash "$root/dev/csi/build.sh")"
  export LEASEHOLD_NODE_BIN LEASEHOLD_CSI_BIN
  # The kernel NFS clients' parts: lh-kload and the shim (gcc), the 6.12 UML kernel (first
  # run: about 4 minutes; 6.1 is Debian's package).
  bash "$root/dev/kernel-client/build.sh" >/dev/null
  bash "$root/dev/kernel-client/build-uml.sh" >/dev/null
fi

if [ "$need_image" = 1 ]; then
  LEASEHOLD_IMAGE_DIR="$(node --import tsx "$root/dev/image/build.ts")"
  export LEASEHOLD_IMAGE_DIR
fi

exec "$@"
