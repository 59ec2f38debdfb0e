#!/usr/bin/env bash
# What only the tests need, installed or built when missing (`pnpm test` runs this first), so
# that the quick start builds only what the demo needs. Safe to run again; it only does what is
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# The export tests read exports back with readers independent of StreamStack: DuckDB (Parquet,
# NDJSON) and pyarrow (Arrow IPC), pinned in test/support/requirements.txt. Installed only when
# one is missing or not at its pinned version.
if ! python3 - test/support/requirements.txt <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    name, _, pinned = line.strip().partition("==")
    if name and version(name) != pinned:
        sys.exit(1)
PY
then
  python3 -m pip install --quiet -r test/support/requirements.txt
fi

# powerloss-fs (tools/powerloss-fs), the FUSE file system of the power-loss tests. Root mounts it
# directly; the tests unmount with fusermount3, from Debian's fuse3. Without root or apt-get,
# fuse3 is not installed and the tests fall back to `umount -l`.
if ! command -v fusermount3 >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 >/dev/null; } ||
      echo "test-tools: could not install fuse3 (fusermount3); the power-loss tests will use umount -l" >&2
  else
    echo "test-tools: fusermount3 is missing; install Debian's fuse3 as root for the power-loss tests" >&2
  fi
fi
# Cargo builds only what changed: a second run costs a fraction of a second.
cargo build --release --locked --quiet --manifest-path tools/powerloss-fs/Cargo.toml

# versitygw, the S3-compatible server the object store's tests run against
# (test/support/object-store.ts), built from source with Go once and then kept in Go's bin
# folder: the first build takes a few minutes on two cores (nice'd, so other work keeps the
# machine), every later run finds the binary and does nothing. Without Go the object store tests
# skip, saying so.
versitygw_version=v1.8.0
go_command=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true)
if [ -n "$go_command" ]; then
  go_bin=$("$go_command" env GOBIN)
  [ -n "$go_bin" ] || go_bin="$("$go_command" env GOPATH | cut -d: -f1)/bin"
  if [ ! -x "$go_bin/versitygw" ]; then
    echo "test-tools: building versitygw $versitygw_version (once; a few minutes)" >&2
    nice -n 19 "$go_command" install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version"
  fi
else
  echo "test-tools: Go is missing, so versitygw cannot be built: the object store tests will be skipped" >&2
fi

# etcd, the coordination store the lease tests run against (test/support/etcd.mjs), built the
# same way from the Go module proxy: `go install` refuses etcd's module (its go.mod has `replace`
# directives), so tools/etcd-server is a wrapper module calling etcd's own entry point, pinned in
# its go.mod and go.sum. Built once into Go's bin folder. Without Go the lease tests against etcd
# skip, saying so.
if [ -n "$go_command" ]; then
  if [ ! -x "$go_bin/etcd" ]; then
    echo "test-tools: building etcd from tools/etcd-server (once; a minute or two)" >&2
    (cd tools/etcd-server && nice -n 19 "$go_command" build -o "$go_bin/etcd" .)
  fi
fi
