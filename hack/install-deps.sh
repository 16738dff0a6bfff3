#!/usr/bin/env bash
# Installs what the tests need that Go can't build: redis-server, from
# Debian's packages. Idempotent; does nothing when it is already there.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)

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
# Don't start the packaged service: tests run their own servers.
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
command -v redis-server >/dev/null 2>&1 || { echo "install-deps: redis-server still missing after apt-get" >&2; exit 1; }
