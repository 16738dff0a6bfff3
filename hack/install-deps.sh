#!/usr/bin/env bash
# Installs what the tests need that Go can't build: redis-server and nginx
# (the gateway end-to-end test), from Debian's packages. Idempotent; does
# nothing when they are already there.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx)

if [[ ${#need[@]} -eq 0 ]]; then
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "install-deps: need root (or sudo) to install ${need[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
# Don't start the packaged services: tests run their own servers. A
# policy-rc.d that refuses every start keeps nginx off port 80, and is
# removed again unless it was there before.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  trap '$sudo rm -f "$policy"' EXIT
fi
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
command -v redis-server >/dev/null 2>&1 || { echo "install-deps: redis-server still missing after apt-get" >&2; exit 1; }
[[ -x /usr/sbin/nginx ]] || command -v nginx >/dev/null 2>&1 || { echo "install-deps: nginx still missing after apt-get" >&2; exit 1; }
