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

# What only the tests need (DuckDB and pyarrow, fuse3, tools/powerloss-fs) is installed and
# built by `pnpm test` itself (scripts/test-tools.sh), so the quick start builds only the demo's.
