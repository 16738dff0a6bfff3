#!/usr/bin/env bash
# Stops the cluster hack/cluster/up.sh started (every node of it) and puts the machine
# back as up.sh found it: every process it started and every container
# process, the mounts under the work dir, the pods' network namespaces,
# the bridge, the iptables chains of kube-proxy, kubelet and the CNI
# plugins, the pods' cgroups, and the sysctls that changed. Safe to run
# twice, and after a run that failed half way.
#
# It removes only what this cluster made: the network namespaces attached
# to its bridges, the bridge if up.sh made it, the other nodes' network
# namespaces (state/created-netns), the KUBE-*/CNI-* chains that
# were not there when up.sh started (state/) and the rules that jump to
# them; other chains and rules stay, whatever their names.
#
#   hack/cluster/down.sh            # keeps $CLUSTER_DIR/logs for a post-mortem
#   CLUSTER_KEEP_LOGS=0 hack/cluster/down.sh
set -uo pipefail
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) -eq 0 ]] || { clog "must run as root"; exit 1; }
cluster_lock || exit 1
if [[ ! -d "$CLUSTER_DIR" ]]; then
  [[ -f "$ACTIVE_MARKER" && "$(<"$ACTIVE_MARKER")" == "$CLUSTER_DIR" ]] && rm -f "$ACTIVE_MARKER"
  exit 0
fi
t0=$(date +%s%N)
# The nodes up.sh started (state/nodes; an older up.sh's cluster has one).
nodes="$(cat "$state_dir/nodes" 2>/dev/null || echo 1)"
[[ "$nodes" =~ ^[1-9]$ ]] || nodes=1
node_procs() { # node_procs NAME: NAME and its namesakes of the other nodes (kubelet kubelet-2 ...)
  local i
  echo "$1"
  for ((i = 2; i <= nodes; i++)); do echo "$1-$i"; done
}

# stop NAME...: SIGKILL the processes in run/NAME.pid, and wait until they
# are gone. Nothing of the cluster is worth a graceful stop: down removes
# its state, and step 3 removes what kube-proxy and CNI left in iptables.
stop() {
  local name f pid pids=() i
  for name in "$@"; do
    f="$run_dir/$name.pid"
    [[ -f "$f" ]] || continue
    pid="$(cat "$f")"
    kill -KILL "$pid" 2>/dev/null && pids+=("$pid")
    rm -f "$f"
  done
  for ((i = 0; i < 50; i++)); do
    kill -0 "${pids[@]}" 2>/dev/null || return 0
    sleep 0.1
  done
}

phases=()
phase() { # phase NAME: records the time since the last phase
  local now
  now=$(date +%s%N)
  phases+=("$1 $((($now - ${phase_t:-$t0}) / 1000000))ms")
  phase_t=$now
}

