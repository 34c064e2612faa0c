#!/usr/bin/env bash
# The README's test command (`npm test`): installs what is missing, then type-checks, lints
# and runs every test suite. Ends with one line "tests: N passed, N failed[, N skipped]".
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/ensure-deps.sh
ensure_system_packages
ensure_node_modules
export PATH="$PWD/node_modules/.bin:$PATH"

echo "== typecheck" && tsc -p .
echo "== lint" && eslint . && prettier --check . >/dev/null

report=$(mktemp)
trap 'rm -f "$report"' EXIT
status=0
vitest run --reporter=default --reporter=json --outputFile.json="$report" "$@" || status=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const skipped = r.numPendingTests + r.numTodoTests;
  console.log(`tests: ${r.numPassedTests} passed, ${r.numFailedTests} failed` + (skipped ? `, ${skipped} skipped` : ""));
' "$report" || true
exit $status
