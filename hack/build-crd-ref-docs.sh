#!/usr/bin/env bash
# Builds crd-ref-docs (github.com/elastic/crd-ref-docs) from the Go module
# proxy into bin/ (or $1), unless the binary there is already that version.
# make docs renders docs/reference/api.md with it; make verify checks that
# file is current.
#
#   hack/build-crd-ref-docs.sh [OUT]     # about 15 seconds the first time
set -euo pipefail

CRD_REF_DOCS_VERSION="${CRD_REF_DOCS_VERSION:-v0.3.0}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/bin/crd-ref-docs}"

# go version -m reads the module version the binary was built from.
if [[ -x "$out" ]] && go version -m "$out" 2>/dev/null |
  awk '$1 == "mod" && $2 == "github.com/elastic/crd-ref-docs" { print $3 }' | grep -qx "$CRD_REF_DOCS_VERSION"; then
  exit 0
fi

echo "build-crd-ref-docs: building crd-ref-docs $CRD_REF_DOCS_VERSION into $out" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
GOFLAGS=-buildvcs=false GOBIN="$work" go install -trimpath "github.com/elastic/crd-ref-docs@$CRD_REF_DOCS_VERSION"
mkdir -p "$(dirname "$out")"
mv "$work/crd-ref-docs" "$out"
