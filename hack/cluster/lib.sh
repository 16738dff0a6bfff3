# Sourced by hack/cluster/up.sh, down.sh and the e2e Makefile targets: where
# the cluster (one node, or NODES of them) lives and what it is made of.
#
# One cluster per machine: it owns a bridge, iptables chains, a cgroup and a
# few ports. Its work dir holds everything else: certificates, kubeconfigs,
# etcd's data, containerd's root and state, kubelet's root, the volumes,
# the logs, and what the machine looked like before (state/), so that
# down.sh can put it back.

CLUSTER_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$CLUSTER_ROOT/.cluster}"
CLUSTER_BIN="${CLUSTER_BIN:-$CLUSTER_ROOT/bin/cluster}"
CLUSTER_K8S_BIN="${CLUSTER_K8S_BIN:-$CLUSTER_ROOT/bin/k8s}"
CLUSTER_NAME=sluice-e2e
NODE_NAME=sluice-e2e
BRIDGE=sluice0
POD_CIDR=10.244.0.0/24
# Every node's pod network: node i (1-based) has 10.244.(i-1).0/24.
CLUSTER_CIDR=10.244.0.0/16
# NODE_IP, the gateway of POD_CIDR, is the bridge's address, which up.sh
# gives it before anything starts: the API server and kubelet listen on it
# (and on 127.0.0.1), never on the host's routable address. The host and
# the pods (through the kubernetes Service) reach it; other machines don't
# route to it.
NODE_IP=10.244.0.1
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
APISERVER_PORT="${APISERVER_PORT:-16443}"
ETCD_PORT="${ETCD_PORT:-23790}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-23800}"
# Every pod's cgroups go under this one, in each hierarchy (cgroup v1) or in
# the unified one: down.sh removes it whole.
CGROUP_ROOT=/sluice-e2e
# The uid and gid the Redis pods run as (RedisUser in
# controllers/redis_resources.go): the owner of the PersistentVolume dirs.
REDIS_UID=999
# The iptables chains this cluster may create: kube-proxy's and kubelet's
# (KUBE-*), the CNI plugins' (CNI-*) and up.sh's own (SLUICE-E2E). down.sh removes those of them that
# did not exist before up.sh (state/iptables-*.before), and the rules that
# jump to them, and nothing else.
OWN_CHAINS_RE='^(KUBE-|CNI-|SLUICE-E2E$)'
# One cluster per machine, from whichever clone: CLUSTER_LOCK serialises
# the scripts that start, test and stop it (make e2e holds it from up to
# down, cluster-up and cluster-down while they run), and ACTIVE_MARKER
# names the work dir of the cluster that is up.
CLUSTER_LOCK=/run/sluice-e2e.lock
ACTIVE_MARKER=/run/sluice-e2e.dir
# Host settings kubelet, kube-proxy and the CNI bridge may change; up.sh
# records them and down.sh restores what changed.
SYSCTLS=(
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.all.route_localnet
  net.ipv6.conf.all.forwarding
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal
)

# NODES: how many nodes up.sh starts (1 to 4). Node 1 is the host itself
# (the control plane's node, as ever); node i > 1 is a kubelet, containerd
# and kube-proxy of their own in a network namespace of their own
# ($CLUSTER_NAME-i), with a bridge there, joined to the host by a veth
# (sluice-ni on the host's side, eth0 in the node's): the host routes each
# node's pod network to it, and the nodes' default route is the host. The
# nodes share the host's file system (hostPath volumes reach every node)
# and its cgroups (under CGROUP_ROOT/node-i).
NODES="${NODES:-1}"
MAX_NODES=4

run_dir="$CLUSTER_DIR/run"
log_dir="$CLUSTER_DIR/logs"
state_dir="$CLUSTER_DIR/state"
pki_dir="$CLUSTER_DIR/pki"
containerd_sock="$run_dir/containerd.sock"
admin_kubeconfig="$CLUSTER_DIR/admin.kubeconfig"

clog() { echo "cluster: $*" >&2; }

