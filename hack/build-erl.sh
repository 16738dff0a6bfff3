#!/usr/bin/env bash
# Builds envoyproxy/ratelimit's service (src/service_cmd) from the Go module
# proxy into bin/erl (or $1), for the differential tests that hold Sluice's
# ERL drop-in to ERL itself (limiter/erlcompat). Cached: rebuilt only when
# the binary is missing or ERL_VERSION changes.
#
#   hack/build-erl.sh [OUT]     # a few minutes on 2 cores the first time
set -euo pipefail

ERL_VERSION="${ERL_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/bin/erl}"
stamp="$out.version"

if [[ -x "$out" && -f "$stamp" && "$(cat "$stamp")" == "$ERL_VERSION" ]]; then
  exit 0
fi

echo "build-erl: building envoyproxy/ratelimit $ERL_VERSION into $out" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
GOBIN="$work" go install -trimpath "github.com/envoyproxy/ratelimit/src/service_cmd@$ERL_VERSION"
mv -f "$work/service_cmd" "$out" # atomic: running tests keep the old file
echo "$ERL_VERSION" >"$stamp"
