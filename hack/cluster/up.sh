#!/usr/bin/env bash
# Starts a Kubernetes of one node (or NODES) on this machine, in a work dir
# of its own ($CLUSTER_DIR, default .cluster): etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, and for each node containerd (its
# own root, state and socket), kubelet, kube-proxy (iptables) and a CNI
# bridge; CoreDNS (a pod per node), and local-path-provisioner (the default StorageClass,
# dynamic volumes in the work dir). Node 1 is the
# host; the others each have a network namespace of their own (lib.sh,
# node_vars). Images come from bin/cluster/images (hack/cluster/build.sh
# builds them); nothing is pulled.
#
#   hack/cluster/up.sh           # as root; prints how to reach the cluster
#   NODES=2 hack/cluster/up.sh   # two nodes
#   hack/cluster/down.sh    # stops it and puts the machine back as it was
#
# A run that fails on the way up tears down what it started. Then:
#   export KUBECONFIG=$CLUSTER_DIR/admin.kubeconfig
#
# On a shared machine it holds no door open to the other local users: the
# work dir is root's alone (0700; keys and kubeconfigs 0600), etcd answers
# only TLS clients with a certificate of its own CA, on 127.0.0.1, and the
# API server and kubelet listen on the cluster's bridge address (NODE_IP)
# and on loopback, never on the host's routable address.
set -euo pipefail
# What this script writes (keys, kubeconfigs, configs) is root's alone; the
# daemons it starts get the usual 022 (start), as the containers' files must
# be readable by the users the containers run as.
umask 077
# shellcheck source=hack/cluster/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) -eq 0 ]] || { clog "must run as root (it starts kubelet and containerd)"; exit 1; }
NETPOL="${NETPOL:-1}"
[[ "$NETPOL" == 0 || "$NETPOL" == 1 ]] || { clog "NETPOL=$NETPOL: want 1 (kube-router enforces NetworkPolicies) or 0"; exit 1; }
netpol_bin=()
[[ "$NETPOL" == 1 ]] && netpol_bin=("$CLUSTER_BIN/kube-router")
for b in "$CLUSTER_K8S_BIN/etcd" "$CLUSTER_K8S_BIN/kube-apiserver" "$CLUSTER_BIN/kubelet" "${netpol_bin[@]}" \
  "$CLUSTER_BIN/kube-controller-manager" "$CLUSTER_BIN/kube-scheduler" "$CLUSTER_BIN/kube-proxy" \
  "$CLUSTER_BIN/images/images.txt"; do
  [[ -e "$b" ]] || { clog "$b is missing: run hack/cluster/build.sh (make cluster-build)"; exit 1; }
done
kubectl="${KUBECTL:-$CLUSTER_ROOT/bin/kubectl}"
[[ -x "$kubectl" ]] || { clog "$kubectl is missing: make kubectl"; exit 1; }

[[ "$NODES" =~ ^[1-9]$ && "$NODES" -le "$MAX_NODES" ]] || { clog "NODES=$NODES: want 1 to $MAX_NODES"; exit 1; }

cluster_lock
if [[ -f "$ACTIVE_MARKER" && "$(<"$ACTIVE_MARKER")" == "$CLUSTER_DIR" ]] &&
  pid_alive "$CLUSTER_DIR" kubelet && pid_alive "$CLUSTER_DIR" kube-apiserver; then
  clog "already up (KUBECONFIG=$admin_kubeconfig)"
  exit 0
fi
clear_stale_cluster
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  clog "the bridge $BRIDGE exists but no cluster says it owns it; remove it (ip link del $BRIDGE) or run down.sh with its CLUSTER_DIR"
  exit 1
fi
for ((i = 2; i <= NODES; i++)); do
  node_vars "$i"
  if [[ -e "/run/netns/$node_netns" ]] || ip link show "$node_veth" >/dev/null 2>&1; then
    clog "the network namespace $node_netns or the link $node_veth exists but no cluster says it owns it; remove them (ip netns del $node_netns; ip link del $node_veth) or run down.sh with its CLUSTER_DIR"
    exit 1
  fi
