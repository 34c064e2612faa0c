# Sourced by scripts/up.sh and scripts/test.sh: installs what Sandpit needs on a fresh clone.
# Idempotent: a warm machine installs nothing.

# System packages: bubblewrap (local isolation), python3 with pip (code cells, pip installs),
# python3-venv (the DeerFlow suite's virtualenv: Debian ships ensurepip, which `python3 -m venv`
# needs, in that package).
ensure_system_packages() {
  local missing=()
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-pip)
  python3 -c 'import ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "sandpit: please install: ${missing[*]} (e.g. sudo apt-get install ${missing[*]})" >&2
    return 1
  fi
  echo "sandpit: installing ${missing[*]} with apt-get" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# npm packages, Node 24 included (the `node` devDependency): installed when missing or stale.
ensure_node_modules() {
  local stamp=node_modules/.package-lock.json
  if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ ! -x node_modules/.bin/node ]; then
    echo "sandpit: installing npm packages (npm ci)" >&2
    npm ci --no-audit --no-fund
  fi
}
