#!/usr/bin/env bash
# Stops one node of the cluster up.sh started as a power cut would, and
# starts it again as a reboot would: the journey's NodeStopped fault.
#
#   hack/cluster/node.sh stop I    # SIGKILL node I's kubelet, every process
#                                  # of its pods, its kube-router, kube-proxy,
#                                  # containerd and the containers' shims
#   hack/cluster/node.sh start I   # start containerd, kubelet, kube-proxy and
#                                  # kube-router again, as up.sh did
#
# Only a node I > 1 (node 1 is the host, with the control plane). Its
# network namespace, bridge and files stay, as a machine's disks and cables
# do: the kubelet finds its pods' sandboxes dead and makes them again.
# It takes no lock: it acts on a cluster that is up, from the journey that
# make e2e runs while it holds the cluster lock, or by hand after
# cluster-up.
set -euo pipefail
umask 077
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { clog "usage: $0 stop|start NODE (a node of the cluster, 2 or more)"; exit 2; }
[[ $# -eq 2 ]] || usage
action="$1" i="$2"
[[ $(id -u) -eq 0 ]] || { clog "must run as root"; exit 1; }
nodes="$(cat "$state_dir/nodes" 2>/dev/null || echo 0)"
[[ "$i" =~ ^[2-9]$ && "$i" -le "$nodes" ]] || { clog "node $i: the cluster in $CLUSTER_DIR has nodes 1 to $nodes, and node 1 (the control plane's) can't be stopped"; exit 1; }
node_vars "$i"
procs=("kubelet$node_sfx" "kube-proxy$node_sfx" "kube-router$node_sfx" "containerd$node_sfx")

# kill_pid NAME: SIGKILL the process in run/NAME.pid and wait until it is
# dead: gone, or a zombie. Its parent is the machine's init, which may reap
# it seconds later (1.7 s here): waiting for that held the node's pods
# alive for 2.5 s after a stop began, seconds the journey counted as the
# limiters'.
kill_pid() {
  local f="$run_dir/$1.pid" pid k st
  [[ -f "$f" ]] || return 0
  pid="$(cat "$f")"
  kill -KILL "$pid" 2>/dev/null || return 0
  for ((k = 0; k < 50; k++)); do
    # The state follows "(comm)" in /proc/PID/stat; our commands' names
    # have no spaces.
    st="$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null || true)"
    [[ -z "$st" || "$st" == Z ]] && return 0
    sleep 0.1
  done
}

# kill_pods: SIGKILL every process in the node's pods' cgroups until none is
# left (a container's processes may fork while we kill).
kill_pods() {
  local k pids dirs=()
  mapfile -t dirs < <(cgroup_dirs | while read -r d; do [[ -d "$d${node_cgroup#"$CGROUP_ROOT"}" ]] && echo "$d${node_cgroup#"$CGROUP_ROOT"}"; done)
  [[ ${#dirs[@]} -gt 0 ]] || return 0
  for ((k = 0; k < 50; k++)); do
    # A cgroup may go while find reads it: what it read is enough.
    pids="$(find "${dirs[@]}" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u || true)"
    [[ -z "$pids" ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  clog "processes left in $node_cgroup: $pids"
  return 1
}

# relaunch NAME: start run/NAME.cmd again as up.sh's start did, its log
# appended to.
relaunch() {
  local name="$1" cmd
  cmd="$(cat "$run_dir/$name.cmd")"
  (
    umask 022
    eval "exec setsid $cmd >>\"\$log_dir/\$name.log\" 2>&1 </dev/null"
  ) &
  echo $! >"$run_dir/$name.pid"
}

case "$action" in
stop)
  # The kubelet first, so that nothing restarts the containers.
  kill_pid "kubelet$node_sfx"
  kill_pods
  for p in "kube-router$node_sfx" "kube-proxy$node_sfx" "containerd$node_sfx"; do kill_pid "$p"; done
  for pid in $(grep -lzxF -- "$node_sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true); do kill -KILL "$pid" 2>/dev/null || true; done
  clog "node $node_name stopped"
  ;;
start)
  for p in "${procs[@]}"; do
    if pid_alive "$CLUSTER_DIR" "$p"; then
      clog "node $node_name: $p runs: stop the node first"
      exit 1
    fi
  done
  relaunch "containerd$node_sfx"
  for ((k = 0; k < 300; k++)); do
    ctr --address "$node_sock" version >/dev/null 2>&1 && break
    sleep 0.1
  done
  ctr --address "$node_sock" version >/dev/null 2>&1 || { clog "node $node_name: containerd did not answer in 30s"; exit 1; }
  for p in "kubelet$node_sfx" "kube-proxy$node_sfx" "kube-router$node_sfx"; do
    [[ -f "$run_dir/$p.cmd" ]] && relaunch "$p"
  done
  clog "node $node_name started"
  ;;
*) usage ;;
esac
