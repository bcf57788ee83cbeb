# Sourced by dev/kube/build.sh and dev/helm/build.sh: builds Go commands of a module into
# a versioned cache directory, once.
#
#   go_build_cached BIN_DIR MODULE_DIR "LDFLAGS" name=package [name=package ...]
#
# Prints BIN_DIR on stdout when done. A cache entry counts only when its stamp file
# exists, and the stamp is written last: an interrupted build is never mistaken for a
# finished one, and is redone whole. Concurrent callers (two test files that need the same
# tool at once) serialise on a lock file next to BIN_DIR: the second waits and then finds
# the first one's build complete, instead of both writing into one directory.

go_build_complete() {
  local bin="$1"; shift
  [ -f "$bin/.complete" ] || return 1
  local target
  for target in "$@"; do [ -x "$bin/${target%%=*}" ] || return 1; done
}

go_build_cached() {
  local bin="$1" module="$2" ldflags="$3"; shift 3
  if go_build_complete "$bin" "$@"; then echo "$bin"; return 0; fi
  if ! command -v go >/dev/null 2>&1; then
    echo "leasehold: build: no Go toolchain on PATH (Go >= 1.26 is needed to build $(basename "$module") tools; install it and run again)" >&2
    return 1
  fi
  mkdir -p "$bin"
  local lock_fd
  exec {lock_fd}>"$bin.lock"
  flock "$lock_fd"
  if go_build_complete "$bin" "$@"; then exec {lock_fd}>&-; echo "$bin"; return 0; fi
  rm -f "$bin/.complete"
  local log="$bin/build.log" start=$SECONDS target name pkg
  : >"$log"
  echo "leasehold: building into $bin (first run on this machine only; log: $log)" >&2
  for target in "$@"; do
    name="${target%%=*}" pkg="${target#*=}"
    echo "leasehold:   $name ..." >&2
    if ! (cd "$module" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg") >>"$log" 2>&1; then
      tail -n 20 "$log" >&2
      echo "leasehold: build: building $name failed; full log: $log" >&2
      exec {lock_fd}>&-
      return 1
    fi
    mv "$bin/$name.tmp" "$bin/$name"
  done
  echo "built in $((SECONDS - start))s" >"$bin/.complete"
  echo "leasehold: built in $((SECONDS - start))s" >&2
  exec {lock_fd}>&-
  echo "$bin"
}