done
# Another kube-proxy on this machine would share (and rewrite) the chains
# ours writes, and down.sh could not tell its rules from ours.
for chain in KUBE-SERVICES KUBE-POSTROUTING; do
  if iptables -t nat -S "$chain" >/dev/null 2>&1; then
    clog "the iptables chain $chain (nat) exists: another kube-proxy runs on this machine, or one left it; this cluster's kube-proxy would rewrite it. Stop that cluster (or remove what it left: kube-proxy --cleanup) first"
    exit 1
  fi
done
for table in raw filter; do
  if iptables -t "$table" -S SLUICE-E2E >/dev/null 2>&1; then
    clog "the iptables chain SLUICE-E2E ($table) exists but no cluster says it owns it: remove it and the rules that jump to it (iptables -t $table -S | grep SLUICE-E2E)"
    exit 1
  fi
done
# The work dir holds every key of the cluster: root's, and no one else's.
if [[ -L "$CLUSTER_DIR" ]] || { [[ -e "$CLUSTER_DIR" ]] && [[ "$(stat -c %u "$CLUSTER_DIR")" != 0 ]]; }; then
  clog "$CLUSTER_DIR is a symbolic link or not owned by root: it would hold the cluster's keys; remove it or choose another CLUSTER_DIR"
  exit 1
fi
mkdir -p "$CLUSTER_DIR"
chmod 0700 "$CLUSTER_DIR"
# What a cluster of this work dir left when the machine rebooted under it
# (etcd's data, containerd's root): every run starts from nothing.
if [[ -d "$CLUSTER_DIR" ]] && ! awk '{ print $2 }' /proc/mounts | grep -qF -- "$CLUSTER_DIR/"; then
  find "$CLUSTER_DIR" -mindepth 1 -maxdepth 1 ! -name logs ! -name logs.prev -exec rm -rf --one-file-system {} +
fi

t0=$(date +%s%N)
elapsed() { local ms=$((($(date +%s%N) - t0) / 1000000)); printf '%d.%ds' $((ms / 1000)) $((ms % 1000 / 100)); }

mkdir -p "$run_dir" "$log_dir" "$state_dir" "$pki_dir"
chmod 0700 "$run_dir" "$log_dir" "$state_dir" "$pki_dir"
echo "$CLUSTER_DIR" >"$ACTIVE_MARKER"

