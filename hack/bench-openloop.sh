#!/usr/bin/env bash
# hack/bench-openloop.sh: the open-loop benchmark (`make bench`, issue 42).
# What a user feels is the latency a limiter adds at the rate they send, and
# what they pay is cores. Here every call is scheduled at a fixed rate
# whether or not answers came back (bin/loadgen --rate), latency counts from
# each call's scheduled start (no coordinated omission), and a call that
# cannot be sent (--max-in-flight calls in flight) or is not answered within
# --drop-after of its start is dropped and counted.
#
#   1. builds bin/loadgen and bin/limiter; starts every server once, on a
#      loopback /24 of the script's own (hack/lib/testnet.sh):
#        noop           the do-nothing RLS server (the baseline)
#        memory         the limiter, memory store
#        redis          the limiter, Redis store, exact (one round trip a decision)
#        two-tier-hot   the limiter, Redis store, two-tier (localTier), on
#                       BENCH_OPEN_HOT_KEYS keys (default 10): hot keys
#        two-tier-cold  the same, on BENCH_OPEN_KEYS keys (default 10000), none hot
#        redis-cluster  the limiter, Redis store, exact, on a Redis Cluster of 3
#                       primaries (no replicas) started here; each call has
#                       BENCH_OPEN_SPREAD descriptors (default 3), each its own
#                       key, so one call's decisions spread over the shards
#        redis-spread   redis's limiter and redis-server with redis-cluster's
#                       calls: its standalone twin (not in the default modes)
#        erl            envoyproxy/ratelimit (bin/erl, make erl) on its own redis-server
#        gubernator     gubernator v2.13.0 (bin/gubernator, make gubernator), one
#                       in-memory node, over its own GetRateLimits API
#      (redis, redis-spread and the two-tier modes share one redis-server);
#   2. in each of BENCH_OPEN_ROUNDS interleaved rounds, for each rate of
#      BENCH_OPEN_RATES, runs every mode in turn; CPU per decision is the
#      server's own plus its redis-server's, from /proc;
#   3. prints the table (loadgen open-report): medians over the rounds, each
#      against the do-nothing server at the same rate and round;
#   4. steps each mode's rate up through BENCH_OPEN_STEP_RATES until one is
#      not held (p99 at or over BENCH_OPEN_P99_MAX, or anything dropped or
#      failed: loadgen held) and prints the highest held rate per mode.
#
# Usage: hack/bench-openloop.sh [--modes noop,memory,...] [--no-step]
#
# Environment:
#   BENCH_OPEN_RATES        offered rates of the table (default 5000,10000,20000,40000:
#                           the last one a step above what 2 shared cores hold)
#   BENCH_OPEN_ROUNDS       interleaved rounds (default 3)
#   BENCH_OPEN_DURATION     measured interval of each run (default 10s)
#   BENCH_OPEN_WARMUP       load before it, not measured (default 2s)
#   BENCH_OPEN_KEYS         distinct user_id values (default 10000)
#   BENCH_OPEN_HOT_KEYS     distinct user_id values of two-tier-hot (default 10)
#   BENCH_OPEN_MAX_IN_FLIGHT  loadgen --max-in-flight (default 1000)
#   BENCH_OPEN_DROP_AFTER   loadgen --drop-after (default 1s)
#   BENCH_OPEN_CONNS        gRPC connections (default 4)
#   BENCH_OPEN_STEP_RATES   rates of the step-up, ascending (default
#                           1000,2500,5000,7500,10000,15000,20000,30000,40000)
#   BENCH_OPEN_PAUSE        seconds of rest between runs, so that a server still
#                           working off an overloaded run's backlog does not load
#                           the next (default 1)
#   BENCH_OPEN_STEP_DURATION  measured interval of each step (default 5s)
#   BENCH_OPEN_P99_MAX      the p99 a held rate stays under (default 5ms)
#   BENCH_OPEN_SPREAD       descriptors (decisions) per call of redis-cluster (default 3)
#   BENCH_OPEN_MODES        modes, comma-separated (default all eight)
#   BENCH_GOMEMLIMIT        as in hack/bench.sh (default 241591860)
#   BENCH_BIN               where the binaries are (default bin)
#   BENCH_NO_BUILD          when set, use BENCH_BIN's loadgen and limiter as they
#                           are (an A/B of two builds), not built from this tree
#
# Every process the script starts is stopped when it exits, however it exits.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RATES=${BENCH_OPEN_RATES:-5000,10000,20000,40000}
ROUNDS=${BENCH_OPEN_ROUNDS:-3}
DURATION=${BENCH_OPEN_DURATION:-10s}
WARMUP=${BENCH_OPEN_WARMUP:-2s}
KEYS=${BENCH_OPEN_KEYS:-10000}
HOT_KEYS=${BENCH_OPEN_HOT_KEYS:-10}
MAX_IN_FLIGHT=${BENCH_OPEN_MAX_IN_FLIGHT:-1000}
DROP_AFTER=${BENCH_OPEN_DROP_AFTER:-1s}
CONNS=${BENCH_OPEN_CONNS:-4}
STEP_RATES=${BENCH_OPEN_STEP_RATES:-1000,2500,5000,7500,10000,15000,20000,30000,40000}
PAUSE=${BENCH_OPEN_PAUSE:-1}
STEP_DURATION=${BENCH_OPEN_STEP_DURATION:-5s}
P99_MAX=${BENCH_OPEN_P99_MAX:-5ms}
SPREAD=${BENCH_OPEN_SPREAD:-3}
MODES=${BENCH_OPEN_MODES:-noop,memory,redis,two-tier-hot,two-tier-cold,redis-cluster,erl,gubernator}
GOMEMLIMIT_LIMITER=${BENCH_GOMEMLIMIT-241591860}
BIN=${BENCH_BIN:-bin}
STEP=1

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
say() { printf '\n=== %s\n' "$*"; }
warn() { printf 'bench-openloop: warning: %s\n' "$*" >&2; }
die() {
	printf 'bench-openloop: error: %s\n' "$*" >&2
	exit 1
}

