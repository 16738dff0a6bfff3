#!/usr/bin/env bash
# hack/bench-faults.sh measures the limiter through Redis faults (`make bench`
# runs it after hack/bench.sh; it also runs alone):
#
#   1. builds bin/limiter and bin/loadgen;
#   2. starts a Redis Cluster on loopback: 3 primaries, 1 replica each,
#      cluster-node-timeout 5s (a fault shorter than that is not failed over);
#   3. starts the limiter on it with the default --redis-timeout (20ms), one
#      policy with failureMode Open and a limit that never denies, so every
#      decision is measured, not denied;
#   4. for each scenario, against the primary of slots 0-5460 (a third of the
#      keys), runs bin/loadgen before the fault, during it, and after the
#      repair, and prints decisions/s and latency for each phase:
#        pause:    SIGSTOP (nothing answers, no RST), then SIGCONT;
#        restart:  SIGKILL, then the same node started again at once;
#        failover: SIGKILL, the replica promoted (after the node timeout),
#                  then the old primary restarted as a replica;
#   5. prints what the limiter counted in each phase: decisions that its
#      failure mode decided (failed_open) and breaker openings.
#
# Usage: hack/bench-faults.sh [--scenarios pause,restart,failover]
#
# Environment:
#   BENCH_FAULT_BEFORE       measured interval before the fault (default 5s)
#   BENCH_FAULT_DURING       measured interval during it (default 3s: shorter
#                            than the node timeout, so no failover in it)
#   BENCH_FAULT_AFTER        measured interval after the repair (default 5s)
#   BENCH_FAULT_SCENARIOS    default pause,restart,failover
#   BENCH_FAULT_CONCURRENCY  concurrent in-flight calls (default 16: the point
#                            is latency through a fault, not peak throughput)
#   BENCH_CONNS              gRPC connections (default 4)
#   BENCH_KEYS               distinct user_id values (default 10000)
#   BENCH_REDIS_TIMEOUT      the limiter's --redis-timeout (default 20ms)
#
# All traffic stays on a loopback /24 of the script's own (127.A.B.1,
# hack/lib/testnet.sh), so that another run beside it never takes its
# ports. Every process the script starts is stopped
# when it exits, however it exits.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

BEFORE=${BENCH_FAULT_BEFORE:-5s}
DURING=${BENCH_FAULT_DURING:-3s}
AFTER=${BENCH_FAULT_AFTER:-5s}
SCENARIOS=${BENCH_FAULT_SCENARIOS:-pause,restart,failover}
CONCURRENCY=${BENCH_FAULT_CONCURRENCY:-16}
CONNS=${BENCH_CONNS:-4}
KEYS=${BENCH_KEYS:-10000}
REDIS_TIMEOUT=${BENCH_REDIS_TIMEOUT:-20ms}
NODE_TIMEOUT_MS=5000
# shellcheck source=hack/lib/testnet.sh
source "$ROOT/hack/lib/testnet.sh"
testnet_claim || exit 1
HOST=$TESTNET_HOST

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

