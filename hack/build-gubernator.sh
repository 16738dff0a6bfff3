#!/usr/bin/env bash
# Builds gubernator's server (cmd/gubernator) from the Go module proxy into
# bin/gubernator (or $1), a peer of the open-loop benchmark
# (hack/bench-openloop.sh). Cached: rebuilt only when the binary is missing
# or GUBERNATOR_VERSION changes.
#
#   hack/build-gubernator.sh [OUT]     # a few minutes on 2 cores the first time
set -euo pipefail

GUBERNATOR_VERSION="${GUBERNATOR_VERSION:-v2.13.0}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/bin/gubernator}"
stamp="$out.version"

if [[ -x "$out" && -f "$stamp" && "$(cat "$stamp")" == "$GUBERNATOR_VERSION" ]]; then
  exit 0
fi

echo "build-gubernator: building gubernator $GUBERNATOR_VERSION into $out" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
GOBIN="$work" go install -trimpath "github.com/gubernator-io/gubernator/v2/cmd/gubernator@$GUBERNATOR_VERSION"
mv -f "$work/gubernator" "$out" # atomic: running benchmarks keep the old file
echo "$GUBERNATOR_VERSION" >"$stamp"
