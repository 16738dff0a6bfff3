#!/usr/bin/env bash
# Installs what the tests need that Go can't build, from Debian's packages.
# Idempotent; does nothing when they are already there.
#
#   hack/install-deps.sh            # redis-server, nginx (the gateway end-to-end test) and curl (the manual's commands, go test ./docs/)
#   hack/install-deps.sh --cluster  # also what the one-node cluster of make e2e runs on:
#                                   # containerd, runc, the CNI plugins, iptables, openssl
set -euo pipefail

cluster=false
[[ "${1:-}" == "--cluster" ]] && cluster=true

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx)
command -v curl >/dev/null 2>&1 || need+=(curl)
if $cluster; then
  command -v containerd >/dev/null 2>&1 || need+=(containerd)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/portmap && -x /usr/lib/cni/loopback ]] ||
    need+=(containernetworking-plugins)
  command -v iptables >/dev/null 2>&1 || [[ -x /usr/sbin/iptables ]] || need+=(iptables)
  command -v openssl >/dev/null 2>&1 || need+=(openssl)
  # kubelet runs mount, nsenter and findmnt; the pod network needs ip (iproute2)
  # and conntrack for kube-proxy. Debian's base image has the first three.
  command -v ip >/dev/null 2>&1 || [[ -x /usr/sbin/ip ]] || need+=(iproute2)
  command -v conntrack >/dev/null 2>&1 || [[ -x /usr/sbin/conntrack ]] || need+=(conntrack)
  # kube-router's NetworkPolicy firewall (hack/cluster) keeps its sets with ipset.
  command -v ipset >/dev/null 2>&1 || [[ -x /usr/sbin/ipset ]] || need+=(ipset)
  command -v ldd >/dev/null 2>&1 || need+=(libc-bin)
fi

if [[ ${#need[@]} -eq 0 ]]; then
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root (or sudo) to install ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
# Two runs beside each other (two clones' make test on a fresh machine)
# take turns: apt-get refuses to run while another holds dpkg's lock.
exec {deps_lock}>>"${TMPDIR:-/tmp}/sluice-install-deps.lock"
flock -n "$deps_lock" || { echo "install-deps: waiting for another hack/install-deps.sh" >&2; flock "$deps_lock"; }
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
# Don't start the packaged services: tests run their own servers (nginx on
# port 80, containerd with the cluster's own configuration). A policy-rc.d
# that refuses every start keeps them stopped, and is removed again unless it
# was there before.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
command -v redis-server >/dev/null 2>&1 || { echo "install-deps: redis-server still missing after apt-get" >&2; exit 1; }
[[ -x /usr/sbin/nginx ]] || command -v nginx >/dev/null 2>&1 || { echo "install-deps: nginx still missing after apt-get" >&2; exit 1; }
command -v curl >/dev/null 2>&1 || { echo "install-deps: curl still missing after apt-get" >&2; exit 1; }
if $cluster; then
  for f in /usr/bin/containerd /usr/sbin/runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/portmap; do
    [[ -x $f ]] || { echo "install-deps: $f still missing after apt-get" >&2; exit 1; }
  done
fi
