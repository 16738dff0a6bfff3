#!/usr/bin/env bash
# hack/bench.sh runs Sluice's benchmark on this machine and prints the figures
# (`make bench`):
#
#   1. builds bin/limiter and bin/loadgen;
#   2. writes a benchmark policy (domain bench, one counter per user_id, a
#      limit so high that the run measures decisions, not denials);
#   3. starts redis-server on a free loopback port;
#   4. in each of BENCH_ROUNDS interleaved rounds, for each of: the
#      do-nothing RLS server (baseline), the same server waiting
#      BENCH_NOOP_WAIT a call (noop-wait: what a store's wait alone costs
#      under this closed-loop load), the limiter with the memory store,
#      the limiter with the Redis store in exact mode, and in two-tier mode
#      (localTier): starts it, waits until it answers, sends load with
#      bin/loadgen, prints the result, stops it. CPU is measured per process
#      from /proc (the limiter, and its redis-server), not machine-wide;
#   5. prints Redis's memory per counter key (from counters made long-lived
#      on purpose: the benchmark's own expire a millisecond after each write);
#   6. runs the in-process Go benchmarks of ./limiter/...;
#   7. prints a summary table per round compared with that round's baseline,
#      and the range of each ratio over the rounds;
#   8. runs hack/bench-faults.sh: decisions/s and latency before, during and
#      after Redis faults (a paused, a restarted, a failed-over primary).
#
# Usage: hack/bench.sh [--algorithm NAME] [--stores noop,noop-wait,memory,redis,two-tier] [--local-tier] [--no-go-bench] [--no-faults]
#
# --local-tier turns on two-tier mode (localTier, maxOvershoot 5%) in the
# benchmark policy of the redis run too, and skips the Redis memory figure
# (hack/bench-fleet.sh). The two-tier run always has it.
#
# Environment:
#   BENCH_DURATION     measured interval of each run (default 10s)
#   BENCH_WARMUP       unmeasured load before it (default 2s)
#   BENCH_CONCURRENCY  concurrent in-flight calls (default 64)
#   BENCH_CONNS        gRPC connections (default 4)
#   BENCH_KEYS         distinct user_id values (default 10000)
#   BENCH_ALGORITHM    TokenBucket (default), GCRA, SlidingWindow, FixedWindow or SlidingLog
#   BENCH_STORES       which runs, comma-separated (default noop,noop-wait,memory,redis,two-tier)
#   BENCH_NOOP_WAIT    how long the noop-wait server holds each call (default 500us)
#   BENCH_BIN          where to build limiter and loadgen (default bin)
#   BENCH_ROUNDS       interleaved rounds of all the runs (default 3)
#   BENCH_GOMEMLIMIT   GOMEMLIMIT of the limiter runs (default 241591860: what
#                      the operator sets for the chart's 256Mi memory limit,
#                      under which the limiter collects at GOGC=400); empty
#                      for none (the limiter then collects at Go's default)
#   BENCH_GOTIME       -benchtime of the Go benchmarks (default 1s)
#   BENCH_MEMORY_KEYS  counters created for the Redis memory figure (default 10000)
#   BENCH_FAULT_*      see hack/bench-faults.sh --help
#
# All traffic stays on a loopback /24 of the script's own (127.A.B.1,
# hack/lib/testnet.sh), so that another run beside it never takes its
# ports. Every process the script starts is stopped
# when it exits, however it exits.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DURATION=${BENCH_DURATION:-10s}
WARMUP=${BENCH_WARMUP:-2s}
CONCURRENCY=${BENCH_CONCURRENCY:-64}
CONNS=${BENCH_CONNS:-4}
KEYS=${BENCH_KEYS:-10000}
ALGORITHM=${BENCH_ALGORITHM:-TokenBucket}
STORES=${BENCH_STORES:-noop,noop-wait,memory,redis,two-tier}
NOOP_WAIT=${BENCH_NOOP_WAIT:-500us}
ROUNDS=${BENCH_ROUNDS:-3}
GOMEMLIMIT_LIMITER=${BENCH_GOMEMLIMIT-241591860}
GOTIME=${BENCH_GOTIME:-1s}
BIN=${BENCH_BIN:-bin}
GO_BENCH=1
FAULTS=1
LOCAL_TIER=0
# shellcheck source=hack/lib/testnet.sh
source "$ROOT/hack/lib/testnet.sh"
testnet_claim || exit 1
HOST=$TESTNET_HOST

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