failed() {
  local rc=$?
  clog "bring-up failed (exit $rc); the last lines of each log:"
  for f in "$log_dir"/*.log; do
    [[ -f "$f" ]] || continue
    echo "----- $f" >&2
    tail -n 15 "$f" >&2
  done
  "$(dirname "${BASH_SOURCE[0]}")/down.sh" || true
  exit "$rc"
}
trap failed ERR

# --- What the machine looks like before: down.sh puts it back. ---------
: >"$state_dir/sysctl.before"
for s in "${SYSCTLS[@]}"; do
  p="$(sysctl_path "$s")"
  [[ -r "$p" ]] && echo "$s=$(cat "$p")" >>"$state_dir/sysctl.before"
done
ls -1 /run/netns 2>/dev/null >"$state_dir/netns.before" || true
ls -1 /var/lib/cni/results 2>/dev/null >"$state_dir/cni-results.before" || true
# kube-router's sets: down.sh destroys those that were not there.
if command -v ipset >/dev/null; then ipset list -n >"$state_dir/ipset.before"; fi
# Every iptables table as it is: down.sh removes the chains named like
# kube-proxy's and the CNI plugins' (OWN_CHAINS_RE) that are not in it, and
# the rules that jump to them; what was there stays, whatever its name.
while read -r tool; do
  for table in "${IPTABLES_TABLES[@]}"; do
    "$tool-save" -t "$table" >"$state_dir/$tool-$table.before.tmp" 2>/dev/null &&
      mv "$state_dir/$tool-$table.before.tmp" "$state_dir/$tool-$table.before" ||
      rm -f "$state_dir/$tool-$table.before.tmp"
  done
done < <(iptables_tools)
: >"$state_dir/created-dirs"
for d in /run/netns /var/lib/cni /var/lib/kubelet /var/log/containers /run/containerd /run/mount; do
  [[ -e "$d" ]] || echo "$d" >>"$state_dir/created-dirs"
done
echo "$NODE_IP" >"$state_dir/node-ip"
echo "$NODES" >"$state_dir/nodes"
: >"$state_dir/created-netns"

# --- The bridge, and the node's address on it. ------------------------------
# The CNI bridge plugin takes the bridge as it finds it (its gateway address
# is NODE_IP): the API server and kubelet can bind NODE_IP before any pod.
ip link add "$BRIDGE" type bridge
echo "$BRIDGE" >"$state_dir/created-links"
ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
ip link set "$BRIDGE" up
# Only this host and its pods reach the node address, the pods and the
# Services: a neighbour that routes them through this host gets nothing
# (raw PREROUTING sees packets before kube-proxy's NAT and marks; what the
# host itself sends doesn't pass it, and replies to the pods' masqueraded
# connections come to the host's address).
iptables -t raw -N SLUICE-E2E
iptables -t raw -A SLUICE-E2E -i lo -j RETURN
iptables -t raw -A SLUICE-E2E -i "$BRIDGE" -j RETURN
# The other nodes: a network namespace each, its bridge and node address
# (node_ip, the gateway of its pod network), and a veth to the host, which
# routes the node's pod network to it; the node's default route is the
# host (its address on the host's bridge, NODE_IP). No address on the veth:
# routes onlink, through the nodes' addresses on their bridges.
for ((i = 2; i <= NODES; i++)); do
  node_vars "$i"
  ip netns add "$node_netns"
  echo "$node_netns" >>"$state_dir/created-netns"
  ip link add "$node_veth" type veth peer name eth0 netns "$node_netns"
  ip -n "$node_netns" link set lo up
  ip -n "$node_netns" link add "$node_bridge" type bridge
  ip -n "$node_netns" addr add "$node_ip/${node_cidr#*/}" dev "$node_bridge"
  ip -n "$node_netns" link set "$node_bridge" up
  ip -n "$node_netns" link set eth0 up
  ip link set "$node_veth" up
  ip route add "$node_cidr" via "$node_ip" dev "$node_veth" onlink src "$NODE_IP"
  ip -n "$node_netns" route add default via "$NODE_IP" dev eth0 onlink src "$node_ip"
  # A node forwards for its pods, and its bridged traffic passes its
  # iptables (kube-proxy's hairpin, a policy agent's rules).
  in_node sysctl -qw net.ipv4.ip_forward=1
  if [[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]]; then
    in_node sysctl -qw net.bridge.bridge-nf-call-iptables=1 || true
  fi
  iptables -t raw -A SLUICE-E2E -i "$node_veth" -j RETURN
done
if [[ "$NODES" -gt 1 ]]; then
  # The host routes between the nodes' pod networks.
  echo 1 >/proc/sys/net/ipv4/ip_forward
fi
iptables -t raw -A SLUICE-E2E -m comment --comment "$CLUSTER_NAME: only this host and its pods" -j DROP
for net in "$CLUSTER_CIDR" "$SERVICE_CIDR"; do
  iptables -t raw -I PREROUTING -d "$net" -m comment --comment "$CLUSTER_NAME: only this host and its pods" -j SLUICE-E2E
done
# And what the host or a pod sends to a Service address that kube-proxy
# has not made a rule for (yet: it syncs about a second after a change) is
# refused here, not sent on to the host's network: a client that waits for
# a new Service to take connections waits for kube-proxy's rule, not for
# whatever answers on the far side of the default route.
iptables -N SLUICE-E2E
iptables -A SLUICE-E2E -m comment --comment "$CLUSTER_NAME: no Service at this address (yet)" -j REJECT
for chain in FORWARD OUTPUT; do
  iptables -I "$chain" -d "$SERVICE_CIDR" -m comment --comment "$CLUSTER_NAME: Service addresses stay on this host" -j SLUICE-E2E
