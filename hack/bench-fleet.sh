#!/usr/bin/env bash
# hack/bench-fleet.sh measures two-tier mode (spec.localTier) on this machine
# (`make bench-fleet`), in a few minutes:
#
#   1. builds bin/limiter, bin/loadgen and bin/benchfleet;
#   2. bin/benchfleet: one redis-server and N = 1, 4, 10 limiter processes;
#      one key driven at 2x, 1x, 0.9x and 0.5x its limit and skewed (80% of
#      0.9x to one pod), then exact (localTier off) at 1x and 0.9x; per case
#      the overshoot against the bound the limiters report, false denials,
#      Redis commands per decision (INFO commandstats), decisions/s and p99.
#      First TokenBucket, then FixedWindow (10 pods);
#   3. the local fast path's Go benchmark (ns and allocations per decision);
#   4. one limiter pod with localTier on a few hot keys against the
#      do-nothing RLS server: hack/bench.sh --local-tier --stores noop,redis.
#
# Usage: hack/bench-fleet.sh [--pods 1,4,10] [--duration 3s]
#
# Environment: BENCH_FLEET_PODS, BENCH_FLEET_DURATION (the same),
# BENCH_FLEET_FIXED_PODS (the FixedWindow run's pods, default 10), and
# BENCH_DURATION, BENCH_KEYS for step 4 (default 5s, 100 keys).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PODS=${BENCH_FLEET_PODS:-1,4,10}
DURATION=${BENCH_FLEET_DURATION:-3s}
FIXED_PODS=${BENCH_FLEET_FIXED_PODS:-10}
while [[ $# -gt 0 ]]; do
	case $1 in
	--pods) PODS=${2:?--pods needs a value}; shift 2 ;;
	--duration) DURATION=${2:?--duration needs a value}; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) echo "bench-fleet: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done

say() { printf '\n=== %s\n' "$*"; }

say "machine"
echo "cores: $(nproc); load: $(uptime | sed 's/.*load average: //') (other work on this machine skews the figures)"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"

say "build"
mkdir -p bin
go build -o bin/limiter ./cmd/limiter
go build -o bin/loadgen ./cmd/loadgen
go build -o bin/benchfleet ./cmd/benchfleet
echo "bin/limiter bin/loadgen bin/benchfleet"

say "fleet: TokenBucket, pods $PODS"
bin/benchfleet --limiter bin/limiter --pods "$PODS" --duration "$DURATION" --algorithm TokenBucket

say "fleet: FixedWindow 2000 per 1s, $FIXED_PODS pods"
bin/benchfleet --limiter bin/limiter --pods "$FIXED_PODS" --duration "$DURATION" --algorithm FixedWindow --limit 2000 --period 1s \
	--cases '2x,1x,0.9x,0.5x,1x exact'

say "local fast path: go test -run '^\$' -bench LocalFastPath -benchmem ./limiter/store/localtier/"
go test -run '^$' -bench LocalFastPath -benchmem -benchtime "${BENCH_GOTIME:-1s}" ./limiter/store/localtier/

say "one pod with localTier against the do-nothing RLS server (hack/bench.sh --local-tier)"
echo "load: $(uptime | sed 's/.*load average: //')"
BENCH_DURATION=${BENCH_DURATION:-5s} BENCH_KEYS=${BENCH_KEYS:-100} \
	hack/bench.sh --local-tier --stores noop,redis --no-go-bench --no-faults
