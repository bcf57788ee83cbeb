#!/usr/bin/env bash
# Installs the kubectl plugin: compiles the project's TypeScript to dist/ (tsc; no
# native parts) and writes the executable `kubectl-leasehold` into DIR (default
# ~/.local/bin), where kubectl finds it on PATH as `kubectl leasehold`.
#
#   npm run install-plugin [-- DIR]          (dev/toolchain.sh brings Node >= 22.19 and
#                                             node_modules first)
#   bash kubectl-plugin/install.sh [--no-build] [DIR]
#
# --no-build uses dist/ as it is: the integration test's way (the test runner compiled
# dist/, and a second tsc while other tests start dist/ processes could hand one of them
# a half-written file).
#
# The executable is a launcher that runs this checkout's dist/kubectl-plugin/main.js with
# the Node that installed it (absolute paths), so it works whatever `node` is first on
# PATH later; install again after pulling changes. Writes nothing but dist/ and that file
# (written aside, then renamed into place).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=1
if [ "${1:-}" = --no-build ]; then build=0; shift; fi
dir="${1:-$HOME/.local/bin}"
node_bin="$(command -v node)" || { echo "kubectl-plugin/install.sh: no node on PATH (run it through npm run install-plugin)" >&2; exit 2; }
main="$root/dist/kubectl-plugin/main.js"
# The same floor as dev/toolchain.sh (@kubernetes/client-node 2.x and undici need it).
"$node_bin" -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=19)?0:1)' ||
  { echo "kubectl-plugin/install.sh: $node_bin is Node $("$node_bin" --version), older than 22.19: run it through npm run install-plugin, which brings a newer one" >&2; exit 2; }

if [ "$build" = 1 ]; then (cd "$root" && tsc -p tsconfig.build.json); fi
[ -f "$main" ] || { echo "kubectl-plugin/install.sh: $main does not exist (compile first: tsc -p tsconfig.build.json)" >&2; exit 1; }
mkdir -p "$dir"
# A word in single quotes for /bin/sh, whatever characters it holds.
quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
tmp="$(mktemp "$dir/.kubectl-leasehold.XXXXXX")"
{
  echo '#!/bin/sh'
  echo "# kubectl leasehold, installed by $root/kubectl-plugin/install.sh"
  echo "exec $(quote "$node_bin") $(quote "$main") \"\$@\""
} >"$tmp"
chmod 755 "$tmp"
mv -f "$tmp" "$dir/kubectl-leasehold"
echo "installed $dir/kubectl-leasehold (runs $main with $node_bin)"
case ":$PATH:" in
  *":$dir:"*) echo "try: kubectl leasehold status" ;;
  *) echo "NB: $dir is not on PATH: add it (export PATH=\"$dir:\$PATH\") so that kubectl finds the plugin" ;;
esac
