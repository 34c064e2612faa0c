#!/usr/bin/env bash
# Builds the upstream binaries for the test cluster from the pinned Go modules
# under test/cluster/tools/ into a cache outside the repo:
#
#   $SANDPIT_CLUSTER_CACHE/<key>/bin/<name>
#
# SANDPIT_CLUSTER_CACHE defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/sandpit/cluster.
# <key> names the pinned tool versions, the Go version and platform, plus a
# short hash of the go.mod/go.sum files and this script's build recipe, so any
# change to a pin gets a fresh directory. A warm run (every binary present for
# the key) builds nothing.
#
# Progress and timings go to stderr; the last line on stdout is the bin
# directory, so callers can do BIN="$(test/cluster/build.sh)".
#
# Arguments: names of binaries to build, e.g. `build.sh helm` (a test that renders the chart
# needs no cluster); none builds them all, and the extras (kube-router, CoreDNS, ...) too.
#
# Environment:
#   SANDPIT_CLUSTER_CACHE  cache root (see above)
#   SANDPIT_CLUSTER_JOBS   go build -p (default 2)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tools="$here/tools"

die() {
  echo "build.sh: error: $*" >&2
  exit 1
}
log() { echo "build.sh: $*" >&2; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go >= 1.26 is needed; see test/cluster/README.md)"

jobs="${SANDPIT_CLUSTER_JOBS:-2}"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "SANDPIT_CLUSTER_JOBS must be a positive integer, got '$jobs'"

cache_root="${SANDPIT_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandpit/cluster}"

# Use exactly the Go on PATH; never switch toolchains behind the caller's back.
export GOTOOLCHAIN=local

# Version of a required module, read straight from a go.mod (no go command, so
# the warm path stays fast). Fails loudly if the module is not required there.
modver() {
  local gomod="$1" mod="$2" v
  v="$(awk -v m="$mod" '
    $1 == "require" && $2 == m { print $3; exit }
    $1 == m && $2 ~ /^v/ { print $2; exit }
  ' "$gomod")"
  [[ -n "$v" ]] || die "$mod is not required in ${gomod#"$here"/}"
  echo "$v"
}

k8s_version="$(modver "$tools/go.mod" k8s.io/kubernetes)"
etcd_version="$(modver "$tools/etcd/go.mod" go.etcd.io/etcd/server/v3)"
helm_version="$(modver "$tools/helm/go.mod" helm.sh/helm/v4)"

go_env="$(go env GOVERSION GOOS GOARCH)" || die "'go env' failed"
{ read -r go_version; read -r goos; read -r goarch; } <<<"$go_env"
[[ -n "${goarch:-}" ]] || die "could not read GOVERSION/GOOS/GOARCH from 'go env'"

# Build recipe: bump when flags below change so old caches are not reused.
recipe="v1 tags=selinux,notest,grpcnotrace ldflags=-s,-w trimpath"
inputs_hash="$(
  {
    echo "$recipe"
    cat "$tools/go.mod" "$tools/go.sum" \
      "$tools/etcd/go.mod" "$tools/etcd/go.sum" \
      "$tools/helm/go.mod" "$tools/helm/go.sum"
  } | sha256sum | cut -c1-12
)"
key="k8s-${k8s_version}_etcd-${etcd_version}_helm-${helm_version}_${go_version}_${goos}-${goarch}_${inputs_hash}"
bin="$cache_root/$key/bin"

# name|module dir|package|extra env (space separated)|ldflags beyond -s -w
k8s_x="-X k8s.io/component-base/version.gitVersion=${k8s_version} \
-X k8s.io/client-go/pkg/version.gitVersion=${k8s_version} \
-X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/client-go/pkg/version.gitTreeState=clean \
-X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z \
-X k8s.io/client-go/pkg/version.buildDate=1970-01-01T00:00:00Z"
k8s_major_minor="${k8s_version#v}"
k8s_major="${k8s_major_minor%%.*}"
k8s_minor="${k8s_major_minor#*.}"
k8s_minor="${k8s_minor%%.*}"
k8s_x="$k8s_x -X k8s.io/component-base/version.gitMajor=${k8s_major} \
-X k8s.io/client-go/pkg/version.gitMajor=${k8s_major} \
-X k8s.io/component-base/version.gitMinor=${k8s_minor} \
-X k8s.io/client-go/pkg/version.gitMinor=${k8s_minor}"

# Upstream (hack/lib/golang.sh) links the control plane and kube-proxy
# statically and leaves cgo at Go's default for the kubelet; so do we.
targets=(
  "kube-apiserver|$tools|k8s.io/kubernetes/cmd/kube-apiserver|CGO_ENABLED=0|$k8s_x"
  "kube-controller-manager|$tools|k8s.io/kubernetes/cmd/kube-controller-manager|CGO_ENABLED=0|$k8s_x"
  "kube-scheduler|$tools|k8s.io/kubernetes/cmd/kube-scheduler|CGO_ENABLED=0|$k8s_x"
  "kube-proxy|$tools|k8s.io/kubernetes/cmd/kube-proxy|CGO_ENABLED=0|$k8s_x"
  "kubelet|$tools|k8s.io/kubernetes/cmd/kubelet||$k8s_x"
  "etcd|$tools/etcd|go.etcd.io/etcd/server/v3|CGO_ENABLED=0|"
  "helm|$tools/helm|helm.sh/helm/v4/cmd/helm|CGO_ENABLED=0|-X helm.sh/helm/v4/internal/version.version=${helm_version} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
)

