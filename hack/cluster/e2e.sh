#!/usr/bin/env bash
# make e2e: a fresh one-node cluster, the user's journey on it (the Go tests
# in test/e2e, with client-go and the real helm and kubectl), and the
# cluster down again, whatever the tests did. Prints how long each took.
#
#   hack/cluster/e2e.sh [go test flags]    # after hack/cluster/build.sh
set -uo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$CLUSTER_ROOT"

now() { date +%s%N; }
secs() { local ms=$((($2 - $1) / 1000000)); printf '%d.%ds' $((ms / 1000)) $((ms % 1000 / 100)); }

down() { CLUSTER_DIR="$CLUSTER_DIR" hack/cluster/down.sh; }

# Foreign iptables rules and chains, named like the cluster's but not its,
# which down.sh must leave (TestAttackDownRemovesForeignRules checks them
# after down; test/e2e/harness_test.go lists them). Harmless: RETURN, and
# an ACCEPT at the end of FORWARD, whose policy this machine keeps.
foreign() { # foreign plant|remove
  local add=-A new=-N
  [[ "$1" == remove ]] && add=-D new=-X
  if [[ "$1" == plant ]]; then
    iptables -N KUBE-FOREIGN && iptables -A KUBE-FOREIGN -m comment --comment not-ours -j RETURN &&
      iptables -t nat -N CNI-FOREIGN && iptables -t nat -A CNI-FOREIGN -m comment --comment not-ours -j RETURN &&
      ip6tables -N KUBE-FOREIGN && ip6tables -A KUBE-FOREIGN -m comment --comment not-ours -j RETURN || return 1
  fi
  iptables "$add" FORWARD -m comment --comment not-ours -j ACCEPT
  iptables "$add" INPUT -m comment --comment not-ours -j KUBE-FOREIGN
  iptables -t nat "$add" POSTROUTING -s 198.51.100.254/32 -m comment --comment not-ours -j CNI-FOREIGN
  if [[ "$1" == remove ]]; then
    iptables -F KUBE-FOREIGN; iptables "$new" KUBE-FOREIGN
    iptables -t nat -F CNI-FOREIGN; iptables -t nat "$new" CNI-FOREIGN
    ip6tables -F KUBE-FOREIGN; ip6tables "$new" KUBE-FOREIGN
  fi
  return 0
}
# The machine's one cluster is ours until we exit: another clone's make e2e
# waits. A cluster left by an interrupted run goes first (ours too: the
# journey starts clean).
cluster_lock || exit 1
clear_stale_cluster || exit 1
[[ -f "$ACTIVE_MARKER" ]] && down
# The last run's logs stay beside this one's, for a post-mortem.
if [[ -d "$CLUSTER_DIR/logs" ]]; then
  rm -rf "$CLUSTER_DIR/logs.prev"
  mv "$CLUSTER_DIR/logs" "$CLUSTER_DIR/logs.prev"
fi

foreign remove 2>/dev/null
foreign plant || { clog "could not plant the foreign iptables rules"; foreign remove 2>/dev/null; exit 1; }
trap 'foreign remove 2>/dev/null' EXIT
t0=$(now)
CLUSTER_DIR="$CLUSTER_DIR" hack/cluster/up.sh || exit 1
t1=$(now)
trap 'down; foreign remove 2>/dev/null; exit 130' INT TERM
# shellcheck disable=SC1091
source "$CLUSTER_DIR/env"
SLUICE_E2E_REQUIRED=1 go test -count=1 -v -timeout "${E2E_TIMEOUT:-45m}" "$@" ./test/e2e/
rc=$?
t2=$(now)
if [[ $rc -ne 0 ]]; then
  # Keep what the operator and the pods said for the post-mortem.
  "$CLUSTER_ROOT/bin/kubectl" get pods,lf,rlp -A -o wide >"$log_dir/final-state.txt" 2>&1
  "$CLUSTER_ROOT/bin/kubectl" get events -A --sort-by=.lastTimestamp >"$log_dir/events.txt" 2>&1
  cp -r "$log_dir/pods" "$log_dir/pods-final" 2>/dev/null
fi
down
t3=$(now)
# What down left of the machine: the foreign rules, and nothing of ours;
# then what up.sh refuses to start beside or in (with no cluster up).
SLUICE_E2E_AFTER_DOWN=1 go test -count=1 -v \
  -run '^(TestAttackDownRemovesForeignRules|TestAttackOtherUserPlantsTheWorkDir|TestUpRefusesBesideAnotherKubeProxy)$' ./test/e2e/
rc2=$?
t4=$(now)
foreign remove 2>/dev/null
echo "e2e: cluster up $(secs "$t0" "$t1"), journey $(secs "$t1" "$t2"), cluster down $(secs "$t2" "$t3"), after-down checks $(secs "$t3" "$t4"); logs in $log_dir"
[[ $rc -ne 0 ]] && exit $rc
exit $rc2