done
# What the pods send there is refused by routing too: a policy agent's
# FORWARD rules (kube-router's ACCEPT of what the policies allow) come
# before the rule above, and a pod's packet to a Service address that no
# rule rewrote went on to the host's network (where something answered).
# A routing rule sees the packet after kube-proxy's DNAT, whatever the
# order of the iptables chains; the host's own packets (the API server's
# calls to webhooks) come from no pod's interface and are not matched.
: >"$state_dir/created-ip-rules"
for dev in "$BRIDGE" $(for ((i = 2; i <= NODES; i++)); do echo "sluice-n$i"; done); do
  ip rule add iif "$dev" to "$SERVICE_CIDR" prohibit
  echo "iif $dev to $SERVICE_CIDR prohibit" >>"$state_dir/created-ip-rules"
done
# What the pods send off the cluster's networks leaves with the host's
# address; between pods, on one node or two, their own addresses stay (the
# CNI bridge's ipMasq would hide them from the node of the pod they call:
# from Redis Cluster's gossip and from NetworkPolicies).
iptables -t nat -N SLUICE-E2E
iptables -t nat -A SLUICE-E2E -d 224.0.0.0/4 -j RETURN
iptables -t nat -A SLUICE-E2E -m comment --comment "$CLUSTER_NAME: pods off the cluster's networks" -j MASQUERADE
iptables -t nat -A POSTROUTING -s "$CLUSTER_CIDR" ! -d "$CLUSTER_CIDR" -m comment --comment "$CLUSTER_NAME: pods off the cluster's networks" -j SLUICE-E2E

# --- Certificates and kubeconfigs. ----------------------------------------
cert() { # cert NAME SUBJECT EXTENSIONS, signed by pki/$CA.crt (default ca)
  local name="$1" subj="$2" ext="$3" ca="${CA:-ca}"
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki_dir/$name.key" 2>/dev/null
  openssl req -new -key "$pki_dir/$name.key" -subj "$subj" -out "$pki_dir/$name.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n%s\n' "$ext" >"$pki_dir/$name.ext"
  openssl x509 -req -in "$pki_dir/$name.csr" -CA "$pki_dir/$ca.crt" -CAkey "$pki_dir/$ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$pki_dir/$name.ext" -out "$pki_dir/$name.crt" 2>/dev/null
  rm -f "$pki_dir/$name.csr" "$pki_dir/$name.ext"
}
kubeconfig() { # kubeconfig NAME: from pki/NAME.crt
  local name="$1"
  cat >"$CLUSTER_DIR/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $CLUSTER_NAME
  cluster:
    server: https://$NODE_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$pki_dir/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$pki_dir/$name.crt")
    client-key-data: $(base64 -w0 "$pki_dir/$name.key")
contexts:
- name: $CLUSTER_NAME
  context: {cluster: $CLUSTER_NAME, user: $name}
current-context: $CLUSTER_NAME
EOF
}
ca() { # ca NAME: a self-signed CA in pki/NAME.{crt,key}
  openssl ecparam -name prime256v1 -genkey -noout -out "$pki_dir/$1.key" 2>/dev/null
  openssl req -x509 -new -key "$pki_dir/$1.key" -subj "/CN=$CLUSTER_NAME-$1" -days 30 -sha256 -out "$pki_dir/$1.crt" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}