# kill_cgroup_tasks: SIGKILL every process in the pods' cgroups until
# none is left (a container's processes may fork while we kill).
kill_cgroup_tasks() {
  local i pids dirs=()
  mapfile -t dirs < <(cgroup_dirs | while read -r d; do [[ -d "$d" ]] && echo "$d"; done)
  [[ ${#dirs[@]} -gt 0 ]] || return 0
  for ((i = 0; i < 50; i++)); do
    pids="$(find "${dirs[@]}" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)"
    [[ -z "$pids" ]] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 0.1
  done
  clog "processes left in $CGROUP_ROOT: $pids"
}

# shim_pids prints the containerd shims of this cluster's containerds: the
# processes with an argument that is one's socket (-address SOCKET).
shim_pids() {
  local i
  for ((i = 1; i <= nodes; i++)); do
    node_vars "$i"
    grep -lzxF -- "$node_sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3
  done
}

# 1. Nothing may restart containers: kubelet first, then every container
#    process, then the rest of the node and the control plane.
# shellcheck disable=SC2046
stop $(node_procs kubelet)
kill_cgroup_tasks
# shellcheck disable=SC2046
stop $(node_procs kube-router) $(node_procs kube-proxy) kube-scheduler kube-controller-manager $(node_procs containerd)
for pid in $(shim_pids); do kill -KILL "$pid" 2>/dev/null; done
stop kube-apiserver etcd
phase processes

# 2. Mounts under the work dir (overlay root file systems, volumes, shm),
#    deepest first, and the network namespaces the pods had: those that
#    did not exist before and hold the other end of a veth on our bridge.
own_netns=()
if ip link show "$BRIDGE" >/dev/null 2>&1 && [[ -d /run/netns ]]; then
  # A pod's eth0@ifN: N is the index of its veth on its node, a port of
  # the node's bridge (the host's, or one in another node's namespace).
  ports=" $(ip -o link show master "$BRIDGE" 2>/dev/null | cut -d: -f1 | tr '\n' ' ') "
  for ((i = 2; i <= nodes; i++)); do
    node_vars "$i"
    grep -qxF "$node_netns" "$state_dir/created-netns" 2>/dev/null || continue
    ports+="$(ip -n "$node_netns" -o link show master "$node_bridge" 2>/dev/null | cut -d: -f1 | tr '\n' ' ') "
  done
  for p in /run/netns/cni-*; do
    [[ -e "$p" ]] || continue
    ns="$(basename "$p")"
    while read -r peer; do
      [[ "$ports" == *" $peer "* ]] && { own_netns+=("$ns"); break; }
    done < <(ip -n "$ns" -o link show 2>/dev/null | sed -n 's/^[0-9]*: [^@:]*@if\([0-9]*\):.*/\1/p')
  done
fi
for ((i = 0; i < 5; i++)); do
  mapfile -t mounts < <(awk '{ print $2 }' /proc/mounts | sed 's/\\040/ /g' | grep -F -- "$CLUSTER_DIR/" | sort -r)
  [[ ${#mounts[@]} -eq 0 ]] && break
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
if [[ -d /run/netns && -f "$state_dir/netns.before" ]]; then
  for ns in "${own_netns[@]}"; do
    [[ -e "/run/netns/$ns" && "$ns" == cni-* ]] || continue
    grep -qxF "$ns" "$state_dir/netns.before" 2>/dev/null && continue
    umount "/run/netns/$ns" 2>/dev/null || umount -l "/run/netns/$ns" 2>/dev/null
    rm -f "/run/netns/$ns"
  done
fi
phase mounts

# 3. Network: the bridge up.sh made (the pods' veths went with their
#    namespaces), the chains kube-proxy, kubelet and the CNI plugins added
#    (KUBE-*, CNI-*: those that up.sh did not find) and the rules that jump
#    to them, the pods' conntrack entries. No kube-proxy --cleanup: it
#    removes every kube-proxy's chains on the machine, not only ours.
# (An older up.sh, whose state has host-ip, refused to start beside the
# bridge, and left it to the CNI plugin to make: it is that cluster's.)
# The routing rules up.sh added (state/created-ip-rules).
while read -r rule; do
  # shellcheck disable=SC2086
  [[ -n "$rule" ]] && ip rule del $rule 2>/dev/null
done < <(cat "$state_dir/created-ip-rules" 2>/dev/null)
# The other nodes' namespaces: their veths, bridges, routes, iptables
# and conntrack go with them.
while read -r ns; do
  [[ -n "$ns" && "$ns" == "$CLUSTER_NAME"-* && -e "/run/netns/$ns" ]] && ip netns del "$ns"
done < <(cat "$state_dir/created-netns" 2>/dev/null)
while read -r link; do
  [[ -n "$link" ]] && ip link del "$link" 2>/dev/null
done < <(cat "$state_dir/created-links" 2>/dev/null || { [[ -f "$state_dir/host-ip" ]] && echo "$BRIDGE"; })
# own_iptables_rules prints, for iptables-restore --noflush, what removes
# from one table (iptables-save -t TABLE on stdin) the chains named like
# OWN_CHAINS_RE that its before-file (argument) does not have, and the
# rules of the other chains that jump to them and were not there before.
own_iptables_rules() {
  awk -v re="$OWN_CHAINS_RE" '
    FNR == NR { if (/^:/) had[substr($1, 2)] = 1; else if (/^-A /) before[$0]++; next }
    /^:/ { c = substr($1, 2); if (!(c in had) && c ~ re) { own[c] = 1; order[++n] = c }; next }
    /^-A / {
      if (before[$0] > 0) { before[$0]--; next }
      if ($2 in own) next
      t = ""
      for (i = 3; i < NF; i++) if ($i == "-j" || $i == "-g") t = $(i + 1)
      if (t in own) print "-D " substr($0, 4)
    }
    END {
      for (i = 1; i <= n; i++) print "-F " order[i]
      for (i = 1; i <= n; i++) print "-X " order[i]
    }' "$1" -
}
while read -r tool; do
  for table in "${IPTABLES_TABLES[@]}"; do
    before="$state_dir/$tool-$table.before"
    if [[ ! -f "$before" ]]; then
      [[ -d "$state_dir" ]] && clog "no record of $tool table $table before the cluster: leaving its chains alone"
      continue
    fi
    "$tool-save" -t "$table" >"$state_dir/$tool-$table.after" 2>/dev/null || continue
    own_iptables_rules "$before" <"$state_dir/$tool-$table.after" >"$state_dir/$tool-$table.remove"
    [[ -s "$state_dir/$tool-$table.remove" ]] || continue
    { echo "*$table"; cat "$state_dir/$tool-$table.remove"; echo COMMIT; } | "$tool-restore" --noflush 2>/dev/null && continue
    # One at a time, so that one that fails (gone already) leaves the rest.
    while read -r line; do
      printf '*%s\n%s\nCOMMIT\n' "$table" "$line" | "$tool-restore" --noflush 2>/dev/null ||
        clog "$tool -t $table: could not apply: $line"
    done <"$state_dir/$tool-$table.remove"
  done
done < <(iptables_tools)
# kube-router's ipsets (the host's; the other nodes' went with their
# namespaces), now that no rule uses them: those that were not there.
if [[ -f "$state_dir/ipset.before" ]] && command -v ipset >/dev/null; then
  while read -r set; do
    grep -qxF -- "$set" "$state_dir/ipset.before" || ipset destroy "$set" 2>/dev/null || clog "could not destroy ipset $set"
  done < <(ipset list -n 2>/dev/null)
fi
if command -v conntrack >/dev/null; then
  conntrack -D -s "$CLUSTER_CIDR" >/dev/null 2>&1
  conntrack -D -d "$CLUSTER_CIDR" >/dev/null 2>&1
  conntrack -D -d "$SERVICE_CIDR" >/dev/null 2>&1
fi
phase network

# 4. The pods' cgroups, deepest first.
cgroup_dirs | while read -r d; do
  [[ -d "$d" ]] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
  [[ -d "$d" ]] && clog "could not remove cgroup $d"
done

# 5. Sysctls that changed while the cluster ran.
if [[ -f "$state_dir/sysctl.before" ]]; then
  while IFS='=' read -r name value; do
    p="$(sysctl_path "$name")"
    [[ -w "$p" ]] || continue
    now="$(cat "$p")"
    if [[ "$now" != "$value" ]]; then
      echo "$value" >"$p" && clog "restored $name: $now -> $value"
    fi
  done <"$state_dir/sysctl.before"
fi

# 6. What the node left outside the work dir: CNI's result cache (files
#    that were not there before), kubelet's device plugin socket (always
#    under /var/lib/kubelet), the container log links, and directories that
#    did not exist before.
if [[ -d /var/lib/cni/results && -f "$state_dir/cni-results.before" ]]; then
  # libcni names them NETWORK-SANDBOXID-IFNAME: ours are those of our
  # network ($CLUSTER_NAME) and containerd's loopback network (cni-loopback)
  # for the sandboxes of our containerd, which also had our network.
  declare -A own_sandbox=()
  for f in /var/lib/cni/results/"$CLUSTER_NAME"-*-eth0 "$CLUSTER_DIR"/containerd/root/io.containerd.grpc.v1.cri/sandboxes/* \
    "$CLUSTER_DIR"/node-*/containerd/root/io.containerd.grpc.v1.cri/sandboxes/*; do
    [[ -e "$f" ]] || continue
    id="$(basename "$f")"
    id="${id#"$CLUSTER_NAME"-}"
    own_sandbox["${id%-eth0}"]=1
  done
  for f in /var/lib/cni/results/*; do
    [[ -e "$f" ]] || continue
    name="$(basename "$f")"
    id="${name#"$CLUSTER_NAME"-}"
    id="${id#cni-loopback-}"
    id="${id%-*}"
    [[ -n "${own_sandbox[$id]:-}" ]] || continue
    grep -qxF "$name" "$state_dir/cni-results.before" 2>/dev/null || rm -f "$f"
  done
fi
if grep -qxF /var/lib/kubelet "$state_dir/created-dirs" 2>/dev/null; then
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
fi
if [[ -d /var/log/containers ]]; then
  find /var/log/containers -maxdepth 1 -type l -lname "$CLUSTER_DIR/*" -delete 2>/dev/null
fi
if [[ -f "$state_dir/created-dirs" ]]; then
  while read -r d; do
    [[ -d "$d" ]] || continue
    case "$d" in
      /run/containerd) rm -rf "$d/s" "$d/runc" 2>/dev/null ;;
      # ip netns add (CNI's, or a test's) bind-mounts it on itself.
      /run/netns)
        for _ in 1 2 3; do
          [[ -z "$(ls -A "$d")" ]] && awk '$2 == "/run/netns"' /proc/mounts | grep -q . && umount "$d" 2>/dev/null || break
        done
        ;;
    esac
    find "$d" -depth -type d -empty -delete 2>/dev/null
    [[ -e "$d" ]] && clog "left $d (not empty)"
  done <"$state_dir/created-dirs"
fi

# 7. The work dir, but its logs; never through a mount that is left.
if awk '{ print $2 }' /proc/mounts | grep -qF -- "$CLUSTER_DIR/"; then
  clog "mounts are left under $CLUSTER_DIR; not deleting it:"
  awk '{ print $2 }' /proc/mounts | grep -F -- "$CLUSTER_DIR/" >&2
elif [[ "${CLUSTER_KEEP_LOGS:-1}" == 1 ]]; then
  find "$CLUSTER_DIR" -mindepth 1 -maxdepth 1 ! -name logs ! -name logs.prev -exec rm -rf --one-file-system {} + 2>/dev/null
else
  rm -rf --one-file-system "$CLUSTER_DIR"
fi
[[ -f "$ACTIVE_MARKER" && "$(cat "$ACTIVE_MARKER")" == "$CLUSTER_DIR" ]] && rm -f "$ACTIVE_MARKER"
phase files
ms=$((($(date +%s%N) - t0) / 1000000))
clog "down in $((ms / 1000)).$((ms % 1000 / 100))s (${phases[*]})"
exit 0