while [[ $# -gt 0 ]]; do
	case $1 in
	--algorithm) [[ $# -ge 2 ]] || { echo "bench: --algorithm needs a value" >&2; exit 2; }; ALGORITHM=$2; shift 2 ;;
	--algorithm=*) ALGORITHM=${1#*=}; shift ;;
	--stores) [[ $# -ge 2 ]] || { echo "bench: --stores needs a value" >&2; exit 2; }; STORES=$2; shift 2 ;;
	--stores=*) STORES=${1#*=}; shift ;;
	--no-go-bench) GO_BENCH=0; shift ;;
	--local-tier) LOCAL_TIER=1; shift ;;
	--no-faults) FAULTS=0; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done

case $ALGORITHM in
TokenBucket | GCRA | SlidingWindow | FixedWindow | SlidingLog) ;;
*) echo "bench: unknown algorithm '$ALGORITHM': want TokenBucket, GCRA, SlidingWindow, FixedWindow or SlidingLog" >&2; exit 2 ;;
esac
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench: BENCH_ROUNDS '$ROUNDS': want a positive number" >&2; exit 2; }
want_noop=0 want_wait=0 want_memory=0 want_redis=0 want_tier=0
IFS=, read -r -a _stores <<<"$STORES"
for s in "${_stores[@]}"; do
	case $s in
	noop) want_noop=1 ;;
	noop-wait) want_wait=1 ;;
	memory) want_memory=1 ;;
	redis) want_redis=1 ;;
	two-tier) want_tier=1 ;;
	*) echo "bench: unknown store '$s' in --stores: want noop, noop-wait, memory, redis and/or two-tier" >&2; exit 2 ;;
	esac
done