chmod 0700 "$pki_dir"
ca ca
# etcd trusts a CA of its own: the cluster's CA also signs what the
# controller-manager's CSR signers approve, and etcd's clients are root.
ca etcd-ca
# (clientAuth too: etcd's gRPC gateway calls etcd with it.)
CA=etcd-ca cert etcd-server "/CN=etcd-server" "extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
CA=etcd-ca cert etcd-peer "/CN=etcd-peer" "extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
CA=etcd-ca cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" "extendedKeyUsage=clientAuth"
cert apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth
subjectAltName=IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
for ((i = 1; i <= NODES; i++)); do
  node_vars "$i"
  cert "kubelet-serving$node_sfx" "/CN=$node_name" "extendedKeyUsage=serverAuth
subjectAltName=IP:$node_ip,DNS:$node_name"
  cert "kubelet$node_sfx" "/O=system:nodes/CN=system:node:$node_name" "extendedKeyUsage=clientAuth"
done
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
cert admin "/O=system:masters/CN=$CLUSTER_NAME-admin" "extendedKeyUsage=clientAuth"
cert kube-controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
cert kube-scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
cert kube-proxy "/CN=system:kube-proxy" "extendedKeyUsage=clientAuth"
cert kube-router "/CN=system:kube-router" "extendedKeyUsage=clientAuth"
openssl genrsa -out "$pki_dir/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki_dir/sa.key" -pubout -out "$pki_dir/sa.pub" 2>/dev/null
rm -f "$pki_dir"/*.srl
for n in admin kube-controller-manager kube-scheduler kube-proxy kube-router; do kubeconfig "$n"; done
for ((i = 1; i <= NODES; i++)); do
  node_vars "$i"
  kubeconfig "kubelet$node_sfx"
done
# umask 077 made them so; say it, whatever made them.
chmod 0600 "$pki_dir"/* "$CLUSTER_DIR"/*.kubeconfig

start() { # start NAME COMMAND...: in its own session, logging to logs/NAME.log, without the cluster lock, umask 022; run/NAME.cmd is how node.sh starts it again
  local name="$1"
  shift
  printf '%q ' "$@" >"$run_dir/$name.cmd"
  (
    umask 022
    exec setsid "$@" >"$log_dir/$name.log" 2>&1 </dev/null {SLUICE_CLUSTER_LOCK_FD}>&-
  ) &
  echo $! >"$run_dir/$name.pid"
}
wait_for() { # wait_for WHAT SECONDS COMMAND...
  local what="$1" secs="$2" i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  clog "$what not ready after ${secs}s"
  return 1
}
k() { "$kubectl" --kubeconfig "$admin_kubeconfig" "$@"; }

# --- Control plane. -------------------------------------------------------
# etcd: TLS only, on 127.0.0.1, for clients (and its peer port) with a
# certificate of etcd-ca: the API server's.
start etcd "$CLUSTER_K8S_BIN/etcd" --name "$CLUSTER_NAME" --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls "https://127.0.0.1:$ETCD_PORT" --advertise-client-urls "https://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "https://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "https://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "$CLUSTER_NAME=https://127.0.0.1:$ETCD_PEER_PORT" \
  --cert-file "$pki_dir/etcd-server.crt" --key-file "$pki_dir/etcd-server.key" \
  --client-cert-auth --trusted-ca-file "$pki_dir/etcd-ca.crt" \
  --peer-cert-file "$pki_dir/etcd-peer.crt" --peer-key-file "$pki_dir/etcd-peer.key" \
  --peer-client-cert-auth --peer-trusted-ca-file "$pki_dir/etcd-ca.crt" \
  --unsafe-no-fsync --quota-backend-bytes 2147483648
wait_for etcd 30 curl -sf --cacert "$pki_dir/etcd-ca.crt" --cert "$pki_dir/apiserver-etcd-client.crt" \
  --key "$pki_dir/apiserver-etcd-client.key" "https://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$CLUSTER_K8S_BIN/kube-apiserver" \
  --etcd-servers "https://127.0.0.1:$ETCD_PORT" --etcd-cafile "$pki_dir/etcd-ca.crt" \
  --etcd-certfile "$pki_dir/apiserver-etcd-client.crt" --etcd-keyfile "$pki_dir/apiserver-etcd-client.key" \
  --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$APISERVER_PORT" \
  --tls-cert-file "$pki_dir/apiserver.crt" --tls-private-key-file "$pki_dir/apiserver.key" \
  --client-ca-file "$pki_dir/ca.crt" \
  --kubelet-client-certificate "$pki_dir/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$pki_dir/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority "$pki_dir/ca.crt" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$pki_dir/sa.pub" --service-account-signing-key-file "$pki_dir/sa.key" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
  --allow-privileged=true --profiling=false --cert-dir "$pki_dir"
wait_for kube-apiserver 60 k get --raw /readyz
clog "control plane up ($(elapsed))"

start kube-controller-manager "$CLUSTER_BIN/kube-controller-manager" \
  --kubeconfig "$CLUSTER_DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
  --root-ca-file "$pki_dir/ca.crt" --service-account-private-key-file "$pki_dir/sa.key" \
  --use-service-account-credentials=true --cluster-name "$CLUSTER_NAME" \
  --cluster-signing-cert-file "$pki_dir/ca.crt" --cluster-signing-key-file "$pki_dir/ca.key"
start kube-scheduler "$CLUSTER_BIN/kube-scheduler" \
  --kubeconfig "$CLUSTER_DIR/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/kube-scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false

# --- The nodes: containerd, CNI, kubelet, kube-proxy, kube-router. -------
if [[ "$NETPOL" == 1 ]]; then
  k apply -f "$(dirname "${BASH_SOURCE[0]}")/manifests/kube-router.yaml" >/dev/null
fi
pause_image="$(grep '/pause:' "$CLUSTER_BIN/images/images.txt")"
# start_containerd I: node I's containerd (in its network namespace: the
# CNI plugins it runs make the pods' veths on its bridge), its CNI config.
start_containerd() {
  node_vars "$1"
  mkdir -p "$node_dir/cni/net.d" "$node_dir/cni/ipam" "$node_dir/containerd" "$node_dir/kubelet" "$log_dir/pods$node_sfx"
  cat >"$node_dir/containerd/config.toml" <<EOF
version = 2
root = "$node_dir/containerd/root"
state = "$run_dir/containerd$node_sfx"
[grpc]
  address = "$node_sock"
[ttrpc]
  address = "$node_sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$node_dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # kubectl exec and logs: on loopback only (kubelet proxies them).
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # These machines lack CAP_SYS_RESOURCE: without this every sandbox fails
  # with "runc create failed: ... can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$run_dir/runc$node_sfx"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node_dir/cni/net.d"
EOF
  # No ipMasq: the host's nat SLUICE-E2E chain masquerades what leaves
  # the cluster's networks, and pods see each other's own addresses.
  cat >"$node_dir/cni/net.d/10-$CLUSTER_NAME.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CLUSTER_NAME",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$node_bridge",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$node_cidr"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$node_dir/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  if [[ -n "$node_netns" ]]; then
    start "containerd$node_sfx" nsenter --net="/run/netns/$node_netns" env PATH="/usr/sbin:/usr/bin:/sbin:/bin" containerd --config "$node_dir/containerd/config.toml"
  else
    start containerd env PATH="/usr/sbin:/usr/bin:/sbin:/bin" containerd --config "$node_dir/containerd/config.toml"
  fi
}

# import_images I: every image into node I's containerd.
import_images() {
  node_vars "$1"
  wait_for "containerd$node_sfx" 30 ctr --address "$node_sock" version
  # An image's archive is its reference's path under the registry:
  # e2e.sluice.local/previous/sluice-operator:ca0d833 in previous/.
  while read -r ref; do
    name="${ref#*/}"
    name="${name%%:*}"
    ctr --address "$node_sock" -n k8s.io images import "$CLUSTER_BIN/images/$name.tar" >/dev/null
  done <"$CLUSTER_BIN/images/images.txt"
}

