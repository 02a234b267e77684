#!/usr/bin/env bash
# deps-check (part of make lint): dependencies stay where they belong. It fails when
#   - the Go SDK (sdk/go) links a Redis client: its types are its own, converted at
#     the edge (an SDK user needs no go-redis);
#   - a binary other than the runner, or the SDK, links execution code (lib/sandbox,
#     lib/procrun, lib/execcore, lib/reaper, lib/dispatcher/worker): the API daemon and
#     heroctl use lib/dispatcher's client only, and a helper they need (a ticker, a
#     size parser) lives in a small package of its own;
#   - service or heroctl code writes a Redis hash itself (HSet, HMSet, HSetNX outside
#     tests): an object's status and fields are written by lib/store's functions.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

# forbid WHY PATTERN PACKAGE...: no package PACKAGE links may match PATTERN.
forbid() {
  local why=$1 pattern=$2
  shift 2
  local pkg out
  for pkg in "$@"; do
    if out=$(go list -deps "$pkg" | grep -E "$pattern"); then
      echo "deps-check: $pkg links $why:"
      echo "$out" | sed 's/^/  /'
      fail=1
    fi
  done
}

forbid "a Redis client (give the SDK its own types; convert at the edge)" '^github\.com/redis/go-redis' ./sdk/go
forbid "execution code (only the runner runs scripts)" \
  '^github\.com/hero-coordinator/hero/lib/(sandbox|procrun|execcore|reaper|dispatcher/worker)$' \
  ./sdk/go ./cmd/heroctl ./services/supervisor-daemon ./services/scheduler ./services/router ./services/mycelium-gateway

gofiles=$(git ls-files --cached --others --exclude-standard 'services/*.go' 'cmd/*.go' | grep -v '_test\.go$' || true)
if [ -n "$gofiles" ] && out=$(grep -nE '\.(HSet|HMSet|HSetNX)\(' $gofiles); then
  echo "deps-check: a Redis hash written in service code (write it through a lib/store function):"
  echo "$out"
  fail=1
fi

if [ "$fail" = 0 ]; then
  echo "deps-check: the SDK links no Redis client, only the runner links execution code, services write no hash themselves"
fi
exit "$fail"
