#!/usr/bin/env bash
# Sets StreamStack up on a fresh machine: pnpm, the dependencies, the native module, the build.
# Safe to run again; it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

pnpm_version=12.4.2
if ! command -v pnpm >/dev/null 2>&1 || [ "$(pnpm --version)" != "$pnpm_version" ]; then
  # Corepack's signature check fails on these machines, so pnpm comes from the npm registry.
  npm install --global "pnpm@$pnpm_version"
fi

# better-sqlite3 (a benchmark peer) compiles from source, and node-gyp would otherwise try to
# download Node's headers; the Node.js package installs them locally, so point node-gyp there.
if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node.h ]; then
  export npm_config_nodedir=/usr
fi

pnpm install --frozen-lockfile
pnpm build

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
      echo "setup: could not install fuse3 (fusermount3); the power-loss tests will use umount -l" >&2
  else
    echo "setup: fusermount3 is missing; install Debian's fuse3 as root for the power-loss tests" >&2
  fi
fi
cargo build --release --locked --manifest-path tools/powerloss-fs/Cargo.toml
