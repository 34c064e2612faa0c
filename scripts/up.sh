#!/usr/bin/env bash
# The README's first command (`npm run up`): brings up a local Sandpit and runs a first sandbox.
# Today that is the local provider (sandboxd under bubblewrap); the cluster, operator and
# provisioner join it as they land.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure-deps.sh
ensure_system_packages
ensure_node_modules
exec node_modules/.bin/node scripts/demo.ts "$@"
