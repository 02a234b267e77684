#!/usr/bin/env bash
# End-to-end test of deploy/compose/two-nodes.yml (make compose-two-nodes-test): two Hero
# nodes sharing an emulated Mycelium network, driven exactly as docs/multinode.md tells a
# user to. It runs the compose file as it is and removes everything it made at the end
# (also on failure, after printing the services' logs):
#
#   1. `docker compose -f deploy/compose/two-nodes.yml build`, `up -d --wait`
#   2. heroctl on the host, the doc's commands: node B's context 1 allows node A's key,
#      runner 7 serves it; node A's runner 7 is remote (node B's key)
#   3. examples/two-nodes.yaml from node A: its middle job runs on node B; the flow
#      finishes on A with the results that crossed both ways
#   4. `docker compose down -v`
#
# It expects the base images that scripts/offline-images.sh makes (make compose-test runs
# that first). Environment:
#   HERO_RUNNER_BASE         default hero-runtime-python:bookworm (offline-images.sh)
#   COMPOSE_TEST_BUILD_ARGS  default "--build-arg GOPROXY=off"
#   COMPOSE_TEST_KEEP=1      leave the stack running at the end
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-hero-two-nodes-test}
export HERO_RUNNER_BASE=${HERO_RUNNER_BASE:-hero-runtime-python:bookworm}
export HERO_ADMIN_SECRET=${HERO_ADMIN_SECRET:-two-nodes-test-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')}
export HERO_CONFIG_DIR=${HERO_CONFIG_DIR:-$(mktemp -d)} # heroctl's actor keys: never the user's own
BUILD_ARGS=${COMPOSE_TEST_BUILD_ARGS---build-arg GOPROXY=off}
DC=(docker compose -f "$ROOT/deploy/compose/two-nodes.yml")
# The emulator's node keys (docs/multinode.md).
A=ce4095f05bd112dfb3f613d7fa5cc94d3da886b7561ac7ef012c9a1fc7311630
B=00878b81b6287f30dc7f60fcd7811fcd54b78543a7f2625d40f927616f675a21

START=$(date +%s)
STACK_UP=
step() { printf '\n=== %s (%ss)\n' "$*" "$(( $(date +%s) - START ))"; }
say() { printf '  %s\n' "$*"; }
fail() { printf '\ncompose-two-nodes-test: FAIL: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ] && [ -n "$STACK_UP" ]; then
    echo; echo "=== failed (exit $rc): state and logs of the stack"
    "${DC[@]}" ps -a
    for s in mycelium a-api a-scheduler a-router a-runner a-gateway b-api b-scheduler b-router b-runner b-gateway; do
      echo "--- logs: $s (last 80 lines)"
      "${DC[@]}" logs --no-color --no-log-prefix --tail 80 "$s" 2>&1
    done
  fi
  if [ "${COMPOSE_TEST_KEEP:-0}" = 1 ]; then
    echo "COMPOSE_TEST_KEEP=1: $COMPOSE_PROJECT_NAME is still running"
  elif [ -n "$STACK_UP" ]; then
    echo; echo "=== docker compose down -v"
    "${DC[@]}" down -v --remove-orphans --timeout 20 2>&1 | tail -n 3
  fi
  if [ "$rc" = 0 ]; then
    printf '\ncompose-two-nodes-test: PASS in %ss\n' "$(( $(date +%s) - START ))"
  else
    printf '\ncompose-two-nodes-test: FAILED after %ss\n' "$(( $(date +%s) - START ))" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "preflight"
command -v docker >/dev/null || fail "docker is not installed"
command -v jq >/dev/null || fail "jq is missing: apt-get install jq"
for p in 19652 19653 29652 29653; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then fail "port $p is in use (the compose file publishes it)"; fi
done
[ -x bin/heroctl ] || make -s build >/dev/null
"${DC[@]}" config -q

step "build and up"
# shellcheck disable=SC2086 # BUILD_ARGS is a list of words
"${DC[@]}" build $BUILD_ARGS 2>&1 | tail -n 3
STACK_UP=1
"${DC[@]}" up -d --wait --wait-timeout 180 2>&1 | tail -n 3

step "set up both nodes as docs/multinode.md does"
unset HERO_ACTOR HERO_CONTEXT HERO_OUTPUT
# Each node has its own CA: heroctl verifies each API against its node's.
"${DC[@]}" exec -T a-api cat /pki/ca.pem > "$HERO_CONFIG_DIR/ca-a.pem"
"${DC[@]}" exec -T b-api cat /pki/ca.pem > "$HERO_CONFIG_DIR/ca-b.pem"
B_TLS="$HERO_CONFIG_DIR/ca-b.pem"
export HERO_TLS_CA=$HERO_CONFIG_DIR/ca-a.pem
hero() { bin/heroctl "$@" >/dev/null || fail "heroctl $*"; }
HERO_ADDR=127.0.0.1:29653 HERO_TLS_CA=$B_TLS hero actor create --id 1
HERO_ADDR=127.0.0.1:29653 HERO_TLS_CA=$B_TLS hero context create 1 --admins 1 --allowed-sources "$A"
HERO_ADDR=127.0.0.1:29653 HERO_TLS_CA=$B_TLS HERO_ACTOR=1 hero runner create 7 --script-types python,sh
export HERO_ADDR=127.0.0.1:19653
hero actor create --id 1
hero context create 1 --admins 1
export HERO_ACTOR=1 HERO_CONTEXT=1
hero runner create 1 --script-types python,sh
hero runner create 7 --remote --pubkey "$B"

step "examples/two-nodes.yaml: the middle job runs on node B"
timeout 180 bin/heroctl flow submit examples/two-nodes.yaml --watch || fail "the flow did not finish"
flow=$(bin/heroctl -o json flow get 1)
jq -e '.status == "finished"' <<<"$flow" >/dev/null || fail "flow 1: $flow"
jq -e '.result["2.DOUBLED"] == "42" and (.result["3.output"] | startswith("back on node A: 42"))' <<<"$flow" >/dev/null \
  || fail "results did not cross the nodes: $(jq -c .result <<<"$flow")"
say "flow 1 finished: $(jq -c .result <<<"$flow")"
# Node B ran job 2 with its own runner; node A's record names the remote node.
jb=$(HERO_ADDR=127.0.0.1:29653 HERO_TLS_CA=$B_TLS bin/heroctl -o json job get 2)
jq -e '.status == "finished" and .worker == "runner-b"' <<<"$jb" >/dev/null || fail "job 2 on node B: $jb"
ja=$(bin/heroctl -o json job get 2)
jq -e '.worker | startswith("remote:")' <<<"$ja" >/dev/null || fail "job 2 on node A: $ja"
say "job 2 ran on node B (runner-b); node A records $(jq -r .worker <<<"$ja")"
