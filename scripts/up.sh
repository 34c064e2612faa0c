#!/usr/bin/env bash
# The README's first command (`npm run up`): a whole local Sandpit (scripts/up.ts says what that
# is). Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure-deps.sh
ensure_system_packages
ensure_node_modules
exec node_modules/.bin/node scripts/up.ts "$@"