while [[ $# -gt 0 ]]; do
	case $1 in
	--scenarios) [[ $# -ge 2 ]] || { echo "bench-faults: --scenarios needs a value" >&2; exit 2; }; SCENARIOS=$2; shift 2 ;;
	--scenarios=*) SCENARIOS=${1#*=}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-faults: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
done
IFS=, read -r -a SCENARIO_LIST <<<"$SCENARIOS"
for s in "${SCENARIO_LIST[@]}"; do
	case $s in
	pause | restart | failover) ;;
	*) echo "bench-faults: unknown scenario '$s': want pause, restart and/or failover" >&2; exit 2 ;;
	esac
done

say() { printf '\n=== %s\n' "$*"; }
warn() { printf 'bench-faults: warning: %s\n' "$*" >&2; }
die() {
	printf 'bench-faults: error: %s\n' "$*" >&2
	exit 1
}

command -v redis-server >/dev/null || die "redis-server is not installed (make deps)"
command -v redis-cli >/dev/null || die "redis-cli is not installed (apt-get install redis-tools)"
command -v curl >/dev/null || die "curl is not installed"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bench-faults.XXXXXX")
PIDS=()
FAILED=()

cleanup() {
	local rc=$? pid
	trap - EXIT INT TERM
	for pid in "${PIDS[@]+"${PIDS[@]}"}"; do
		kill -CONT "$pid" 2>/dev/null || true
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$pid" 2>/dev/null || true; done
	if [[ -n ${KEEP_WORK:-} ]]; then
		echo "bench-faults: logs and results kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "bench-faults: interrupted" >&2; exit 130' INT TERM

USED_PORTS=" "
# free_port VAR: a loopback port nobody listens on, whose cluster bus port
# (+10000) is free too, not handed out before. Both come from below the
# kernel's ephemeral range: a port in it may be the local end of another
# process's connection, which the connect test does not see and bind refuses.
PORT_HI=$(($(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768) - 10001))
((PORT_HI > 12000)) || PORT_HI=50000
free_port() {
	local _p _i
	for ((_i = 0; _i < 200; _i++)); do
		_p=$((10000 + RANDOM % (PORT_HI - 10000)))
		[[ $USED_PORTS == *" $_p "* || $USED_PORTS == *" $((_p + 10000)) "* ]] && continue
		if ! (exec 3<>"/dev/tcp/$HOST/$_p") 2>/dev/null && ! (exec 3<>"/dev/tcp/$HOST/$((_p + 10000))") 2>/dev/null; then
			USED_PORTS+="$_p $((_p + 10000)) "
			printf -v "$1" '%s' "$_p"
			return 0
		fi
	done
	die "no free loopback port found"
}

# polls CMD until it succeeds, up to SECONDS, or dies with WHAT.
poll() {
	local seconds=$1 what=$2 i
	shift 2
	for ((i = 0; i < seconds * 10; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	die "$what: not within ${seconds}s"
}

rcli() {
	local port=$1
	shift
	redis-cli -h "$HOST" -p "$port" "$@"
}

# ------------------------------------------------------------------ build
say "machine"
echo "cores:     $(nproc)   memory: $(free -h 2>/dev/null | awk '/^Mem:/ {print $2}')"
echo "commit:    $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
echo "load:      concurrency $CONCURRENCY over $CONNS connections, $KEYS keys; phases $BEFORE before, $DURING during, $AFTER after"
echo "limiter:   --redis-timeout $REDIS_TIMEOUT, failureMode Open; Redis Cluster 3 primaries + 3 replicas, node timeout ${NODE_TIMEOUT_MS}ms"
echo "note:      limiter, 6 redis-servers and the load generator share these cores"
mkdir -p bin
go build -o bin/loadgen ./cmd/loadgen || die "building bin/loadgen failed"
go build -o bin/limiter ./cmd/limiter || die "building bin/limiter failed"

# ------------------------------------------------------------------ cluster
declare -A NODE_PID NODE_DIR
PORTS=()
start_node() {
	local port=$1 dir=$WORK/redis-$1
	mkdir -p "$dir"
	redis-server --bind "$HOST" --port "$port" --dir "$dir" --save '' --appendonly no \
		--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout "$NODE_TIMEOUT_MS" \
		--cluster-announce-ip "$HOST" \
		--cluster-require-full-coverage no --loglevel warning --logfile "$dir/redis.log" &
	NODE_PID[$port]=$!
	NODE_DIR[$port]=$dir
	PIDS+=("${NODE_PID[$port]}")
	local i
	for ((i = 0; i < 100; i++)); do
		node_answers "$port" && return 0
		if ! kill -0 "${NODE_PID[$port]}" 2>/dev/null; then
			warn "redis-server on port $port exited during start-up: $(tail -n 1 "$dir/redis.log" 2>/dev/null)"
			return 1
		fi
		sleep 0.1
	done
	die "redis-server on port $port did not answer PING within 10s"
}
node_answers() { [[ $(rcli "$1" PING 2>/dev/null) == PONG ]]; }

say "redis cluster"
for _ in 1 2 3 4 5 6; do
	for attempt in 1 2 3; do # a port taken since free_port looked at it
		free_port p
		start_node "$p" && break
		[[ $attempt == 3 ]] && die "could not start redis-server"
	done
	PORTS+=("$p")
done
addrs=()
for p in "${PORTS[@]}"; do addrs+=("$HOST:$p"); done
# Nodes on an address other than 127.0.0.1 announce it (--cluster-announce-ip): their
# bus connections come from 127.0.0.1, so without it they never meet, and redis-cli
# waits for the join forever; the timeout turns any such wait into an error.
timeout 120 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$WORK/cluster-create.log" 2>&1 ||
	{ cat "$WORK/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }

# cluster_ok: every running node says cluster_state:ok, every replica synced.
cluster_ok() {
	local p info
	for p in "${PORTS[@]}"; do
		kill -0 "${NODE_PID[$p]}" 2>/dev/null || continue
		[[ $(ps -o state= -p "${NODE_PID[$p]}" 2>/dev/null) == T* ]] && continue # paused
		info=$(rcli "$p" CLUSTER INFO 2>/dev/null | tr -d '\r') || return 1
		[[ $info == *cluster_state:ok* ]] || return 1
		info=$(rcli "$p" INFO replication 2>/dev/null | tr -d '\r') || return 1
		[[ $info != *role:slave* || $info == *master_link_status:up* ]] || return 1
	done
}
poll 60 "cluster healthy" cluster_ok

# owner_of_slot0 ASK_PORT: the port of the primary serving slot 0, as node
# ASK_PORT sees it (empty while it is marked failed).
owner_of_slot0() {
	rcli "$1" CLUSTER NODES 2>/dev/null | tr -d '\r' | awk '
		$3 ~ /master/ && $3 !~ /fail/ { for (i = 9; i <= NF; i++) if ($i ~ /^0(-|$)/) { split($2, a, "[:@]"); print a[2] } }'
}
any_port_but() {
	local p
	for p in "${PORTS[@]}"; do [[ $p != "$1" ]] && { echo "$p"; return; }; done
}
VICTIM=$(owner_of_slot0 "${PORTS[0]}")
[[ -n $VICTIM ]] || die "no primary serves slot 0"
echo "6 nodes on ports ${PORTS[*]}; primary of slots 0-5460 on port $VICTIM"

# ------------------------------------------------------------------ limiter
POLICY=$WORK/policy.yaml
cat >"$POLICY" <<EOF
apiVersion: ratelimit.sluice.dev/v1alpha1
kind: RateLimitPolicy
metadata: {name: bench, namespace: default}
spec:
  domain: bench
  descriptors: [{key: user_id}]
  rate: {limit: 1000000000, period: 1s}
  failureMode: Open
EOF
free_port GRPC_PORT
free_port HTTP_PORT
free_port ADMIN_PORT
cluster_url="redis-cluster://$(IFS=,; echo "${addrs[*]}")"
bin/limiter --policies "$POLICY" --store "$cluster_url" --redis-timeout "$REDIS_TIMEOUT" \
	--tenant-max-policies-per-request 0 --tenant-store-calls-per-second 0 \
	--grpc-addr "$HOST:$GRPC_PORT" --http-addr "$HOST:$HTTP_PORT" --admin-addr "$HOST:$ADMIN_PORT" >"$WORK/limiter.log" 2>&1 &
LIMITER_PID=$!
PIDS+=("$LIMITER_PID")
limiter_ready() {
	kill -0 "$LIMITER_PID" 2>/dev/null || { tail -n 20 "$WORK/limiter.log" >&2; die "the limiter exited"; }
	[[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://$HOST:$HTTP_PORT/readyz") == 200 ]] &&
		[[ $(metrics | grep -c '^sluice_redis_breaker_state{shard="[0-9-]*"} 0') == 3 ]]
}
metrics() { curl -fsS --max-time 5 "http://$HOST:$ADMIN_PORT/metrics" 2>/dev/null; }
poll 30 "limiter ready with 3 shards" limiter_ready
echo "limiter on $HOST:$GRPC_PORT (pid $LIMITER_PID), store $cluster_url"

# counters: "failed_open opened" summed from /metrics.
counters() {
	metrics | awk '
		/^sluice_decisions_total/ && /result="failed_open"/ { f += $NF }
		/^sluice_redis_breaker_opened_total/ { o += $NF }
		END { printf "%.0f %.0f", f, o }'
}

# phase SCENARIO NAME DURATION WARMUP: one loadgen run, with the limiter's
# fallback decisions and breaker openings during it.
phase() {
	local sc=$1 name=$2 duration=$3 warmup=$4 before after out=$WORK/$1-$2
	read -r -a before <<<"$(counters)"
	if ! bin/loadgen --addr "$HOST:$GRPC_PORT" --conns "$CONNS" --concurrency "$CONCURRENCY" \
		--keys "$KEYS" --duration "$duration" --warmup "$warmup" \
		--domain bench --descriptor 'user_id=%d' --hits 1 --server-pid "$LIMITER_PID" \
		--json-file "$out.json" >"$out.txt" 2>&1; then
		cat "$out.txt" >&2
		warn "$sc: load run '$name' failed"
		FAILED+=("$sc-$name")
	fi
	read -r -a after <<<"$(counters)"
	printf '%-7s %s: failed_open decisions %s, breaker openings %s; breakers now: %s\n' "$name" "$(grep -E '^latency' "$out.txt" | sed 's/^latency *//')" \
		"$((after[0] - before[0]))" "$((after[1] - before[1]))" \
		"$(metrics | sed -n 's/^sluice_redis_breaker_state{shard="\([^"]*\)"} \(.*\)/\1=\2/p' | tr '\n' ' ')"
}

REPORTS=()
for sc in "${SCENARIO_LIST[@]}"; do
	VICTIM=$(owner_of_slot0 "$(any_port_but "$VICTIM")")
	[[ -n $VICTIM ]] || die "no primary serves slot 0"
	say "$sc: primary of slots 0-5460 on port $VICTIM (pid ${NODE_PID[$VICTIM]})"
	phase "$sc" before "$BEFORE" 1s
	t0=$(date +%s.%N)
	case $sc in
	pause) kill -STOP "${NODE_PID[$VICTIM]}" ;;
	restart | failover) kill -KILL "${NODE_PID[$VICTIM]}"; wait "${NODE_PID[$VICTIM]}" 2>/dev/null || true ;;
	esac
	phase "$sc" during "$DURING" 0s
	case $sc in
	pause) kill -CONT "${NODE_PID[$VICTIM]}" ;;
	restart) start_node "$VICTIM" || die "restarting redis-server on port $VICTIM failed" ;;
	failover)
		other=$(any_port_but "$VICTIM")
		poll 60 "replica promoted" bash -c "[[ -n \$(redis-cli -h $HOST -p $other CLUSTER NODES | tr -d '\r' | awk '\$3 ~ /master/ && \$3 !~ /fail/ && \$2 !~ /:$VICTIM@/ { for (i = 9; i <= NF; i++) if (\$i ~ /^0(-|\$)/) print }') ]]"
		echo "replica promoted $(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')s after the kill"
		;;
	esac
	poll 60 "cluster healthy after the repair" cluster_ok
	phase "$sc" after "$AFTER" 1s
	if [[ $sc == failover ]]; then
		start_node "$VICTIM" || die "restarting redis-server on port $VICTIM failed" # it rejoins as a replica
		poll 60 "cluster healthy with the old primary back" cluster_ok
	fi
	echo
	bin/loadgen report "before=$WORK/$sc-before.json" "during=$WORK/$sc-during.json" "after=$WORK/$sc-after.json" | tee "$WORK/$sc-report.txt"
	REPORTS+=("$sc")
done

say "summary: decisions/s and latency before, during and after each fault (limiter --redis-timeout $REDIS_TIMEOUT, failureMode Open)"
for sc in "${REPORTS[@]}"; do
	echo "-- $sc"
	cat "$WORK/$sc-report.txt"
done
echo "A third of the keys live on the faulty shard. With its breaker open, their decisions are made by the failure mode"
echo "without a round trip: throughput and p99 stay level. The first decisions of a fault wait up to --redis-timeout"
echo "($REDIS_TIMEOUT) until the breaker opens: they show in p99.9 and max, not p99."

if [[ ${#FAILED[@]} -gt 0 ]]; then
	die "failed: ${FAILED[*]}"
fi
