#!/usr/bin/env bash
# Stops the one-node cluster hack/cluster/up.sh started and puts the machine
# back as up.sh found it: every process it started and every container
# process, the mounts under the work dir, the pods' network namespaces,
# the bridge, the iptables chains of kube-proxy, kubelet and the CNI
# plugins, the pods' cgroups, and the sysctls that changed. Safe to run
# twice, and after a run that failed half way.
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

# shim_pids prints the containerd shims of this cluster's containerd: the
# processes with an argument that is its socket (-address SOCKET).
shim_pids() {
  grep -lzxF -- "$containerd_sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3
}

# 1. Nothing may restart containers: kubelet first, then every container
#    process, then the rest of the node and the control plane.
stop kubelet
kill_cgroup_tasks
stop kube-proxy kube-scheduler kube-controller-manager containerd
for pid in $(shim_pids); do kill -KILL "$pid" 2>/dev/null; done
stop kube-apiserver etcd
phase processes

# 2. Mounts under the work dir (overlay root file systems, volumes, shm),
#    deepest first, and the network namespaces the pods had.
for ((i = 0; i < 5; i++)); do
  mapfile -t mounts < <(awk '{ print $2 }' /proc/mounts | sed 's/\\040/ /g' | grep -F -- "$CLUSTER_DIR/" | sort -r)
  [[ ${#mounts[@]} -eq 0 ]] && break
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
done
if [[ -d /run/netns && -f "$state_dir/netns.before" ]]; then
  for ns in /run/netns/*; do
    [[ -e "$ns" && "$(basename "$ns")" == cni-* ]] || continue
    grep -qxF "$(basename "$ns")" "$state_dir/netns.before" 2>/dev/null && continue
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null
    rm -f "$ns"
  done
fi
phase mounts

# 3. Network: the bridge (the pods' veths went with their namespaces),
#    the chains kube-proxy, kubelet and the CNI plugins added (KUBE-*,
#    CNI-*) and the rules that jump to them, the pods' conntrack entries.
ip link del "$BRIDGE" 2>/dev/null
[[ -x "$CLUSTER_BIN/kube-proxy" ]] && "$CLUSTER_BIN/kube-proxy" --cleanup >"$log_dir/kube-proxy-cleanup.log" 2>&1
for tool in iptables ip6tables; do
  command -v "$tool-save" >/dev/null || continue
  for table in filter nat mangle raw; do
    before="$("$tool-save" -t "$table" 2>/dev/null)" || continue
    grep -qE '(^:|-A |-j |-g )(KUBE-|CNI-)' <<<"$before" || continue
    grep -vE '(^:|-A |-j |-g )(KUBE-|CNI-)' <<<"$before" | "$tool-restore" -T "$table" ||
      clog "could not remove the cluster's chains from $tool table $table"
  done
done
if command -v conntrack >/dev/null; then
  conntrack -D -s "$POD_CIDR" >/dev/null 2>&1
  conntrack -D -d "$POD_CIDR" >/dev/null 2>&1
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
  for f in /var/lib/cni/results/*; do
    [[ -e "$f" ]] || continue
    grep -qxF "$(basename "$f")" "$state_dir/cni-results.before" 2>/dev/null || rm -f "$f"
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
