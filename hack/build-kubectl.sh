#!/usr/bin/env bash
# Builds kubectl from the Go module proxy into bin/ (or $1). The chart tests
# drive the envtest API server with kubectl; a fresh machine has none, and
# Debian does not package it.
#
#   hack/build-kubectl.sh [OUT]     # about 2 minutes on 2 cores
#
# kubectl's main lives in k8s.io/kubernetes, but it is three lines around
# k8s.io/kubectl, which is a plain module: build those three lines instead.
set -euo pipefail

KUBECTL_VERSION="${KUBECTL_VERSION:-1.33.13}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/lib/kube-version.sh
source "$root/hack/lib/kube-version.sh"
out="${1:-$root/bin/kubectl}"

if [[ -x "$out" && "$("$out" version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p' | head -1)" == "v$KUBECTL_VERSION" ]]; then
  exit 0
fi

echo "build-kubectl: building kubectl v$KUBECTL_VERSION into $out" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
staging="0.${KUBECTL_VERSION#1.}"
cat >"$work/go.mod" <<GOMOD
module sluice.local/kubectl

go 1.24

require k8s.io/kubectl v$staging
GOMOD
cat >"$work/main.go" <<'GO'
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
GO
ldflags="$(kube_version_ldflags "$KUBECTL_VERSION")"
mkdir -p "$(dirname "$out")"
(
  cd "$work"
  go mod tidy >/dev/null 2>&1
  go build -trimpath -ldflags="$ldflags" -o "$out.tmp" .
)
mv -f "$out.tmp" "$out"
"$out" version --client >&2