while [[ $# -gt 0 ]]; do
	case $1 in
	--modes) [[ $# -ge 2 ]] || die "--modes needs a value"; MODES=$2; shift 2 ;;
	--modes=*) MODES=${1#*=}; shift ;;
	--no-step) STEP=0; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-openloop: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_OPEN_ROUNDS '$ROUNDS': want a positive number"
[[ $SPREAD =~ ^[1-9][0-9]*$ ]] || die "BENCH_OPEN_SPREAD '$SPREAD': want a positive number"
[[ $PAUSE =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "BENCH_OPEN_PAUSE '$PAUSE': want a number of seconds"
for r in ${RATES//,/ } ${STEP_RATES//,/ }; do
	[[ $r =~ ^[1-9][0-9]*$ ]] || die "rate '$r' in BENCH_OPEN_RATES or BENCH_OPEN_STEP_RATES: want a positive whole number of calls per second"
done
IFS=, read -r -a MODE_LIST <<<"$MODES"
for m in "${MODE_LIST[@]}"; do
	case $m in
	noop | memory | redis | two-tier-hot | two-tier-cold | redis-cluster | redis-spread | erl | gubernator) ;;
	*) die "unknown mode '$m' in --modes: want noop, memory, redis, two-tier-hot, two-tier-cold, redis-cluster, redis-spread, erl and/or gubernator" ;;
	esac
done

# shellcheck source=hack/lib/testnet.sh
source "$ROOT/hack/lib/testnet.sh"
testnet_claim || exit 1
HOST=$TESTNET_HOST
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-openloop.XXXXXX")
PIDS=()

# stop_pid PID: SIGTERM, up to 10s to exit, then SIGKILL.
stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	for pid in "${PIDS[@]+"${PIDS[@]}"}"; do stop_pid "$pid"; done
	if [[ -n ${KEEP_WORK:-} ]]; then echo "bench-openloop: logs and results kept in $WORK" >&2; else rm -rf "$WORK"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench-openloop: interrupted" >&2; exit 130' INT TERM

# next_port VAR: the next port of our own /24 that nothing listens on.
PORT=20000
next_port() {
	while (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; do PORT=$((PORT + 1)); done
	printf -v "$1" '%s' "$PORT"
	PORT=$((PORT + 1))
}

# start NAME CMD...: run CMD in the background, logging to $WORK/NAME.log;
# its pid goes to PID_OF[NAME].
declare -A PID_OF ADDR_OF CPU_OF PROTO_OF ADMIN_OF
start() {
	local name=$1
	shift
	"$@" >"$WORK/$name.log" 2>&1 &
	PID_OF[$name]=$!
	PIDS+=("$!")
}

# wait_answers NAME: poll until the server of NAME answers a call (30s).
wait_answers() {
	local name=$1 i
	for ((i = 0; i < 150; i++)); do
		kill -0 "${PID_OF[$name]}" 2>/dev/null || { tail -n 20 "$WORK/$name.log" >&2; die "$name exited during start-up"; }
		if $BIN/loadgen --probe --addr "${ADDR_OF[$name]}" --protocol "${PROTO_OF[$name]:-rls}" \
			--domain bench --descriptor 'user_id=probe' --timeout 1s >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	tail -n 20 "$WORK/$name.log" >&2
	die "$name did not answer on ${ADDR_OF[$name]} within 30s"
}

# start_redis NAME: a redis-server of its own; its address is ADDR_OF[NAME].
start_redis() {
	local name=$1 port i
	next_port port
	start "$name" redis-server --bind "$HOST" --port "$port" --save '' --appendonly no \
		--dir "$WORK" --loglevel warning --protected-mode yes
	ADDR_OF[$name]=$HOST:$port
	for ((i = 0; i < 100; i++)); do
		[[ $(redis-cli -h "$HOST" -p "$port" PING 2>/dev/null) == PONG ]] && return 0
		sleep 0.1
	done
	die "$name did not answer PING within 10s"
}

# start_cluster: 3 redis-servers in cluster mode, one primary each of a
# third of the slots (redis-cli --cluster create), no replicas; their
# pids go to CLUSTER_PIDS, the store URL to CLUSTER_URL.
CLUSTER_PIDS='' CLUSTER_URL=''
start_cluster() {
	local i j port addrs=() name a
	for i in 1 2 3; do
		name=cluster-$i
		next_port port
		# The cluster bus listens on port+10000: skip ports whose bus port is taken.
		while (exec 3<>"/dev/tcp/$HOST/$((port + 10000))") 2>/dev/null; do next_port port; done
		mkdir -p "$WORK/$name"
		start "$name" redis-server --bind "$HOST" --port "$port" --save '' --appendonly no \
			--dir "$WORK/$name" --loglevel warning --protected-mode yes \
			--cluster-enabled yes --cluster-config-file nodes.conf --cluster-announce-ip "$HOST" \
			--cluster-node-timeout 5000
		addrs+=("$HOST:$port")
		CLUSTER_PIDS+=${CLUSTER_PIDS:+,}${PID_OF[$name]}
		for ((j = 0; j < 100; j++)); do
			[[ $(redis-cli -h "$HOST" -p "$port" PING 2>/dev/null) == PONG ]] && break
			((j < 99)) || die "$name did not answer PING within 10s"
			sleep 0.1
		done
	done
	timeout 120 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$WORK/cluster-create.log" 2>&1 ||
		{ cat "$WORK/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
	for ((j = 0; j < 600; j++)); do
		local ok=1
		for a in "${addrs[@]}"; do
			[[ $(redis-cli -h "${a%:*}" -p "${a##*:}" CLUSTER INFO 2>/dev/null | tr -d '\r') == *cluster_state:ok* ]] || ok=0
		done
		((ok)) && break
		((j < 599)) || die "the Redis Cluster did not report cluster_state:ok within 60s"
		sleep 0.1
	done
	CLUSTER_URL="redis-cluster://$(IFS=,; echo "${addrs[*]}")"
	echo "redis cluster: ${addrs[*]} (pids $CLUSTER_PIDS)"
}

# start_limiter NAME POLICY STORE: the limiter on ports of its own.
start_limiter() {
	local name=$1 policy=$2 store=$3 grpc http admin
	next_port grpc
	next_port http
	next_port admin
	start "$name" env GOMEMLIMIT="$GOMEMLIMIT_LIMITER" $BIN/limiter --policies "$policy" --store "$store" \
		--tenant-max-policies-per-request 0 --tenant-store-calls-per-second 0 \
		--grpc-addr "$HOST:$grpc" --http-addr "$HOST:$http" --admin-addr "$HOST:$admin"
	ADDR_OF[$name]=$HOST:$grpc
	CPU_OF[$name]=${PID_OF[$name]}
	ADMIN_OF[$name]=$HOST:$admin
}

# wait_policies NAME: the limiter answers OK to everything until its
# policies are loaded: poll its /metrics until they are (30s).
wait_policies() {
	local name=$1 i
	command -v curl >/dev/null || return 0
	for ((i = 0; i < 150; i++)); do
		curl -fsS --max-time 2 "http://${ADMIN_OF[$name]}/metrics" 2>/dev/null |
			grep -Eq '^sluice_snapshot_policies [1-9]' && return 0
		sleep 0.2
	done
	die "$name did not load its policies within 30s"
}

start_noop() {
	local grpc
	next_port grpc
	start noop $BIN/loadgen --serve-noop "$HOST:$grpc" --serve-for 24h
	ADDR_OF[noop]=$HOST:$grpc
	CPU_OF[noop]=${PID_OF[noop]}
}

# start_erl: envoyproxy/ratelimit on its own redis-server, with the
# benchmark's limit as an ERL config (RUNTIME_ROOT/ratelimit/config).
start_erl() {
	local grpc http debug
	start_redis erl-redis
	mkdir -p "$WORK/erl/ratelimit/config"
	printf '%s\n' 'domain: bench' 'descriptors:' '  - key: user_id' \
		'    rate_limit: {unit: second, requests_per_unit: 1000000000}' >"$WORK/erl/ratelimit/config/bench.yaml"
	next_port grpc
	next_port http
	next_port debug
	start erl env RUNTIME_ROOT="$WORK/erl" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		REDIS_SOCKET_TYPE=tcp REDIS_URL="${ADDR_OF[erl-redis]}" USE_STATSD=false LOG_LEVEL=warn \
		HOST="$HOST" PORT="$http" GRPC_HOST="$HOST" GRPC_PORT="$grpc" DEBUG_HOST="$HOST" DEBUG_PORT="$debug" \
		"$BIN/erl"
	ADDR_OF[erl]=$HOST:$grpc
	CPU_OF[erl]=${PID_OF[erl]},${PID_OF[erl-redis]}
}

# start_gubernator: one gubernator node, in memory; member-list discovery
# of itself alone (discovery "none" leaves its peer pool empty).
start_gubernator() {
	local grpc http ml
	next_port grpc
	next_port http
	next_port ml
	start gubernator env GUBER_GRPC_ADDRESS="$HOST:$grpc" GUBER_HTTP_ADDRESS="$HOST:$http" \
		GUBER_MEMBERLIST_ADDRESS="$HOST:$ml" GUBER_MEMBERLIST_BIND_ADDRESS="$HOST:$ml" \
		GUBER_MEMBERLIST_KNOWN_NODES="$HOST:$ml" GUBER_LOG_LEVEL=warn OTEL_TRACES_EXPORTER=none \
		"$BIN/gubernator"
	ADDR_OF[gubernator]=$HOST:$grpc
	CPU_OF[gubernator]=${PID_OF[gubernator]}
	PROTO_OF[gubernator]=gubernator
}

# write_policies: the benchmark policy (one counter per user_id, a limit
# so high that runs measure decisions, not denials), exact and two-tier.
POLICY=$WORK/policy.yaml
POLICY_TIER=$WORK/policy-tier.yaml
write_policies() {
	printf '%s\n' 'apiVersion: ratelimit.sluice.dev/v1alpha1' 'kind: RateLimitPolicy' \
		'metadata: {name: bench, namespace: default}' 'spec:' '  domain: bench' \
		'  descriptors: [{key: user_id}]' '  algorithm: TokenBucket' \
		'  rate: {limit: 1000000000, period: 1s}' >"$POLICY"
	cp "$POLICY" "$POLICY_TIER"
	echo '  localTier: {enabled: true, maxOvershoot: "5%"}' >>"$POLICY_TIER"
}

has_mode() { [[ ",$MODES," == *",$1,"* ]]; }

# start_all: every server the modes need, each once for the whole run.
start_all() {
	local m
	if has_mode redis || has_mode redis-spread || has_mode two-tier-hot || has_mode two-tier-cold; then start_redis redis; fi
	if has_mode noop; then start_noop; fi
	if has_mode memory; then start_limiter memory "$POLICY" memory; fi
	if has_mode redis || has_mode redis-spread; then start_limiter redis-exact "$POLICY" "redis://${ADDR_OF[redis]}"; fi
	if has_mode redis-cluster; then
		start_cluster
		start_limiter redis-cluster "$POLICY" "$CLUSTER_URL"
		CPU_OF[redis-cluster]+=,$CLUSTER_PIDS
	fi
	if has_mode two-tier-hot || has_mode two-tier-cold; then start_limiter two-tier "$POLICY_TIER" "redis://${ADDR_OF[redis]}"; fi
	if has_mode erl; then start_erl; fi
	if has_mode gubernator; then start_gubernator; fi
	# The Redis modes' CPU is the limiter's and its redis-server's.
	if [[ -n ${CPU_OF[redis-exact]:-} ]]; then CPU_OF[redis-exact]+=,${PID_OF[redis]}; fi
	if [[ -n ${CPU_OF[two-tier]:-} ]]; then CPU_OF[two-tier]+=,${PID_OF[redis]}; fi
	for m in noop memory redis-exact two-tier redis-cluster erl gubernator; do
		[[ -n ${PID_OF[$m]:-} ]] || continue
		wait_answers "$m"
		if [[ -n ${ADMIN_OF[$m]:-} ]]; then wait_policies "$m"; fi
		echo "$m: ${ADDR_OF[$m]} (pid ${PID_OF[$m]}; CPU measured of pids ${CPU_OF[$m]:-?})"
	done
}

# server_of MODE: the server a mode loads (the two-tier modes share one).
server_of() {
	case $1 in
	two-tier-*) echo two-tier ;;
	redis | redis-spread) echo redis-exact ;;
	*) echo "$1" ;;
	esac
}

# load MODE RATE DURATION FILE: one open-loop run; its JSON goes to FILE.
load() {
	local mode=$1 rate=$2 duration=$3 file=$4 srv keys=$KEYS desc='user_id=%d' i
	srv=$(server_of "$mode")
	if [[ $mode == two-tier-hot ]]; then keys=$HOT_KEYS; fi
	if [[ $mode == redis-cluster || $mode == redis-spread ]]; then
		for ((i = 2; i <= SPREAD; i++)); do desc+=";user_id=%d.$i"; done
	fi
	sleep "$PAUSE"
	if ! $BIN/loadgen --addr "${ADDR_OF[$srv]}" --protocol "${PROTO_OF[$srv]:-rls}" --conns "$CONNS" \
		--rate "$rate" --max-in-flight "$MAX_IN_FLIGHT" --drop-after "$DROP_AFTER" \
		--keys "$keys" --duration "$duration" --warmup "$WARMUP" \
		--domain bench --descriptor "$desc" --hits 1 \
		--server-pid "${CPU_OF[$srv]}" --json-file "$file" --label "$mode at $rate/s" >"$file.txt" 2>&1; then
		warn "$mode at $rate/s failed: $(tail -n 1 "$file.txt")"
		rm -f "$file"
		return 0
	fi
	grep -E '^(open loop|latency +p|server CPU)' "$file.txt" || true
}

# table: the interleaved rounds, then the table.
table() {
	local round rate mode file args=()
	for ((round = 1; round <= ROUNDS; round++)); do
		for rate in ${RATES//,/ }; do
			for mode in "${MODE_LIST[@]}"; do
				file=$WORK/$mode.$rate.$round.json
				say "round $round: $mode at $rate/s"
				load "$mode" "$rate" "$DURATION" "$file"
				args+=("$mode=$file")
			done
		done
	done
	say "open loop: $ROUNDS rounds, $WARMUP + $DURATION a run, $KEYS keys ($HOT_KEYS for two-tier-hot; $SPREAD descriptors a call for redis-cluster and redis-spread), --max-in-flight $MAX_IN_FLIGHT, --drop-after $DROP_AFTER, $(nproc) cores shared by the servers, Redis and the load generator"
	$BIN/loadgen open-report --base noop "${args[@]}"
}

# step: each mode's rate stepped up until it is not held.
step() {
	local mode rate file best why summary=()
	for mode in "${MODE_LIST[@]}"; do
		best=none why="held at every step"
		for rate in ${STEP_RATES//,/ }; do
			file=$WORK/step.$mode.$rate.json
			say "step: $mode at $rate/s"
			load "$mode" "$rate" "$STEP_DURATION" "$file"
			if [[ -f $file ]] && why=$($BIN/loadgen held --p99-max "$P99_MAX" "$file"); then
				best=$rate why="held at every step"
				continue
			fi
			[[ -f $file ]] || why="$rate/s: the run failed"
			why="first not held: $why"
			break
		done
		summary+=("$(printf '%-14s %8s   %s' "$mode" "$best" "$why")")
	done
	say "highest rate held (p99 under $P99_MAX, nothing dropped, no errors; $WARMUP + $STEP_DURATION a step, steps $STEP_RATES)"
	printf '%-14s %8s\n' mode "held/s"
	printf '%s\n' "${summary[@]}"
}

# store_check: how many of each limiter's decisions (all runs, warm-ups
# and steps included) its failure mode or local fallback gave instead of
# its store: under overload they answer fast and flatter the figures.
store_check() {
	local m metrics decided failed errors
	command -v curl >/dev/null || return 0
	say "limiters' decisions by source (sluice_decisions_total, sluice_store_errors_total; all runs)"
	for m in memory redis-exact two-tier redis-cluster; do
		[[ -n ${ADMIN_OF[$m]:-} ]] || continue
		metrics=$(curl -fsS --max-time 5 "http://${ADMIN_OF[$m]}/metrics" 2>/dev/null) || {
			warn "could not read $m's /metrics"
			continue
		}
		decided=$(awk '/^sluice_decisions_total/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
		failed=$(awk '/^sluice_decisions_total/ && /result="(failed_open|failed_closed|local_fallback)"/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
		errors=$(awk '/^sluice_store_errors_total/ {s += $NF} END {printf "%.0f", s}' <<<"$metrics")
		echo "$m: $decided decisions, $failed of them by the failure mode or local fallback, $errors store errors"
		if [[ $failed != 0 ]]; then warn "$m: $failed decisions did not come from its store: its figures are flattered"; fi
	done
}

# drop_mode MODE: leaves MODE out of the run.
drop_mode() {
	local m keep=()
	for m in "${MODE_LIST[@]}"; do [[ $m == "$1" ]] || keep+=("$m"); done
	MODE_LIST=("${keep[@]+"${keep[@]}"}")
	MODES=$(IFS=,; echo "${MODE_LIST[*]-}")
}

say "open-loop benchmark"
echo "cores:     $(nproc)   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit:    $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
mkdir -p "$BIN"
if [[ -n ${BENCH_NO_BUILD:-} ]]; then
	echo "binaries:  $BIN/loadgen and $BIN/limiter as they are (BENCH_NO_BUILD)"
else
	go build -o "$BIN/loadgen" ./cmd/loadgen || die "building $BIN/loadgen failed"
	if has_mode memory || has_mode redis || has_mode redis-spread || has_mode two-tier-hot || has_mode two-tier-cold || has_mode redis-cluster; then
		go build -o "$BIN/limiter" ./cmd/limiter || die "building $BIN/limiter failed"
	fi
fi
for peer in erl gubernator; do
	if has_mode "$peer" && [[ ! -x $BIN/$peer ]]; then
		warn "$BIN/$peer is missing (make $peer): leaving $peer out"
		drop_mode "$peer"
	fi
done
((${#MODE_LIST[@]} > 0)) || die "no mode left to run"
echo "rates:     $RATES; modes: $MODES"
if has_mode redis || has_mode redis-spread || has_mode two-tier-hot || has_mode two-tier-cold || has_mode redis-cluster || has_mode erl; then
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null || die "redis-server and redis-cli are needed (make deps)"
fi
write_policies
say "servers"
start_all
table
if ((STEP)); then step; fi
store_check
echo
echo "offered/s: the schedule's rate; answered/s: calls answered within --drop-after of their start."
echo "p50, p99, p99.9: latency from each call's scheduled start (queueing behind late calls included), answered calls."
echo "dropped: calls not sent (--max-in-flight in flight) or not answered within --drop-after, of those scheduled."
echo "CPU µs/dec: the server's CPU per answered decision plus its redis-server's (of it redis), from /proc."
echo "redis-cluster, redis-spread: a call is $SPREAD decisions (descriptors), each on its own key (over 3 shards in the cluster); µs/dec is per call."
echo "vs noop: the median over rounds of each round's ratio to the do-nothing server at the same rate."
echo "send lag p99: how late the load generator itself sent calls after their scheduled start (part of every latency)."
