#!/usr/bin/env bash
# Installs the kubectl plugin: compiles the project's TypeScript to dist/ (tsc; no
# native parts) and writes the executable `kubectl-leasehold` into DIR (the first
# argument, default ~/.local/bin), where kubectl finds it on PATH as `kubectl leasehold`.
# Run it through `npm run install-plugin [-- DIR]` (dev/toolchain.sh brings Node >= 22.19
# and node_modules first).
#
# The executable is a two-line launcher that runs this checkout's
# dist/kubectl-plugin/main.js with the Node that built it (absolute paths), so it works
# whatever `node` is first on PATH later; run the install again after pulling changes.
# Writes nothing but dist/ and that one file.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$HOME/.local/bin}"
node_bin="$(command -v node)" || { echo "kubectl-plugin/install.sh: no node on PATH (run it through npm run install-plugin)" >&2; exit 2; }
main="$root/dist/kubectl-plugin/main.js"

(cd "$root" && tsc -p tsconfig.build.json)
[ -f "$main" ] || { echo "kubectl-plugin/install.sh: tsc wrote no $main" >&2; exit 1; }
mkdir -p "$dir"
target="$dir/kubectl-leasehold"
tmp="$(mktemp "$dir/.kubectl-leasehold.XXXXXX")"
# printf %q quotes the paths for the shell, whatever characters they hold.
printf '#!/bin/sh\n# kubectl leasehold: installed by %q\nexec %q %q "$@"\n' \
  "$root/kubectl-plugin/install.sh" "$node_bin" "$main" >"$tmp"
chmod 755 "$tmp"
mv -f "$tmp" "$target"
echo "installed $target (runs $main with $node_bin)"
case ":$PATH:" in
  *":$dir:"*) echo "try: kubectl leasehold status" ;;
  *) echo "NB: $dir is not on PATH: add it (export PATH=\"$dir:\$PATH\") so that kubectl finds the plugin" ;;
esac