for ((i = 1; i <= NODES; i++)); do start_containerd "$i"; done
import_pids=()
for ((i = 1; i <= NODES; i++)); do
  import_images "$i" &
  import_pids+=($!)
done
for p in "${import_pids[@]}"; do wait "$p"; done
clog "containerd up on $NODES node(s), $(wc -l <"$CLUSTER_BIN/images/images.txt") images imported ($(elapsed))"

# kubelet puts every pod under CGROUP_ROOT, which must exist in each
# hierarchy (cpuset needs its CPUs and memory nodes set to hold tasks).
# Its CPU weight is that of CLUSTER_CPU_SHARES/1024 busy processes, so that
# the pods get the CPU they request when the machine's other processes keep
# it busy, as on a node that runs only Kubernetes: the limiters' Redis
# deadline is 20ms. The other nodes' kubelets have CGROUP_ROOT/node-I,
# which shares that weight.
cgroup_dirs | while read -r d; do
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    sub="$d${node_cgroup#"$CGROUP_ROOT"}"
    mkdir -p "$sub"
    if [[ -f "$(dirname "$sub")/cpuset.cpus" ]]; then
      cat "$(dirname "$sub")/cpuset.cpus" >"$sub/cpuset.cpus"
      cat "$(dirname "$sub")/cpuset.mems" >"$sub/cpuset.mems"
    fi
  done
  if [[ -f "$d/cpu.shares" ]]; then
    echo "${CLUSTER_CPU_SHARES:-65536}" >"$d/cpu.shares"
  elif [[ -f "$d/cpu.weight" ]]; then
    echo $((${CLUSTER_CPU_SHARES:-65536} * 100 / 1024 > 10000 ? 10000 : ${CLUSTER_CPU_SHARES:-65536} * 100 / 1024)) >"$d/cpu.weight"
  fi
