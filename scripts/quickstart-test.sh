#!/usr/bin/env bash
# The README's local quickstart, run as a new user would (make quickstart-test): its
# lines (the block marked quickstart:local, scripts/readme-block.sh) run as they are, one
# by one, in a fresh clone of the repository with the work tree's changes on it (no bin/,
# no .local-stack/), with a HOME of their own (heroctl's keys go to ~/.config/hero). Then it
# checks what they made: the diamond flow finished with its results, the job printed 42,
# heroctl version names the revision, the gateway is ready with its Mycelium node; and
# that the block's last line, scripts/local-stack.sh down, leaves nothing running. On a
# failure it prints the services' logs and stops the stack it started.
#
# Needs what local-stack.sh needs: Go, redis-server, bubblewrap, and the ports 6379,
# 8989, 9652-9664 free (a running local stack or compose stack takes some of them).
# QUICKSTART_TEST_KEEP=1 leaves the copy and the stack (for debugging).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
START=$(date +%s)
WORK=$(mktemp -d)
CLONE=$WORK/clone
step() { printf '\n=== %s (%ss)\n' "$*" "$(( $(date +%s) - START ))"; }
say() { printf '  %s\n' "$*"; }
fail() { printf '\nquickstart-test: FAIL: %s\n' "$*" >&2; exit 1; }

UP=
cleanup() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ] && [ -n "$UP" ]; then
    echo; echo "=== quickstart-test failed (exit $rc): the stack's logs"
    for f in "$CLONE"/.local-stack/*.log; do
      [ -f "$f" ] || continue
      echo "--- $(basename "$f") (last 40 lines)"; tail -n 40 "$f"
    done
  fi
  if [ "${QUICKSTART_TEST_KEEP:-0}" = 1 ]; then
    echo "quickstart-test: QUICKSTART_TEST_KEEP=1: the copy is $CLONE; stop its stack with: (cd $CLONE && scripts/local-stack.sh down)"
  else
    if [ -n "$UP" ]; then (cd "$CLONE" && scripts/local-stack.sh down >/dev/null 2>&1); fi
    rm -rf "$WORK"
  fi
  if [ "$rc" = 0 ]; then
    printf '\nquickstart-test: PASS in %ss\n' "$(( $(date +%s) - START ))"
  else
    printf '\nquickstart-test: FAILED after %ss\n' "$(( $(date +%s) - START ))" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

step "preflight"
for tool in go git redis-server bwrap python3; do
  command -v "$tool" >/dev/null || fail "$tool is missing (make deps installs what the tests need)"
done
for p in 6379 8989 9652 9653 9654 9655 9656 9657 9660 9661 9662 9663 9664; do
  port_busy "$p" && fail "port $p is in use (a local stack or a compose stack?): the quickstart takes 6379, 8989 and 9652-9664"
done
# The block, and its last line: the stack's end, run after the checks.
scripts/readme-block.sh local > "$WORK/block.sh"
last=$(tail -n 1 "$WORK/block.sh")
[ "$last" = "scripts/local-stack.sh down" ] || fail "the README's local quickstart should end with scripts/local-stack.sh down, not: $last"
head -n -1 "$WORK/block.sh" > "$WORK/lines.sh"
say "$(wc -l < "$WORK/block.sh") lines from README.md (quickstart:local)"

step "a fresh clone, with the work tree's changes on it (scripts/fresh-clone.sh)"
mkdir -p "$WORK/home"
say "$(scripts/fresh-clone.sh "$CLONE")"

# The user's environment: a HOME of its own (heroctl's keys, the CA), the Go caches of
# this machine (a cold build would take minutes more), nothing of HERO_* or REDIS_URL.
GOENV_CACHE=$(go env GOCACHE) GOENV_MODCACHE=$(go env GOMODCACHE) GOENV_PATH=$(go env GOPATH)
quickstart_env=(env -i "PATH=$PATH" "HOME=$WORK/home" "TERM=dumb" "LANG=C.UTF-8"
  "GOCACHE=$GOENV_CACHE" "GOMODCACHE=$GOENV_MODCACHE" "GOPATH=$GOENV_PATH" "GOFLAGS=${GOFLAGS:-}" "GOPROXY=$(go env GOPROXY)")

step "the README's local quickstart, line by line (bash -v prints each before it runs)"
UP=1
if ! (cd "$CLONE" && "${quickstart_env[@]}" bash -euo pipefail -v "$WORK/lines.sh") 2>&1 | tee "$WORK/out" | sed 's/^/  | /'; then
  fail "a line of the README's local quickstart failed (above)"
fi

step "what the lines made"
hc() { (cd "$CLONE" && "${quickstart_env[@]}" HERO_TLS_CA="$CLONE/.local-stack/pki/ca.pem" HERO_ACTOR=1 HERO_CONTEXT=1 bin/heroctl "$@"); }
flow=$(hc -o json flow get 1)
python3 -c 'import json, sys; f = json.load(sys.stdin); r = f["result"]
sys.exit(0 if f["status"] == "finished" and r.get("1.SEED") == "21" and r.get("4.TOTAL") == "483" else 1)' <<<"$flow" ||
  fail "flow 1 (examples/diamond.yaml): $flow"
say "flow 1 finished: 4.TOTAL=483"
grep -qx '42' "$WORK/out" || fail "job run --type python --script 'print(6*7)' did not print 42"
say "job run printed 42"
grep -q '^1\.SEED' <(sed -n '/^result:/,$p' "$WORK/out" | sed 's/^ *//') || fail "flow get 1 printed no result map"
version=$(hc version)
rev=$(git -C "$ROOT" describe --always --abbrev=12 2>/dev/null || echo unknown)
case "$version" in
  *"revision ${rev}"*) say "$version" ;;
  *) fail "bin/heroctl version says '$version', not the revision $rev (make build's -ldflags)" ;;
esac
status=$(cd "$CLONE" && "${quickstart_env[@]}" scripts/local-stack.sh status)
grep -q '^mycelium-gateway  *ready' <<<"$status" || fail "the gateway is not ready: $status"
say "mycelium-gateway ready, with the Mycelium node emulator"

step "the block's last line: $last"
if ! (cd "$CLONE" && "${quickstart_env[@]}" bash -euo pipefail -v -c "$last") 2>&1 | sed 's/^/  | /'; then
  fail "$last failed"
fi
status=$(cd "$CLONE" && "${quickstart_env[@]}" scripts/local-stack.sh status)
if grep -qE ' (ready|running) ' <<<"$status"; then fail "still running after $last: $status"; fi
UP=
for p in 6379 8989 9652 9653; do port_busy "$p" && fail "port $p is still taken after $last"; done
say "nothing of the stack runs any more"
