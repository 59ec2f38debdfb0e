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