done

# start_node I: node I's kubelet and kube-proxy.
start_node() {
  node_vars "$1"
  local in=()
  [[ -n "$node_netns" ]] && in=(nsenter --net="/run/netns/$node_netns")
  cat >"$node_dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $pki_dir/kubelet-serving$node_sfx.crt
tlsPrivateKeyFile: $pki_dir/kubelet-serving$node_sfx.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki_dir/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$node_sock
cgroupDriver: cgroupfs
cgroupRoot: $node_cgroup
# The machines run cgroup v1 and may have swap.
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_SERVICE_IP]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $log_dir/pods$node_sfx
# A shared machine: evict only when it is really out of room, never
# garbage-collect the imported images (nothing can pull them again).
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
EOF
  mkdir -p "$node_dir/kubelet-pki"
  start "kubelet$node_sfx" "${in[@]}" "$CLUSTER_BIN/kubelet" --config "$node_dir/kubelet/config.yaml" \
    --kubeconfig "$CLUSTER_DIR/kubelet$node_sfx.kubeconfig" --root-dir "$node_dir/kubelet" \
    --cert-dir "$node_dir/kubelet-pki" --hostname-override "$node_name" --node-ip "$node_ip"

  cat >"$node_dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig}
hostnameOverride: $node_name
mode: iptables
clusterCIDR: $CLUSTER_CIDR
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# Leave the host's conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
# No NodePort on 127.0.0.1 (which would set route_localnet) or on other
# addresses than the node's.
iptables: {localhostNodePorts: false}
nodePortAddresses: [primary]
EOF
  start "kube-proxy$node_sfx" "${in[@]}" "$CLUSTER_BIN/kube-proxy" --config "$node_dir/kube-proxy.yaml"
}
for ((i = 1; i <= NODES; i++)); do start_node "$i"; done

for ((i = 1; i <= NODES; i++)); do
  node_vars "$i"
  wait_for "node $node_name" 90 k wait --for=condition=Ready "node/$node_name" --timeout=1s
done
clog "$NODES node(s) Ready ($(elapsed))"