say() { printf '\n=== %s\n' "$*"; }
warn() { printf 'bench: warning: %s\n' "$*" >&2; }
die() {
	printf 'bench: error: %s\n' "$*" >&2
	exit 1
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench.XXXXXX")
PIDS=()
FAILED=()

# stop_pid PID: SIGTERM, up to 10s to exit, then SIGKILL.
stop_pid() {
	local pid=$1 i
	kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		warn "process $pid did not exit on SIGTERM within 10s: killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

forget_pid() {
	local pid=$1 p keep=()
	for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
	PIDS=("${keep[@]+"${keep[@]}"}")
}

cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	for pid in "${PIDS[@]+"${PIDS[@]}"}"; do stop_pid "$pid"; done
	if [[ -n ${KEEP_WORK:-} ]]; then
		echo "bench: logs and results kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT TERM

# free_port VAR: sets VAR to a loopback TCP port that nothing listens on
# and that was not handed out before. Ports come from below the kernel's
# ephemeral range: one in it may be the local end of another process's
# connection, which the connect test does not see and bind refuses.
USED_PORTS=" "
PORT_HI=$(($(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768) - 1))
((PORT_HI > 12000)) || PORT_HI=60000
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((10000 + RANDOM % (PORT_HI - 10000)))
		[[ $USED_PORTS == *" $p "* ]] && continue
		if ! (exec 3<>"/dev/tcp/$HOST/$p") 2>/dev/null; then
			USED_PORTS+="$p "
			printf -v "$1" '%s' "$p"
			return 0
		fi
	done
	die "no free loopback port found"
}

# wait_ready NAME PID GRPC_PORT HTTP_PORT ADMIN_PORT LOG: poll until the server
# answers an RLS call (and, when curl is here, serves /metrics on its admin
# port with its policies loaded). Returns 2 when the server exited because
# another process took one of its ports meanwhile.
wait_ready() {
	local name=$1 pid=$2 grpc=$3 http=$4 admin=$5 log=$6 i metrics code
	for ((i = 0; i < 150; i++)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			if grep -q 'address already in use' "$log"; then
				warn "$name: another process took one of its ports meanwhile: trying new ports"
				wait "$pid" 2>/dev/null || true
				forget_pid "$pid"
				return 2
			fi
			echo "--- last lines of $name's log:" >&2
			tail -n 30 "$log" >&2 || true
			die "$name exited during start-up"
		fi
		if $BIN/loadgen --probe --addr "$HOST:$grpc" --domain bench --descriptor 'user_id=probe' --timeout 1s >/dev/null 2>&1; then
			if ! command -v curl >/dev/null; then
				return 0
			fi
			# /readyz when the server has one (the limiter does; 404 means none).
			code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$HOST:$http/readyz" 2>/dev/null) || code=000
			if [[ $code == 200 || $code == 404 ]] &&
				metrics=$(curl -fsS --max-time 2 "http://$HOST:$admin/metrics" 2>/dev/null); then
				# The limiter answers OK to everything until its snapshot is
				# installed: wait for it when it reports the gauge.
				if ! grep -q '^sluice_snapshot_policies ' <<<"$metrics" ||
					grep -Eq '^sluice_snapshot_policies [1-9]' <<<"$metrics"; then
					return 0
				fi
			fi
		fi
		sleep 0.2
	done
	echo "--- last lines of $name's log:" >&2
	tail -n 30 "$log" >&2 || true
	die "$name did not become ready on $HOST:$grpc within 30s"
}

# load LABEL NAME PIDS: run $BIN/loadgen against the server on $GRPC_PORT.
load() {
	local label=$1 name=$2 pids=$3
	say "$label"
	if ! $BIN/loadgen --addr "$HOST:$GRPC_PORT" --conns "$CONNS" --concurrency "$CONCURRENCY" \
		--keys "$KEYS" --duration "$DURATION" --warmup "$WARMUP" \
		--domain bench --descriptor 'user_id=%d' --hits 1 \
		--server-pid "$pids" --json-file "$WORK/$name.json"; then
		warn "load run '$label' failed"
		FAILED+=("$name")
		rm -f "$WORK/$name.json"
	fi
}

# new_ports: picks GRPC_PORT, HTTP_PORT and ADMIN_PORT for the next server.
GRPC_PORT='' HTTP_PORT='' ADMIN_PORT=''
new_ports() {
	free_port GRPC_PORT
	free_port HTTP_PORT
	free_port ADMIN_PORT
}

# server_counters NAME: prints the limiter's own decision and store-error
# counters from /metrics (and on Redis its round trips), and warns when
# decisions did not reach the store (failed open or local fallback), which
# would flatter the figures.
STORE_NOTES=()
server_counters() {
	local name=$1 metrics decided failed errors
	command -v curl >/dev/null || return 0
	metrics=$(curl -fsS --max-time 5 "http://$HOST:$ADMIN_PORT/metrics" 2>/dev/null) || {
		warn "could not read http://$HOST:$ADMIN_PORT/metrics"
		return 0
	}
	echo "limiter's /metrics (non-zero sluice_decisions_total and sluice_store_errors_total series):"
	awk '/^sluice_(decisions|store_errors)_total/ && $NF != 0 {print "  " $0}' <<<"$metrics"
	decided=$(awk '/^sluice_decisions_total/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
	failed=$(awk '/^sluice_decisions_total/ && /result="(failed_open|failed_closed|local_fallback)"/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
	errors=$(awk '/^sluice_store_errors_total/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
	echo "  sluice_store_errors_total, all causes: $errors"
	# On Redis: its round trips' mean time, sent to answered (not the wait
	# for one to start), and decisions per round trip.
	awk '/^sluice_redis_roundtrip_seconds_sum/ {s += $NF}
		/^sluice_redis_roundtrip_seconds_count/ {n += $NF}
		/^sluice_decisions_total/ {d += $NF}
		END {if (n > 0) printf "redis round trips: %d, %.0f µs each on average (sent to answered), %.1f decisions per round trip (local ones included)\n", n, s / n * 1e6, d / n}' <<<"$metrics"
	if [[ $failed != 0 || $errors != 0 ]]; then
		warn "$name: $failed of $decided decisions did not come from the store ($errors store errors): its figures are flattered"
		STORE_NOTES+=("$name: $failed of $decided decisions resolved by the failure mode, $errors store errors")
	else
		STORE_NOTES+=("$name: all $decided decisions came from the store, no store errors")
	fi
}

# start_server NAME CMD...: run CMD in the background, logging to
# $WORK/NAME.log; its pid is SERVER_PID.
SERVER_PID=
start_server() {
	local name=$1
	shift
	local log="$WORK/$name.log"
	"$@" >"$log" 2>&1 &
	SERVER_PID=$!
	PIDS+=("$SERVER_PID")
}

# ------------------------------------------------------------------ build
say "machine"
echo "cores:     $(nproc)   memory: $(free -h 2>/dev/null | awk '/^Mem:/ {print $2}')"
echo "go:        $(go version)"
echo "commit:    $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
echo "load:      concurrency $CONCURRENCY over $CONNS connections, $KEYS keys, $WARMUP warm-up + $DURATION measured, $ROUNDS interleaved rounds"
echo "limiter:   GOMEMLIMIT=${GOMEMLIMIT_LIMITER:-none} (as the operator sets it for a 256Mi limit)"
echo "policy:    $ALGORITHM, 1000000000 per 1s per user_id (decisions, not denials)"
echo "note:      the server, Redis and the load generator share these cores"

say "build"
mkdir -p "$BIN"
go build -o $BIN/loadgen ./cmd/loadgen || die "building $BIN/loadgen failed"
echo "$BIN/loadgen"
if ((want_memory || want_redis || want_tier)); then
	[[ -f cmd/limiter/main.go ]] || die "cmd/limiter/main.go does not exist yet: run with --stores noop to benchmark the baseline alone"
	go build -o $BIN/limiter ./cmd/limiter || die "building $BIN/limiter failed"
	echo "$BIN/limiter"
fi

POLICY="$WORK/bench-policy.yaml"
TIER_SPEC="  # localTier off: exact, one Redis call per decision"
TIER_NOTE=""
if ((LOCAL_TIER)); then
	TIER_SPEC='  localTier: {enabled: true, maxOvershoot: "5%"}'
	TIER_NOTE=", localTier"
fi
cat >"$POLICY" <<EOF
# Benchmark policy: one counter per user_id, limit high enough never to deny.
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bench, namespace: default}
spec:
  domain: bench
  descriptors: [{key: user_id}]
  algorithm: $ALGORITHM
  rate: {limit: 1000000000, period: 1s}
$TIER_SPEC
---
# For the Redis memory figure only. At 1e9 per second a bucket is full again
# a nanosecond after each request, so bench's keys expire within a
# millisecond of their last write: few live long enough to be measured. These
# keys live up to an hour.
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bench-memory, namespace: default}
spec:
  domain: bench-memory
  descriptors: [{key: user_id}]
  algorithm: $ALGORITHM
  rate: {limit: 100, period: 1h}
EOF
POLICY_TIER="$WORK/bench-policy-tier.yaml"
sed 's/^  # localTier off.*/  localTier: {enabled: true, maxOvershoot: "5%"}/' "$POLICY" >"$POLICY_TIER"
grep -q '^  localTier: {enabled: true' "$POLICY_TIER" || die "writing the two-tier policy failed"

# ------------------------------------------------------------------ redis
REDIS_PID=
REDIS_PORT=
if ((want_redis || want_tier)); then
	command -v redis-server >/dev/null || die "redis-server is not installed (apt-get install redis-server)"
	if ! command -v redis-cli >/dev/null; then
		if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
			echo "redis-cli is missing: installing redis-tools"
			apt-get install -y -qq redis-tools >/dev/null || die "apt-get install redis-tools failed"
		else
			die "redis-cli is not installed (apt-get install redis-tools)"
		fi
	fi
	free_port REDIS_PORT
	redis-server --bind "$HOST" --port "$REDIS_PORT" --save '' --appendonly no \
		--dir "$WORK" --loglevel warning --protected-mode yes >"$WORK/redis-server.log" 2>&1 &
	REDIS_PID=$!
	PIDS+=("$REDIS_PID")
	for ((i = 0; i < 100; i++)); do
		[[ $(redis-cli -h "$HOST" -p "$REDIS_PORT" PING 2>/dev/null) == PONG ]] && break
		kill -0 "$REDIS_PID" 2>/dev/null || { tail -n 20 "$WORK/redis-server.log" >&2; die "redis-server exited during start-up"; }
		sleep 0.1
	done
	[[ $(redis-cli -h "$HOST" -p "$REDIS_PORT" PING 2>/dev/null) == PONG ]] || die "redis-server did not answer PING within 10s"
	echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on $HOST:$REDIS_PORT (pid $REDIS_PID)"
fi

rinfo() { redis-cli -h "$HOST" -p "$REDIS_PORT" INFO memory | tr -d '\r' | sed -n "s/^$1://p"; }

# ------------------------------------------------------------------ runs
# launch NAME LABEL START: new ports, then START (a function that starts
# the server on $GRPC_PORT, $HTTP_PORT and $ADMIN_PORT with start_server),
# then wait_ready; on new ports again, 3 tries in all, when another
# process took one meanwhile.
launch() {
	local name=$1 label=$2 start=$3 try rc
	for try in 1 2 3; do
		new_ports
		"$start" "$name"
		rc=0
		wait_ready "$label" "$SERVER_PID" "$GRPC_PORT" "$HTTP_PORT" "$ADMIN_PORT" "$WORK/$name.log" || rc=$?
		((rc == 0)) && return 0
	done
	die "$label: its ports were taken $try times in a row"
}

start_noop() {
	start_server "$1" $BIN/loadgen --serve-noop "$HOST:$GRPC_PORT" --noop-metrics-addr "$HOST:$ADMIN_PORT" --serve-for 1h
	HTTP_PORT=$ADMIN_PORT # no HTTP API: readiness on the metrics port
}

start_noop_wait() {
	start_server "$1" $BIN/loadgen --serve-noop "$HOST:$GRPC_PORT" --noop-metrics-addr "$HOST:$ADMIN_PORT" \
		--noop-wait "$NOOP_WAIT" --serve-for 1h
	HTTP_PORT=$ADMIN_PORT
}

start_memory() {
	start_server "$1" env GOMEMLIMIT="$GOMEMLIMIT_LIMITER" $BIN/limiter --policies "$POLICY" --store memory \
		--tenant-max-policies-per-request 0 --tenant-store-calls-per-second 0 \
		--grpc-addr "$HOST:$GRPC_PORT" --http-addr "$HOST:$HTTP_PORT" --admin-addr "$HOST:$ADMIN_PORT"
}

RUN_POLICY=
start_redis() {
	start_server "$1" env GOMEMLIMIT="$GOMEMLIMIT_LIMITER" $BIN/limiter --policies "$RUN_POLICY" --store "redis://$HOST:$REDIS_PORT" \
		--tenant-max-policies-per-request 0 --tenant-store-calls-per-second 0 \
		--grpc-addr "$HOST:$GRPC_PORT" --http-addr "$HOST:$HTTP_PORT" --admin-addr "$HOST:$ADMIN_PORT"
}

run_noop() {
	local name=noop.$1
	launch "$name" noop start_noop
	load "round $1: noop baseline (gRPC + RLS protocol, no decision)" "$name" "$SERVER_PID"
	stop_pid "$SERVER_PID"
	forget_pid "$SERVER_PID"
}

# run_noop_wait: the do-nothing server holding each call NOOP_WAIT, doing
# nothing: with a fixed number of calls in flight, a wait alone lowers the
# rate and raises every process's CPU per decision (their transports' costs
# per second are shared by fewer decisions), so exact mode's round trip
# costs it even where Redis does no work.
run_noop_wait() {
	local name=noop-wait.$1
	launch "$name" "noop (waiting)" start_noop_wait
	load "round $1: noop, each call held $NOOP_WAIT (no decision, no store)" "$name" "$SERVER_PID"
	stop_pid "$SERVER_PID"
	forget_pid "$SERVER_PID"
}

run_memory() {
	local name=memory.$1
	launch "$name" "limiter (memory store)" start_memory
	load "round $1: limiter, memory store, $ALGORITHM" "$name" "$SERVER_PID"
	server_counters "$name"
	stop_pid "$SERVER_PID"
	forget_pid "$SERVER_PID"
}

# redis_memory: with the Redis-backed limiter still running, flushes Redis,
# creates MEMORY_KEYS long-lived counters through domain bench-memory (one
# call per key), and prints one key's MEMORY USAGE and used_memory per key.
MEMORY_KEYS=${BENCH_MEMORY_KEYS:-10000}
REDIS_KEY_BYTES=''
REDIS_BYTES_PER_KEY=''
rcli() { redis-cli -h "$HOST" -p "$REDIS_PORT" "$@"; }
redis_memory() {
	local key='' cursor=0 i before used nkeys reply type
	say "redis memory ($ALGORITHM counters)"
	echo "live keys right after the load run: $(rcli DBSIZE) (bench's keys expire 1ms after their last write)"
	rcli FLUSHALL >/dev/null
	before=$(rinfo used_memory)
	if ! $BIN/loadgen --addr "$HOST:$GRPC_PORT" --conns 1 --concurrency 8 --keys "$MEMORY_KEYS" \
		--duration 60s --warmup 0s --max-requests "$MEMORY_KEYS" \
		--domain bench-memory --descriptor 'user_id=%d' --hits 1 >"$WORK/memory-fill.txt" 2>&1; then
		cat "$WORK/memory-fill.txt" >&2
		warn "filling Redis with $MEMORY_KEYS counters failed"
		FAILED+=("redis-memory")
		return 0
	fi
	for ((i = 0; i < 1000; i++)); do
		mapfile -t reply < <(rcli SCAN "$cursor" MATCH 'sl:*' COUNT 100)
		cursor=${reply[0]:-0}
		if [[ ${#reply[@]} -gt 1 && -n ${reply[1]} ]]; then
			key=${reply[1]}
			break
		fi
		[[ $cursor == 0 ]] && break
	done
	nkeys=$(rcli DBSIZE)
	used=$(rinfo used_memory)
	echo "filled:           $MEMORY_KEYS calls to domain bench-memory ($ALGORITHM, 100 per 1h), one per user_id"
	if [[ -n $key ]]; then
		REDIS_KEY_BYTES=$(rcli MEMORY USAGE "$key" SAMPLES 0)
		type=$(rcli TYPE "$key")
		echo "one key:          $key"
		echo "  type:           $type ($(rcli OBJECT ENCODING "$key")), ttl $(rcli PTTL "$key") ms"
		[[ $type == string ]] && echo "  value:          $(rcli GET "$key")"
		echo "  MEMORY USAGE:   $REDIS_KEY_BYTES bytes"
	else
		warn "no key matching sl:* in Redis: did the limiter use the Redis store?"
	fi
	echo "keys:             $nkeys (DBSIZE)"
	echo "used_memory:      $used bytes ($(rinfo used_memory_human)); $before after FLUSHALL, before the fill"
	if [[ ${nkeys:-0} -gt 0 ]]; then
		REDIS_BYTES_PER_KEY=$(((used - before) / nkeys))
		echo "bytes per key:    $REDIS_BYTES_PER_KEY (growth of used_memory / keys: the key, its value, and its entries in the keyspace and expiry tables)"
	fi
}

# run_redis ROUND exact|two-tier: the limiter on redis-server, flushed first.
run_redis() {
	local round=$1 kind=$2 name policy note tier=0
	if [[ $kind == two-tier ]]; then
		name=two-tier.$round policy=$POLICY_TIER note=", localTier" tier=1
	else
		name=redis.$round policy=$POLICY note=$TIER_NOTE tier=$LOCAL_TIER
	fi
	rcli FLUSHALL >/dev/null
	rcli CONFIG RESETSTAT >/dev/null
	RUN_POLICY=$policy
	launch "$name" "limiter (redis store)" start_redis
	load "round $round: limiter, redis store, $ALGORITHM$note (server CPU = limiter + redis-server)" "$name" "$SERVER_PID,$REDIS_PID"
	server_counters "$name"
	echo "redis commands (INFO commandstats, warm-up included):"
	rcli INFO commandstats | tr -d '\r' | grep -E '^cmdstat_(evalsha|eval):' | sed 's/^/  /'
	if ((!tier && round == 1)); then
		redis_memory
	fi
	stop_pid "$SERVER_PID"
	forget_pid "$SERVER_PID"
}

# Interleaved rounds: each run is compared with the baseline of its own
# round, so that a change of other load on the machine moves both.
for ((round = 1; round <= ROUNDS; round++)); do
	if ((want_noop)); then run_noop "$round"; fi
	if ((want_wait)); then run_noop_wait "$round"; fi
	if ((want_memory)); then run_memory "$round"; fi
	if ((want_redis)); then run_redis "$round" exact; fi
	if ((want_tier)); then run_redis "$round" two-tier; fi
done

# ------------------------------------------------------------------ go benchmarks
if ((GO_BENCH)); then
	# The lifetime, priority and regions benchmarks have their own make
	# targets, with their own -benchtime: not run a second time here.
	own='^Benchmark(LifetimeOvershoot|PriorityShedding|Regions)$'
	say "in-process Go benchmarks: go test -run '^\$' -bench . -skip '$own' -benchmem -benchtime $GOTIME ./limiter/..."
	if ! go test -run '^$' -bench . -skip "$own" -benchmem -benchtime "$GOTIME" ./limiter/... 2>&1 | tee "$WORK/gobench.txt"; then
		warn "go test -bench failed"
		FAILED+=("go-bench")
	fi
fi

# ------------------------------------------------------------------ summary
say "summary: $ALGORITHM$TIER_NOTE, concurrency $CONCURRENCY, $KEYS keys, $DURATION per run, $(nproc) cores shared by server, Redis and load generator"
rounds=()
for ((round = 1; round <= ROUNDS; round++)); do
	report=()
	if ((want_noop)); then report+=("noop=$WORK/noop.$round.json"); fi
	if ((want_wait)); then report+=("noop-wait=$WORK/noop-wait.$round.json"); fi
	if ((want_memory)); then report+=("memory=$WORK/memory.$round.json"); fi
	if ((want_redis)); then report+=("redis=$WORK/redis.$round.json"); fi
	if ((want_tier)); then report+=("two-tier=$WORK/two-tier.$round.json"); fi
	rounds+=("${report[@]}")
	echo "round $round:"
	$BIN/loadgen report "${report[@]}"
	echo
done
echo "over the $ROUNDS rounds (least–most; ratios against the same round's baseline):"
$BIN/loadgen rounds "${rounds[@]}"
echo
echo "server µs/dec: CPU of the RLS server process per decision (utime+stime from /proc/PID/stat)."
echo "other µs/dec: redis-server's CPU per decision, on top of the limiter's; total = both."
if ((want_wait)); then echo "noop-wait: the do-nothing server holding each call $NOOP_WAIT (compare exact mode's mean Redis round trip above)."; fi
echo "other load: cores busy with processes other than the server, Redis and the load generator"
echo "  during the run (from /proc/stat); well above 0 means the figures are noisy."
for note in "${STORE_NOTES[@]+"${STORE_NOTES[@]}"}"; do echo "$note (counted by the limiter, warm-up included)."; done
if [[ -n $REDIS_KEY_BYTES ]]; then
	echo "redis memory: $REDIS_KEY_BYTES bytes per $ALGORITHM key (MEMORY USAGE), ${REDIS_BYTES_PER_KEY:-?} bytes per key of used_memory."
fi

# ------------------------------------------------------------------ faults
if ((FAULTS)); then
	say "Redis faults: hack/bench-faults.sh"
	if ! "$ROOT/hack/bench-faults.sh"; then
		warn "hack/bench-faults.sh failed"
		FAILED+=("faults")
	fi
fi

if [[ ${#FAILED[@]} -gt 0 ]]; then
	die "failed: ${FAILED[*]}"
fi
