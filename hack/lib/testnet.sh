# Sourced by hack/bench.sh and hack/bench-faults.sh: the shell side of
# internal/testnet (docs/development/testing.md, "Two runs side by side").

# testnet_claim sets TESTNET_HOST to host 1 of a loopback /24 of the script's own,
# 127.A.B.1: SLUICE_TESTNET's when set, or one claimed at random among
# 127.100.0.0 to 127.254.255.0 with an exclusive flock on
# ${TMPDIR:-/tmp}/sluice-testnet/127.A.B.lock, the lock internal/testnet
# takes, held on fd TESTNET_FD until the script and the children that
# inherit it exit. Call it in the script's own shell, not in $(...): the
# lock lives as long as the shell that took it.
testnet_claim() {
  local dir="${TMPDIR:-/tmp}/sluice-testnet" p i
  if [[ -n "${SLUICE_TESTNET:-}" ]]; then
    [[ "$SLUICE_TESTNET" =~ ^127\.([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])\.([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])$ ]] ||
      { echo "SLUICE_TESTNET=$SLUICE_TESTNET: want 127.A.B, the first three numbers of a loopback /24 (e.g. 127.100.7)" >&2; return 1; }
    TESTNET_HOST="$SLUICE_TESTNET.1"
    return 0
  fi
  mkdir -p "$dir" && chmod 1777 "$dir" 2>/dev/null
  for ((i = 0; i < 1000; i++)); do
    p="127.$((100 + RANDOM % 155)).$((RANDOM % 256))"
    [[ -e "$dir/$p.lock" ]] || : 2>/dev/null >>"$dir/$p.lock"
    exec {TESTNET_FD}<"$dir/$p.lock" 2>/dev/null || continue
    if flock -n "$TESTNET_FD"; then
      TESTNET_HOST="$p.1"
      return 0
    fi
    exec {TESTNET_FD}>&-
  done
  echo "no free loopback /24 in 1000 tries under $dir (or set SLUICE_TESTNET=127.A.B)" >&2
  return 1
}