# NetworkPolicies, enforced by kube-router's firewall alone (no router, no
# service proxy) in each node's iptables, with ipset: what runs on this
# kernel (an nftables agent that queues packets would need nft's queue,
# which it lacks). v2.1.0, pinned here, in the test harness only. It
# starts once its node is registered (it reads its addresses from it), and
# listens on nothing (no health or metrics port).
if [[ "$NETPOL" == 1 ]]; then
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    in=()
    [[ -n "$node_netns" ]] && in=(nsenter --net="/run/netns/$node_netns")
    start "kube-router$node_sfx" "${in[@]}" "$CLUSTER_BIN/kube-router" --kubeconfig "$CLUSTER_DIR/kube-router.kubeconfig" \
      --run-firewall=true --run-router=false --run-service-proxy=false --hostname-override "$node_name" \
      --service-cluster-ip-range "$SERVICE_CIDR" --health-port 0 --metrics-port 0
  done
  # Its chains in the host's filter table say it synced.
  wait_for "kube-router's firewall" 60 iptables -S KUBE-ROUTER-FORWARD
  clog "kube-router's firewall up ($(elapsed))"
fi

# --- Add-ons: CoreDNS and storage. ----------------------------------------
coredns_image="$(grep '/coredns:' "$CLUSTER_BIN/images/images.txt")"
sed -e "s#__COREDNS_IMAGE__#$coredns_image#g" -e "s#__DNS_SERVICE_IP__#$DNS_SERVICE_IP#g" -e "s#__COREDNS_REPLICAS__#$NODES#g" \
  "$(dirname "${BASH_SOURCE[0]}")/manifests/coredns.yaml" | k apply -f - >/dev/null
# Dynamic storage: local-path-provisioner, whose default StorageClass
# (local-path) claims without a class get; each volume is a directory of
# CLUSTER_DIR/volumes, made on the claim's node by the volume-helper, the
# Redis pods' user's alone (REDIS_UID, 0700). The nodes share the host's
# file system, but the volumes have node affinity as on real nodes.
mkdir -p "$CLUSTER_DIR/volumes"
chmod 0700 "$CLUSTER_DIR/volumes"
provisioner_image="$(grep '/local-path-provisioner:' "$CLUSTER_BIN/images/images.txt")"
helper_image="$(grep '/volume-helper:' "$CLUSTER_BIN/images/images.txt")"
sed -e "s#__PROVISIONER_IMAGE__#$provisioner_image#g" -e "s#__HELPER_IMAGE__#$helper_image#g" \
  -e "s#__VOLUMES_DIR__#$CLUSTER_DIR/volumes#g" -e "s#__REDIS_UID__#$REDIS_UID#g" \
  "$(dirname "${BASH_SOURCE[0]}")/manifests/local-path.yaml" | k apply -f - >/dev/null
k -n kube-system rollout status deployment/coredns --timeout=120s >/dev/null
k -n local-path-storage rollout status deployment/local-path-provisioner --timeout=120s >/dev/null
clog "CoreDNS and local-path-provisioner Ready ($(elapsed))"

node_socks=""
for ((i = 1; i <= NODES; i++)); do
  node_vars "$i"
  node_socks+="${node_socks:+ }$node_name=$node_sock"
done
cat >"$CLUSTER_DIR/env" <<EOF
export KUBECONFIG=$admin_kubeconfig
# Node 1's containerd (ctr's default); each node's in SLUICE_E2E_CONTAINERD.
export CONTAINERD_ADDRESS=$containerd_sock
export CONTAINERD_NAMESPACE=k8s.io
export SLUICE_E2E_CLUSTER_DIR=$CLUSTER_DIR
export SLUICE_E2E_IMAGES=$CLUSTER_BIN/images/images.txt
export SLUICE_E2E_NODES=$NODES
export SLUICE_E2E_NETPOL=$NETPOL
export SLUICE_E2E_CONTAINERD="$node_socks"
EOF
trap - ERR
clog "up in $(elapsed): . $CLUSTER_DIR/env   (then kubectl get pods -A; ctr containers ls)"
