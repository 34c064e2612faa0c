#!/usr/bin/env bash
# `npm run serve`: `sandpit serve` from this checkout (docs/serve.md), installing the npm packages
# first when they are missing. Flags go through: `npm run serve -- --backend local --port 0`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure-deps.sh
ensure_node_modules
exec node_modules/.bin/node cli/src/main.ts serve "$@"