# kube-router (the NetworkPolicy enforcer) and CoreDNS each have a module and cache key of
# their own, so changing them never rebuilds Kubernetes; they are linked into the same bin dir.
# extra NAME MODULE PACKAGE [VERSION_VAR]: VERSION_VAR, a Go string variable set to the module's
# version (-X), for programs that report it (otherwise they say "dev").
extra() {
  local name=$1 module=$2 pkg=$3 version_var=${4:-} dir="$tools/$1" version hash out xflags=
  version="$(modver "$dir/go.mod" "$module")"
  [[ -z "$version_var" ]] || xflags=" -X $version_var=$version"
  hash="$({ echo "$recipe$xflags"; cat "$dir/go.mod" "$dir/go.sum"; } | sha256sum | cut -c1-12)"
  out="$cache_root/${name}-${version}_${go_version}_${goos}-${goarch}_${hash}/$name"
  if [[ ! -x "$out" ]]; then
    mkdir -p "$(dirname "$out")"
    log "building $name $version"
    (cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -p "$jobs" -ldflags "-s -w$xflags" \
      -o "$out.tmp" "$pkg") || die "go build of $name failed"
    mv -f "$out.tmp" "$out"
  fi
  mkdir -p "$bin"
  ln -sfn "$out" "$bin/$name"
}

# own NAME: a program of this repository's own, the main package of the module tools/NAME. It
# has no upstream version, so its key hashes its Go sources along with go.mod and go.sum.
own() {
  local name=$1 dir="$tools/$1" hash out
  hash="$({ echo "$recipe"; cat "$dir/go.mod" "$dir/go.sum" "$dir"/*.go; } | sha256sum | cut -c1-12)"
  out="$cache_root/${name}_${go_version}_${goos}-${goarch}_${hash}/$name"
  if [[ ! -x "$out" ]]; then
    mkdir -p "$(dirname "$out")"
    log "building $name"
    (cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -buildvcs=false -trimpath -p "$jobs" -ldflags "-s -w" \
      -o "$out.tmp" .) || die "go build of $name failed"
    mv -f "$out.tmp" "$out"
  fi
  mkdir -p "$bin"
  ln -sfn "$out" "$bin/$name"
}

extras() {
  extra kube-router github.com/cloudnativelabs/kube-router/v2 github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
  extra coredns github.com/coredns/coredns github.com/coredns/coredns
  extra kwok sigs.k8s.io/kwok sigs.k8s.io/kwok/cmd/kwok
  extra traefik github.com/traefik/traefik/v3 github.com/traefik/traefik/v3/cmd/traefik \
    github.com/traefik/traefik/v3/pkg/version.Version
  own hostpath-provisioner
}

only=("$@")
if ((${#only[@]})); then
  chosen=()
  for want in "${only[@]}"; do
    found=
    for t in "${targets[@]}"; do
      [[ "${t%%|*}" == "$want" ]] && chosen+=("$t") && found=1
    done
    [[ -n "$found" ]] || die "no binary named '$want' (known: $(printf '%s ' "${targets[@]%%|*}"))"
  done
  targets=("${chosen[@]}")
  extras() { :; }
fi

missing=()
for t in "${targets[@]}"; do
  name="${t%%|*}"
  [[ -x "$bin/$name" ]] || missing+=("$t")
done

if ((${#missing[@]} == 0)); then
  log "warm: all ${#targets[@]} binaries cached for $key"
  extras
  echo "$bin"
  exit 0
fi

mkdir -p "$bin" || die "cannot create $bin"

# One builder per key at a time; a second caller waits, then finds them built.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$cache_root/$key/.lock"
  flock 9
fi

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

log "cold: building ${#missing[@]} of ${#targets[@]} binaries into $bin (go build -p $jobs, $go_version)"
total_start="$(now)"
report=()
for t in "${missing[@]}"; do
  IFS='|' read -r name dir pkg extra_env xflags <<<"$t"
  if [[ -x "$bin/$name" ]]; then # built by a concurrent run while we waited
    report+=("$(printf '%-24s %8s' "$name" cached)")
    continue
  fi
  tags="selinux,notest,grpcnotrace"
  start="$(now)"
  log "building $name ($pkg)"
  # shellcheck disable=SC2086 # extra_env is a deliberate word list
  if ! (cd "$dir" && env $extra_env go build -mod=readonly -buildvcs=false -trimpath -p "$jobs" \
    -tags "$tags" -ldflags "-s -w $xflags" -o "$bin/.$name.tmp" "$pkg"); then
    rm -f "$bin/.$name.tmp"
    die "go build of $name ($pkg in ${dir#"$here"/}) failed; see the go output above"
  fi
  mv -f "$bin/.$name.tmp" "$bin/$name"
  took="$(secs "$start" "$(now)")"
  size="$(du -h "$bin/$name" | cut -f1)"
  log "built $name in ${took}s ($size)"
  report+=("$(printf '%-24s %7ss %6s' "$name" "$took" "$size")")
done
total="$(secs "$total_start" "$(now)")"

{
  echo "build.sh: build times (wall clock, sequential, shared Go build cache):"
  printf '  %s\n' "${report[@]}"
  echo "  total ${total}s"
} >&2
extras
echo "$bin"