# node_vars I sets, for node I (1-based), node_name, node_ip (the gateway
# of its pod network, on its bridge, where its kubelet listens), node_cidr,
# node_bridge, node_sfx (the suffix of its processes' names in run/ and
# logs/: none for node 1), node_dir (its containerd, kubelet and CNI
# config), node_sock (its containerd), node_netns (none for node 1: the
# host's), node_veth (the host's end of its link) and node_cgroup.
node_vars() {
  local i="$1"
  if [[ "$i" == 1 ]]; then
    node_name="$NODE_NAME" node_ip="$NODE_IP" node_cidr="$POD_CIDR" node_bridge="$BRIDGE" node_sfx=""
    node_dir="$CLUSTER_DIR" node_sock="$containerd_sock" node_netns="" node_veth="" node_cgroup="$CGROUP_ROOT"
    return
  fi
  node_name="$NODE_NAME-$i" node_ip="10.244.$((i - 1)).1" node_cidr="10.244.$((i - 1)).0/24"
  node_bridge="sluice$((i - 1))" node_sfx="-$i" node_dir="$CLUSTER_DIR/node-$i"
  node_sock="$run_dir/containerd-$i.sock" node_netns="$CLUSTER_NAME-$i" node_veth="sluice-n$i"
  node_cgroup="$CGROUP_ROOT/node-$i"
}

# in_node CMD...: runs CMD in the current node's (node_vars) network
# namespace, in the host's mount namespace (kubelet's mounts must be
# containerd's: not ip netns exec, which makes a mount namespace of its own).
in_node() {
  if [[ -n "$node_netns" ]]; then
    nsenter --net="/run/netns/$node_netns" "$@"
  else
    "$@"
  fi
}

# iptables_tools prints the iptables front ends this machine has.
iptables_tools() {
  local tool
  for tool in iptables ip6tables; do
    command -v "$tool-save" >/dev/null && command -v "$tool-restore" >/dev/null && echo "$tool"
  done
}
IPTABLES_TABLES=(filter nat mangle raw)

sysctl_path() { echo "/proc/sys/${1//.//}"; }

# cgroup_dirs prints the directory of CGROUP_ROOT in every cgroup hierarchy
# that is mounted.
cgroup_dirs() {
  awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts | sort -u | while read -r m; do
    echo "$m$CGROUP_ROOT"
  done
}

# pid_alive DIR NAME: the process whose id is in DIR/run/NAME.pid runs,
# and is that cluster's (its command line names DIR: not a process that
# got the id after a reboot).
pid_alive() {
  local f="$1/run/$2.pid" pid
  [[ -f "$f" ]] || return 1
  pid="$(<"$f")"
  [[ -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$1/"
}

# cluster_lock takes the machine's cluster lock for this script and its
# children, waiting up to CLUSTER_LOCK_WAIT seconds (default an hour) while
# another clone's make e2e runs. Processes that outlive the script must not
# inherit it: start_detached closes it.
cluster_lock() {
  [[ -n "${SLUICE_CLUSTER_LOCK_FD:-}" ]] && return 0
  exec {SLUICE_CLUSTER_LOCK_FD}>>"$CLUSTER_LOCK"
  if ! flock -n "$SLUICE_CLUSTER_LOCK_FD"; then
    clog "waiting for the machine's one cluster: another make e2e, cluster-up or cluster-down runs ($(cat "$ACTIVE_MARKER" 2>/dev/null || echo starting))"
    flock -w "${CLUSTER_LOCK_WAIT:-3600}" "$SLUICE_CLUSTER_LOCK_FD" || { clog "gave up waiting for $CLUSTER_LOCK"; return 1; }
  fi
  export SLUICE_CLUSTER_LOCK_FD
}

# clear_stale_cluster, under the lock: a cluster that a killed run left
# (the marker names a work dir whose API server is gone) is torn down,
# whichever clone it came from; a live one from another clone is left
# alone and reported. Ours, live, is left to the caller.
clear_stale_cluster() {
  [[ -f "$ACTIVE_MARKER" ]] || return 0
  local active
  active="$(<"$ACTIVE_MARKER")"
  if pid_alive "$active" kube-apiserver; then
    [[ "$active" == "$CLUSTER_DIR" ]] && return 0
    clog "a cluster from another clone is up in $active: CLUSTER_DIR=$active hack/cluster/down.sh (make cluster-down there) first"
    return 1
  fi
  clog "tearing down the cluster a stopped run left in $active"
  CLUSTER_DIR="$active" "$CLUSTER_ROOT/hack/cluster/down.sh"
}
