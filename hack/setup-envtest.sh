#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver and etcd) from the Go module
# proxy into bin/k8s, and caches it there. setup-envtest's prebuilt binaries
# cannot be downloaded on our machines, so we compile them instead.
#
#   hack/setup-envtest.sh          # prints the assets directory for KUBEBUILDER_ASSETS
#
# Rebuilds only when a binary is missing or the pinned versions change.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-1.33.13}"
ETCD_VERSION="${ETCD_VERSION:-3.5.21}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/kube-version.sh
source "$root/hack/lib/kube-version.sh"
assets="${ENVTEST_ASSETS:-$root/bin/k8s}"
stamp="$assets/.versions"
# "stamped": kube-apiserver reports its version (/version, kubectl version,
# Helm's kubeVersion checks) instead of v0.0.0-master.
want="kube-apiserver=$KUBE_VERSION stamped etcd=$ETCD_VERSION"

log() { echo "setup-envtest: $*" >&2; }

if [[ -x "$assets/kube-apiserver" && -x "$assets/etcd" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "$assets"
  exit 0
fi

mkdir -p "$assets"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0

build_etcd() {
  log "building etcd v$ETCD_VERSION"
  mkdir -p "$work/etcd"
  (
    cd "$work/etcd"
    go mod init sluice.local/envtest-etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1
    go build -trimpath -ldflags='-s -w' -o "$assets/.etcd.tmp" go.etcd.io/etcd/server/v3
  )
  mv -f "$assets/.etcd.tmp" "$assets/etcd" # atomic: running tests keep the old file
}

build_apiserver() {
  log "building kube-apiserver v$KUBE_VERSION (about 8 minutes on 2 cores)"
  local dir="$work/apiserver" staging="0.${KUBE_VERSION#1.}"
  mkdir -p "$dir"
  # k8s.io/kubernetes refers to its staging modules as ./staging/src/...;
  # pin each one to its published v0.x release instead.
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "module sluice.local/envtest-apiserver"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    echo "replace ("
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$gomod" |
      while read -r m; do echo "	$m => $m v$staging"; done
    echo ")"
  } >"$dir/go.mod"
  cat >"$dir/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
GO
  local ldflags
  ldflags="$(kube_version_ldflags "$KUBE_VERSION")"
  (
    cd "$dir"
    go mod tidy >/dev/null
    go build -trimpath -ldflags="$ldflags" -o "$assets/.kube-apiserver.tmp" .
  )
  mv -f "$assets/.kube-apiserver.tmp" "$assets/kube-apiserver" # atomic: running tests keep the old file
}

[[ -x "$assets/etcd" && -f "$stamp" && " $(cat "$stamp") " == *" etcd=$ETCD_VERSION "* ]] || build_etcd
build_apiserver
echo "$want" >"$stamp"
log "done: $assets"
echo "$assets"
