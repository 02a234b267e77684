#!/usr/bin/env bash
# End-to-end test of docker-compose.yml (make compose-test). It runs the compose file as it
# is, under its own project name, and removes everything it made at the end (also on failure,
# after printing the services' logs):
#
#   1. scripts/offline-images.sh (base images without a registry; as root only); then the
#      README's compose quickstart (its block marked quickstart:compose, scripts/readme-block.sh),
#      line by line as it is, in a fresh clone (scripts/fresh-clone.sh) with a HOME of its
#      own, but its last line (docker compose down, run at the end): the build (with
#      HERO_GOPROXY=off: it downloads nothing), `up --wait`, heroctl copied out of the image,
#      the CA and the generated operator secret read from the stack, actor 1, context 1,
#      runner 1, examples/diamond.yaml and examples/handlers.yaml watched to their end
#   2. what those lines made: the CA outside the clone and nothing new in it; the operator
#      secret generated (not in the log; the old well-known default refused); runner create
#      showed the runner's script types; heroctl version names the revision built;
#      diamond's and handlers' results; heroctl inside a container works too; the Python
#      SDK's producer example and the Go client's (sdk/go/example/producer) run against the
#      API, signed, following HERO_HTTP_PORT/HERO_GRPC_PORT alone (every example meant for
#      this stack runs: checked at the end against examples/)
#   3. a flow whose middle job sleeps: while it runs, `docker compose kill runner` and
#      `docker compose start runner`; the restarted runner (same worker id) takes its job
#      back at once (within 3 s; the lease is 30 s) and the flow finishes, every job once
#   4. a failing flow (error, one retry), a cancelled flow, API errors, context 100 (databases > 16)
#   5. Redis restarted (`docker compose stop redis`, `start redis`): flows, jobs and results are all still there (AOF),
#      and a new flow runs
#   6. Prometheus: every target up, job/flow metrics show the flows above, `promtool check
#      metrics` on every service's /metrics, every query of the Grafana dashboard returns the
#      series expected after those flows (its `by` labels; the outcomes, codes, statuses and
#      script types the flows above made; no OK among the errors)
#   7. the README's last line (`docker compose down`), then `docker compose down -v`
#
# Environment:
#   COMPOSE_PROJECT_NAME   default hero-compose-test (not the `hero` of a user's stack)
#   HERO_RUNNER_BASE       default hero-runtime-python:bookworm (made by offline-images.sh);
#                          set debian:bookworm-slim to test the apt path of the Dockerfile
#   COMPOSE_TEST_GOPROXY   the build's GOPROXY (docker-compose.yml's HERO_GOPROXY): default off
#                          (proves the build is offline); set it empty where the golang image
#                          is the official one
#   COMPOSE_TEST_OFFLINE_IMAGES  1 (default) runs scripts/offline-images.sh; 0 skips it
#   COMPOSE_TEST_KEEP=1    leave the stack running at the end (for debugging)
#   HERO_HTTP_PORT, HERO_GRPC_PORT, HERO_PROMETHEUS_PORT  host ports; when unset and the
#                          default (9652, 9653, 9090) is taken, a free one is used
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-hero-compose-test}
export HERO_RUNNER_BASE=${HERO_RUNNER_BASE:-hero-runtime-python:bookworm}
# The build: no module download (the golang image has them all), and the revision for
# heroctl version.
export HERO_GOPROXY=${COMPOSE_TEST_GOPROXY-off}
export HERO_REVISION=${HERO_REVISION:-$(git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)}
# The operator secret: the one the stack generates at its first start, read from it as
# the README says.
unset HERO_ADMIN_SECRET HERO_ADDR HERO_API_URL HERO_TLS_CA HERO_ACTOR HERO_CONTEXT HERO_OUTPUT HERO_KEY
SERVICES=(supervisor-daemon scheduler router runner mycelium-gateway)
declare -A ADMIN=([supervisor-daemon]=9660 [scheduler]=9661 [router]=9662 [runner]=9663 [mycelium-gateway]=9664)

START=$(date +%s)
WORK=$(mktemp -d)
# The README's lines run in this clone, with this HOME: heroctl's actor keys and the CA
# go to its ~/.config/hero, never the user's own.
CLONE=$WORK/clone
QS_HOME=$WORK/home
export HERO_CONFIG_DIR=$QS_HOME/.config/hero
DC=(docker compose -f "$CLONE/docker-compose.yml")
STACK_UP=

step() { printf '\n=== %s (%ss)\n' "$*" "$(( $(date +%s) - START ))"; }
say() { printf '  %s\n' "$*"; }
fail() { printf '\ncompose-test: FAIL: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ] && [ -n "$STACK_UP" ]; then
    echo; echo "=== compose-test failed (exit $rc): state and logs of the stack"
    "${DC[@]}" ps -a
    for s in redis mycelium "${SERVICES[@]}" prometheus; do
      echo "--- logs: $s (last 150 lines)"
      "${DC[@]}" logs --no-color --no-log-prefix --tail 150 "$s" 2>&1
    done
  fi
  if [ "${COMPOSE_TEST_KEEP:-0}" = 1 ]; then
    echo "compose-test: COMPOSE_TEST_KEEP=1: the stack $COMPOSE_PROJECT_NAME is still running; remove it with:"
    echo "  COMPOSE_PROJECT_NAME=$COMPOSE_PROJECT_NAME docker compose down -v"
  elif [ -n "$STACK_UP" ]; then
    echo; echo "=== docker compose down -v"
    "${DC[@]}" down -v --remove-orphans --timeout 20 2>&1 | tail -n 3
  fi
  rm -rf "$WORK"
  if [ "$rc" = 0 ]; then
    printf '\ncompose-test: PASS in %ss\n' "$(( $(date +%s) - START ))"
  else
    printf '\ncompose-test: FAILED after %ss\n' "$(( $(date +%s) - START ))" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS DESCRIPTION CMD...: runs CMD until it succeeds or the time is up.
wait_for() {
  local secs=$1 what=$2; shift 2
  local end=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || fail "timed out after ${secs}s: $what"
    sleep 0.5
  done
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# healthy SERVICE: its container's healthcheck says healthy.
healthy() { [ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$("${DC[@]}" ps -q "$1")")" = healthy ]; }
all_healthy() { local s; for s in redis mycelium "${SERVICES[@]}" prometheus; do healthy "$s" || return 1; done; }

# pick_port VAR DEFAULT: keeps VAR when set; otherwise DEFAULT, or a free port near it.
pick_port() {
  local var=$1 p=$2
  if [ -n "${!var:-}" ]; then
    port_busy "${!var}" && fail "$var=${!var}: that port is in use"
    return 0
  fi
  local try
  for try in "$p" $(( p + 10000 )) $(( p + 20000 )) $(( p + 30000 )); do
    if ! port_busy "$try"; then
      [ "$try" = "$p" ] || say "port $p is in use (another stack?): using $try ($var)"
      export "$var=$try"
      return 0
    fi
  done
  fail "no free port for $var near $p"
}

# ---------------------------------------------------------------- preflight
step "preflight"
command -v docker >/dev/null || fail "docker is not installed"

# The base images and, where missing, the compose v2 / buildx CLI plugins come first:
# a fresh machine has neither.
if [ "${COMPOSE_TEST_OFFLINE_IMAGES:-1}" = 1 ]; then
  step "scripts/offline-images.sh"
  if [ "$(id -u)" = 0 ]; then
    scripts/offline-images.sh
  else
    say "not root: skipped (the base images must already be there, or a registry reachable)"
  fi
fi
docker compose version >/dev/null 2>&1 || fail "the docker compose v2 plugin is missing (scripts/offline-images.sh builds it)"
for tool in jq curl openssl; do
  if ! command -v "$tool" >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing $tool (apt-get)"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
    else
      fail "$tool is missing: apt-get install $tool"
    fi
  fi
done
command -v go >/dev/null || fail "go is missing: it builds the Go client's example (sdk/go/example/producer)"
# The ports: heroctl and the SDKs follow HERO_HTTP_PORT and HERO_GRPC_PORT as the stack does.
pick_port HERO_HTTP_PORT 9652
pick_port HERO_GRPC_PORT 9653
pick_port HERO_PROMETHEUS_PORT 9090
PROM=http://127.0.0.1:$HERO_PROMETHEUS_PORT
say "project $COMPOSE_PROJECT_NAME; JSON-RPC :$HERO_HTTP_PORT, gRPC :$HERO_GRPC_PORT, Prometheus :$HERO_PROMETHEUS_PORT; runner base $HERO_RUNNER_BASE; GOPROXY ${HERO_GOPROXY:-(default)}; revision $HERO_REVISION"
# The README's block, and its last line: the stack's end, run at the end.
scripts/readme-block.sh compose > "$WORK/block.sh"
README_LAST=$(tail -n 1 "$WORK/block.sh")
case "$README_LAST" in "docker compose down"*) ;; *) fail "the README's compose quickstart should end with docker compose down, not: $README_LAST" ;; esac
head -n -1 "$WORK/block.sh" > "$WORK/lines.sh"
say "$(wc -l < "$WORK/block.sh") lines from README.md (quickstart:compose)"
say "fresh clone: $(scripts/fresh-clone.sh "$CLONE")"
mkdir -p "$QS_HOME"
"${DC[@]}" config -q
"${DC[@]}" --profile observability config -q
jq -e '.panels | length > 0' deploy/grafana/dashboards/hero.json >/dev/null || fail "deploy/grafana/dashboards/hero.json is not a dashboard"
docker compose version

# ---------------------------------------------------------------- the README's quickstart
step "the README's compose quickstart, line by line in the clone (bash -v prints each before it runs)"
STACK_UP=1
"${DC[@]}" down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true # leftovers of an interrupted run
untracked_before=$(git -C "$CLONE" status --porcelain --untracked-files=all | grep '^??' || true)
# The user's environment: this HOME (its ~/.config/hero), the docker CLI's own config.
if ! (cd "$CLONE" && env -u HERO_CONFIG_DIR -u XDG_CONFIG_HOME HOME="$QS_HOME" DOCKER_CONFIG="${DOCKER_CONFIG:-$HOME/.docker}" \
  bash -euo pipefail -v "$WORK/lines.sh") 2>&1 | tee "$WORK/readme.out" | sed 's/^/  | /'; then
  fail "a line of the README's compose quickstart failed (above)"
fi
"${DC[@]}" ps

step "what the README's lines made"
HEROCTL=$CLONE/bin/heroctl # the one the README copied out of the image
[ -x "$HEROCTL" ] || fail "no $HEROCTL after the README's lines"
[ -s "$QS_HOME/.config/hero/ca.pem" ] || fail "the README's lines did not write the CA to ~/.config/hero/ca.pem"
untracked_after=$(git -C "$CLONE" status --porcelain --untracked-files=all | grep '^??' || true)
[ "$untracked_before" = "$untracked_after" ] || fail "the README's lines left files in the repository: $(diff <(echo "$untracked_before") <(echo "$untracked_after") | grep '^>' | tr '\n' ' ')"
say "the CA is in ~/.config/hero/ca.pem, heroctl in bin/ (ignored); nothing new in the repository"
grep -qE '^script types +bash,python,sh$' "$WORK/readme.out" || fail "runner create did not show the script types the runner serves: $(grep '^script types' "$WORK/readme.out")"
say "runner create showed: $(grep '^script types' "$WORK/readme.out")"
version=$("$HEROCTL" version)
case "$version" in *"revision $HERO_REVISION "*) say "$version" ;; *) fail "the image's heroctl version says '$version', not the revision $HERO_REVISION" ;; esac

# rcli ARGS: redis-cli in the redis container as the `operator` ACL user.
rcli() {
  "${DC[@]}" exec -T redis sh -c 'redis-cli --no-auth-warning --user operator --pass "$(cat /pki/redis-password-operator)" "$@"' redis-cli "$@"
}

step "Redis: AOF on, 1024 databases, ACL users (no access without logging in)"
[ "$(rcli CONFIG GET appendonly | tail -n 1)" = yes ] || fail "Redis runs without appendonly"
[ "$(rcli CONFIG GET databases | tail -n 1)" = 1024 ] || fail "Redis does not have 1024 databases"
noauth=$("${DC[@]}" exec -T redis redis-cli ping 2>&1 || true)
grep -q NOAUTH <<<"$noauth" || fail "Redis answers without a password: $noauth"
users=$(rcli ACL USERS | tr '\n' ' ')
clients=$(rcli CLIENT LIST)
for u in supervisor-daemon scheduler router runner mycelium-gateway; do
  grep -qw "$u" <<<"$users" || fail "no Redis ACL user $u (users: $users)"
  grep -q "user=$u " <<<"$clients" || fail "no connection of the $u user: $(grep -o 'user=[^ ]*' <<<"$clients" | sort -u | tr '\n' ' ')"
done
say "appendonly yes, databases 1024; each service is connected as its own user: $users"

step "TLS: mutual TLS inside, TLS at the API"
"${DC[@]}" exec -T supervisor-daemon cat /pki/ca.pem > "$WORK/ca.pem"
export HERO_TLS_CA=$WORK/ca.pem
for s in supervisor-daemon scheduler router runner mycelium-gateway; do
  slog=$("${DC[@]}" logs --no-color "$s" 2>&1)
  if grep -q "without mutual TLS\|without TLS" <<<"$slog"; then
    fail "$s serves without TLS: $(grep "without" <<<"$slog" | head -n 1)"
  fi
done
if curl -fsS --max-time 5 "http://127.0.0.1:$HERO_HTTP_PORT/" -d '{}' >/dev/null 2>&1; then fail "the JSON-RPC API answers plaintext HTTP"; fi
curl -fsS --max-time 5 --cacert "$HERO_TLS_CA" "https://127.0.0.1:$HERO_HTTP_PORT/" \
  -d '{"jsonrpc":"2.0","id":1,"method":"rpc.discover"}' | jq -e '.result.openrpc' >/dev/null || fail "the JSON-RPC API does not answer over TLS"
say "every service has mutual TLS; the API answers https only (CA: \$HERO_TLS_CA)"

step "the operator secret"
HERO_ADMIN_SECRET=$("${DC[@]}" exec -T supervisor-daemon cat /home/hero/secrets/admin-secret) \
  || fail "no generated operator secret in supervisor-daemon's /home/hero/secrets/admin-secret"
export HERO_ADMIN_SECRET
case "$HERO_ADMIN_SECRET" in
  hero_????????????????????????*) ;;
  *) fail "the generated operator secret does not look generated (hero_ and at least 24 more characters)" ;;
esac
# The log read once: grep -q quits at its first match, and with pipefail the
# writer's SIGPIPE would fail the pipeline.
api_log=$("${DC[@]}" logs --no-color supervisor-daemon 2>&1)
if grep -qF "$HERO_ADMIN_SECRET" <<<"$api_log"; then
  fail "supervisor-daemon logged the operator secret it generated"
fi
grep -q "generated an operator secret" <<<"$api_log" \
  || fail "supervisor-daemon did not say that it generated the operator secret"
say "generated at the first start; read from the stack; not in the log"
if out=$(HERO_ADMIN_SECRET=hero-dev-secret-change-me "$HEROCTL" secret list 2>&1); then
  fail "the API accepts the old well-known operator secret hero-dev-secret-change-me"
fi
grep -qiE 'authenticat|secret' <<<"$out" || fail "heroctl with the old well-known secret failed for another reason: $out"
say "the old well-known secret hero-dev-secret-change-me is refused"

hc() { "$HEROCTL" "$@"; }
hj() { "$HEROCTL" -o json "$@"; }

step "heroctl (host, 127.0.0.1:\$HERO_GRPC_PORT): actor 1, context 1, runner 1 as the README made them"
export HERO_ACTOR=1 HERO_CONTEXT=1
hj actor get 1 | jq -e '.id == 1 and (.pubkey | length) == 64' >/dev/null || fail "actor 1: $(hj actor get 1)"
hj runner get 1 | jq -e '.script_types | index("sh") != null' >/dev/null || fail "runner 1: $(hj runner get 1)"
# heroctl in a service image, with the operator secret the container has (its file, or
# HERO_ADMIN_SECRET when the caller set one)
"${DC[@]}" exec -T supervisor-daemon heroctl -o json actor get 1 | jq -e '.id == 1' >/dev/null \
  || fail "docker compose exec supervisor-daemon heroctl actor get 1 failed"
say "docker compose exec supervisor-daemon heroctl works"

# flow_submit FILE: starts the flow of FILE and prints its id; the job ids go to $WORK/jobs.<flow>.
flow_submit() {
  local out
  out=$(hj flow submit "$1") || fail "flow submit $1"
  jq -r '.jobs | map(tostring) | join(" ")' <<<"$out" > "$WORK/jobs.$(jq -r .id <<<"$out")"
  jq -r .id <<<"$out"
}
flow_watch() { # FLOW [SECONDS]: returns heroctl flow watch's exit code
  local rc=0
  timeout "${2:-120}" "$HEROCTL" flow watch "$1" > "$WORK/watch.$1" 2>&1 || rc=$?
  sed 's/^/    /' "$WORK/watch.$1" | tail -n 8
  return "$rc"
}
job_status() { hj job get "$1" | jq -r .status; }
job_is() { [ "$(job_status "$1")" = "$2" ]; } # JOB STATUS
rpc() { # METHOD PARAMS: prints the response; signed as actor 1 with OpenSSL, as docs/api.md shows
  local body ts nonce sig
  body='{"jsonrpc":"2.0","id":1,"method":"'"$1"'","params":'"$2"'}'
  ts=$(date +%s); nonce=$(openssl rand -hex 16)
  printf 'HERO-ED25519-V1\n1\nPOST /\n%s\n%s\n%s' "$ts" "$nonce" "$(printf '%s' "$body" | sha256sum | cut -d' ' -f1)" > "$WORK/canonical"
  sig=$(openssl pkeyutl -sign -rawin -inkey "$HERO_CONFIG_DIR/keys/actor-1.pem" -in "$WORK/canonical" | od -An -tx1 | tr -d ' \n')
  curl -fsS --cacert "$HERO_TLS_CA" "https://127.0.0.1:$HERO_HTTP_PORT/" -H 'X-Hero-Actor: 1' -H "X-Hero-Timestamp: $ts" \
    -H "X-Hero-Nonce: $nonce" -H "X-Hero-Signature: $sig" -d "$body"
}

# flow_jobs FLOW: the flow's job ids into $WORK/jobs.<flow>
flow_jobs() { hj flow get "$1" | jq -r '.jobs | map(tostring) | join(" ")' > "$WORK/jobs.$1"; }

step "examples/diamond.yaml: the README's flow 1"
DIAMOND=1
flow_jobs "$DIAMOND"
[ "$(wc -w < "$WORK/jobs.$DIAMOND")" = 4 ] || fail "flow 1 is not the diamond of four jobs: jobs $(cat "$WORK/jobs.$DIAMOND")"
hj flow get "$DIAMOND" > "$WORK/diamond.json"
jq -e '.status == "finished" and .result["4.TOTAL"] == "483"' "$WORK/diamond.json" >/dev/null \
  || fail "flow $DIAMOND: $(jq -c '{status, result}' "$WORK/diamond.json")"
rpc flow.load '{"context_id":1,"id":'"$DIAMOND"'}' | jq -e '.result.result["4.TOTAL"] == "483"' >/dev/null \
  || fail "JSON-RPC flow.load $DIAMOND: no 4.TOTAL"
say "flow $DIAMOND finished: 4.TOTAL=483 (heroctl and JSON-RPC on :$HERO_HTTP_PORT)"
RAN_EXAMPLES=(diamond.yaml)

step "examples/handlers.yaml, the README's flow 2: handler jobs on the runner's example executors python and mailer"
HANDLERS=2
flow_jobs "$HANDLERS"
read -r J_MEASURE J_ENRICH J_NOTIFY J_REPORT < "$WORK/jobs.$HANDLERS"
hj flow get "$HANDLERS" | jq -e '.status == "finished"' >/dev/null || fail "flow $HANDLERS (handlers): $(hj flow get "$HANDLERS" | jq -c '{status, error}')"
for j in "$J_ENRICH" "$J_NOTIFY"; do
  hj job get "$j" | jq -e '.status == "finished"' >/dev/null || fail "handler job $j: $(hj job get "$j" | jq -c '{status, error}')"
done
hc job logs "$J_REPORT" | grep -q 'handler saw SIZE=42 bytes' || fail "job $J_REPORT did not read the handler's result: $(hc job logs "$J_REPORT")"
hc job logs "$J_REPORT" | grep -q 'mailed ops@example.com: disk report' || fail "job $J_REPORT did not read the mailer's result: $(hc job logs "$J_REPORT")"
RAN_EXAMPLES+=(handlers.yaml)
say "flow $HANDLERS finished: python#echo (job $J_ENRICH) after job $J_MEASURE, mailer#send_email without a script type (job $J_NOTIFY), and job $J_REPORT read both results"

step "the Python producer SDK's example (sdk/python/examples/producer_example.py), signed as actor 1"
PY=
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import cryptography' 2>/dev/null; then PY=$p; break; fi
done
if [ -z "$PY" ]; then
  scripts/deps.sh python3-cryptography
  PY=/usr/bin/python3
fi
# no HERO_API_URL: the SDK follows HERO_HTTP_PORT, as the stack's published port does
"$PY" sdk/python/examples/producer_example.py > "$WORK/sdk.out" 2>&1 \
  || { sed 's/^/    /' "$WORK/sdk.out"; fail "the Python SDK example failed against the stack"; }
grep -q 'producer example: ok' "$WORK/sdk.out" || fail "the Python SDK example did not finish: $(tail -n 3 "$WORK/sdk.out")"
say "$(grep -c '^event ' "$WORK/sdk.out") events watched; $(grep 'TOTAL=' "$WORK/sdk.out")"

step "the Go client's example (sdk/go/example/producer), signed as actor 1 (no operator secret)"
go build -o "$WORK/producer" ./sdk/go/example/producer || fail "go build ./sdk/go/example/producer"
env -u HERO_ADMIN_SECRET "$WORK/producer" > "$WORK/go-sdk.out" 2>&1 \
  || { sed 's/^/    /' "$WORK/go-sdk.out"; fail "the Go client's example failed against the stack"; }
for want in '^run: job [0-9]* finished: hello from Go$' '^wait: job [0-9]* finished: submitted from Go$' \
  '^watch: flow [0-9]* finished$' '^wait: flow [0-9]* finished$' '^errors: job 4000000000 is not found'; do
  grep -q "$want" "$WORK/go-sdk.out" || { sed 's/^/    /' "$WORK/go-sdk.out"; fail "the Go client's example did not print $want"; }
done
say "$(grep '^wait: flow' "$WORK/go-sdk.out"): run, submit, watch and wait, signed with actor 1's key"

# prom_query EXPR: the instant query's data.result (JSON), or nothing.
prom_query() { curl -fsS --max-time 5 -G "$PROM/api/v1/query" --data-urlencode "query=$1" | jq -c '.data.result'; }
# prom_at_least EXPR N: the query has one sample >= N.
prom_at_least() { prom_query "$1" | jq -e --argjson n "$2" 'length > 0 and (.[0].value[1] | tonumber) >= $n' >/dev/null; }
wait_for 60 "Prometheus shows the diamond's jobs: sum(hero_jobs_finished_total) >= 4" \
  prom_at_least 'sum(hero_jobs_finished_total)' 4
say "Prometheus: sum(hero_jobs_finished_total) >= 4"

step "runner killed and started while a job runs"
cat > "$WORK/sleeper.yaml" <<'EOF'
# three jobs; the middle one sleeps 8 s: the runner is killed while it runs
jobs:
  - {name: first, type: sh, script: 'echo "STEP=1" >> "$HERO_RESULT_FILE"'}
  - {name: sleeper, type: sh, depends: [first], script: 'echo sleeping; sleep 8; echo "SLEPT=8" >> "$HERO_RESULT_FILE"'}
  - {name: last, type: python, depends: [sleeper], script: 'print("after the sleeper")'}
EOF
SLEEPY=$(flow_submit "$WORK/sleeper.yaml")
read -r J_FIRST J_SLEEPER J_LAST < "$WORK/jobs.$SLEEPY"
wait_for 60 "job $J_SLEEPER (sleeper) started" job_is "$J_SLEEPER" started
sleep 1
"${DC[@]}" kill runner
[ "$(docker inspect -f '{{.State.Running}}' "$("${DC[@]}" ps -aq runner)")" = false ] || fail "the runner still runs after docker compose kill"
[ "$(job_status "$J_SLEEPER")" = started ] || fail "job $J_SLEEPER is $(job_status "$J_SLEEPER") after the kill: it should still be started"
say "runner killed while job $J_SLEEPER ran"
restart_ms=$(date +%s%3N)
"${DC[@]}" start runner
wait_for 60 "runner healthy again" healthy runner
flow_watch "$SLEEPY" 90 || fail "flow $SLEEPY did not finish after the runner restart"
hj events --flow "$SLEEPY" --limit 1000 | jq -s '[.[] | if type == "object" and has("events") then .events[] else . end]' > "$WORK/events.json"
for j in $J_FIRST $J_SLEEPER $J_LAST; do
  [ "$(job_status "$j")" = finished ] || fail "job $j is $(job_status "$j")"
  n=$(jq --argjson j "$j" '[.[] | select(.job_id == $j and .type == "job.finished")] | length' "$WORK/events.json")
  [ "$n" = 1 ] || fail "job $j has $n job.finished events (want 1)"
done
starts=$(jq --argjson j "$J_SLEEPER" '[.[] | select(.job_id == $j and .type == "job.started")] | length' "$WORK/events.json")
[ "$starts" -ge 2 ] || fail "job $J_SLEEPER was started $starts time(s): the kill did not interrupt it"
restarted_ms=$(jq -r --argjson j "$J_SLEEPER" '[.[] | select(.job_id == $j and .type == "job.started")] | last | .time_ms' "$WORK/events.json")
takeover=$(( restarted_ms - restart_ms ))
# Under its fixed worker id the restarted runner takes its jobs back at once, not when
# their lease (30 s) ends: within half the lease of `docker compose start`, which itself
# waits for the pki and Redis dependencies (3 s on a loaded machine); the log line below
# says it was a takeover.
[ "$takeover" -lt 15000 ] || fail "the restarted runner took ${takeover} ms to run job $J_SLEEPER again (want < 15000: a takeover, not the lease's expiry)"
"${DC[@]}" logs --no-color --no-log-prefix runner > "$WORK/runner.log" 2>&1
grep -q 'took back jobs held before a restart' "$WORK/runner.log" \
  || fail "the runner's log does not say that it took back its jobs"
hj flow get "$SLEEPY" | jq -e '.status == "finished" and .result["'"$J_SLEEPER"'.SLEPT"] == "8"' >/dev/null \
  || fail "flow $SLEEPY has not the sleeper's result"
say "flow $SLEEPY finished; every job finished once; job $J_SLEEPER ran again ${takeover} ms after docker compose start"

step "the job sandbox: a job reaches neither the runner's files nor Redis"
# grep -c reads to the end: with pipefail, grep -q's early exit could fail the logs
# command (SIGPIPE) when the line comes early in a long log.
[ "$("${DC[@]}" logs --no-color runner 2>&1 | grep -c '"message":"jobs run sandboxed"')" -gt 0 ] || fail "the runner does not say its jobs run sandboxed"
probe='cat /pki/redis-password-runner 2>/dev/null && echo LEAK-pki
ls /home/hero/state 2>/dev/null && echo LEAK-state
(exec 3<>/dev/tcp/redis/6379) 2>/dev/null && echo LEAK-redis
getent hosts redis >/dev/null 2>&1 && echo LEAK-dns
echo "env=$(env | cut -d= -f1 | sort | tr "\n" ,)"; true'
out=$(timeout 60 "$HEROCTL" -o json job run --type sh --script "$probe") || fail "the sandbox probe job did not run"
seen=$(jq -r .result.output <<<"$out")
if grep -q LEAK <<<"$seen"; then fail "a job reached what the sandbox should hide: $seen"; fi
grep -q '^env=HERO_ATTEMPT,' <<<"$seen" || fail "the probe job's environment: $seen"
say "a job sees no /pki, no runner state, no Redis, no names; its environment: $(grep '^env=' <<<"$seen" | cut -c1-80)…"

step "a failing flow, context 100"
cat > "$WORK/failing.yaml" <<'EOF'
jobs:
  - {name: ok, type: sh, script: 'echo fine'}
  - {name: broken, type: sh, depends: [ok], retries: 1, script: 'echo "failing on purpose" >&2; exit 3'}
EOF
FAILING=$(flow_submit "$WORK/failing.yaml")
rc=0; flow_watch "$FAILING" || rc=$?
[ "$rc" = 1 ] || fail "heroctl flow watch of the failing flow $FAILING exited $rc (want 1)"
hj flow get "$FAILING" | jq -e '.status == "error"' >/dev/null || fail "flow $FAILING is not in error"
say "flow $FAILING ended in error (after one retry), heroctl flow watch exited 1"
cat > "$WORK/cancel.yaml" <<'EOF'
jobs:
  - {name: long, type: sh, script: 'echo started; sleep 60'}
  - {name: after, type: sh, depends: [long], script: 'echo never'}
EOF
CANCELLED=$(flow_submit "$WORK/cancel.yaml")
read -r J_LONG J_AFTER < "$WORK/jobs.$CANCELLED"
wait_for 60 "job $J_LONG (long) started" job_is "$J_LONG" started
hc flow cancel "$CANCELLED" >/dev/null || fail "heroctl flow cancel $CANCELLED"
rc=0; flow_watch "$CANCELLED" 60 || rc=$?
[ "$rc" = 1 ] || fail "heroctl flow watch of the cancelled flow $CANCELLED exited $rc (want 1)"
hj job get "$J_AFTER" | jq -e '.status == "error" and ((.started_at // 0) | tonumber) == 0' >/dev/null || fail "job $J_AFTER of the cancelled flow: $(hj job get "$J_AFTER" | jq -c '{status, error, started_at}')"
say "flow $CANCELLED cancelled while job $J_LONG ran: job $J_AFTER never started"
hc context create 100 --admins 1 >/dev/null
hc --context 100 runner create 1 >/dev/null
out=$(timeout 60 "$HEROCTL" --context 100 job run --type python --script 'print(6*7)') || fail "job run in context 100"
[ "$(tr -d '[:space:]' <<<"$out")" = 42 ] || fail "job in context 100 printed '$out'"
say "context 100 (Redis database 100) runs jobs"

step "Redis restarted (docker compose stop, start): everything is still there"
snapshot() { # the flows, jobs and results of context 1, one line each
  hj flow list | jq -S -c '(.items // .flows) | sort_by(.id) | .[] | {flow: .id, status, jobs, result, error}'
  local f j ids
  for f in "$DIAMOND" "$HANDLERS" "$SLEEPY" "$FAILING" "$CANCELLED"; do
    read -ra ids < "$WORK/jobs.$f"
    for j in "${ids[@]}"; do hj job get "$j" | jq -S -c '{job: .id, status, result, exit_code, attempt, error}'; done
  done
}
snapshot > "$WORK/before.json"
# stop, then start: `docker restart` fails half the time on this machine's Docker 20.10
# with fuse-overlayfs ('exec: "docker-entrypoint.sh": executable file not found in $PATH':
# the container's root is not mounted back in time), for any image; stop and start do not.
"${DC[@]}" stop redis
"${DC[@]}" start redis
wait_for 60 "redis healthy again" healthy redis
wait_for 60 "flow list answers after the Redis restart" "$HEROCTL" flow list
snapshot > "$WORK/after.json"
if ! diff -u "$WORK/before.json" "$WORK/after.json"; then fail "flows/jobs/results changed across the Redis restart"; fi
say "$(grep -c '"flow":' "$WORK/after.json") flows and $(grep -c '"job":' "$WORK/after.json") jobs (status, results) identical after the restart"
grep -q '^aof_enabled:1' <<<"$(rcli INFO persistence)" || fail "AOF is off after the restart"
wait_for 60 "all services healthy after the Redis restart" all_healthy
CHAIN=$(flow_submit examples/chain.yaml)
flow_watch "$CHAIN" 60 || fail "flow $CHAIN (examples/chain.yaml) after the Redis restart did not finish"
say "flow $CHAIN (examples/chain.yaml) finished after the Redis restart"
RAN_EXAMPLES+=(chain.yaml)

# API calls, also failing ones, just before Prometheus is read: the dashboard's rates look at
# the last minutes (hero_api_* counts JSON-RPC calls; flow.load was called before, so that its
# series exist and the rate sees these calls).
step "JSON-RPC API on :$HERO_HTTP_PORT, API errors"
for f in "$DIAMOND" "$HANDLERS" "$SLEEPY" "$FAILING" "$CANCELLED" "$CHAIN"; do
  rpc flow.load '{"context_id":1,"id":'"$f"'}' | jq -e '.result.id == '"$f"'' >/dev/null || fail "JSON-RPC flow.load $f"
done
rpc job.load '{"context_id":1,"caller_id":1,"id":1}' | jq -e '.result.status == "finished"' >/dev/null || fail "JSON-RPC job.load 1"
rpc flow.load '{"context_id":1,"id":999999}' | jq -e '.error.code == -32004' >/dev/null \
  || fail "JSON-RPC flow.load of a missing flow did not answer -32004"
hj job get 999999 >/dev/null 2>&1 && fail "heroctl job get 999999 should fail"
say "flow.load, job.load answer; a missing flow is -32004 (JSON-RPC) and NotFound (gRPC)"

for s in redis mycelium "${SERVICES[@]}" prometheus; do
  n=$(docker inspect -f '{{.RestartCount}}' "$("${DC[@]}" ps -aq "$s")")
  [ "$n" = 0 ] || say "WARNING: $s was restarted $n time(s) by its restart policy (crashed?)"
done

step "Prometheus: targets and job metrics"
targets=$(curl -fsS "$PROM/api/v1/targets")
for s in "${SERVICES[@]}" prometheus; do
  h=$(jq -r --arg j "$s" '[.data.activeTargets[] | select(.labels.job == $j) | .health] | join(",")' <<<"$targets")
  [ "$h" = up ] || fail "Prometheus target $s: health '${h:-missing}' $(jq -c --arg j "$s" '.data.activeTargets[] | select(.labels.job == $j) | .lastError' <<<"$targets")"
done
say "every target up: ${SERVICES[*]} prometheus"
check_metric() { # EXPR N: waits (scrapes are 5 s apart) until EXPR >= N
  local end=$(( $(date +%s) + 60 ))
  until prom_at_least "$1" "$2"; do
    [ "$(date +%s)" -lt "$end" ] || fail "Prometheus: $1 is $(prom_query "$1" | jq -r '.[0].value[1] // "empty"'), want >= $2"
    sleep 1
  done
  say "$1 = $(prom_query "$1" | jq -r '.[0].value[1]') (>= $2)"
}
# the runner was restarted: its counters count from then on (chain 5, sleeper 2, ok 1, context 100 1).
# The runner applies the successful ends itself (--apply-ends): the flow and job ends
# it applied before its restart are not in its counters any more, and the router only
# carries what a runner leaves it (the failing and the cancelled flow's ends).
check_metric 'sum(hero_jobs_finished_total)' 5
check_metric 'sum(hero_jobs_started_total)' 5
check_metric 'sum(hero_jobs_failed_total{reason="exit_code"})' 2
check_metric 'sum(hero_flows_started_total)' 4
check_metric 'sum(hero_flows_ended_total{status="finished"})' 1
check_metric 'sum(hero_flows_ended_total{status="error"})' 1
check_metric 'sum(hero_job_ends_total{outcome="completed"})' 5
check_metric 'sum(hero_jobs_dispatched_total)' 5
check_metric 'sum(hero_jobs_retried_total)' 1
check_metric 'sum(hero_router_messages_total)' 3
check_metric 'sum(hero_api_requests_total{transport="jsonrpc"})' 7
check_metric 'sum(hero_api_requests_total{code!="OK"})' 1
check_metric 'sum(hero_api_requests_total{code="NotFound"})' 2
check_metric 'sum(hero_job_ends_total{outcome="cancelled"})' 1
check_metric 'sum(hero_flows_cancelled_total)' 1
check_metric 'sum(hero_grpc_server_handled_total{job="supervisor-daemon"})' 20

step "promtool check metrics on each service's /metrics, promtool check config"
"${DC[@]}" exec -T prometheus promtool check config /etc/prometheus/prometheus.yml
lint_failed=
for s in "${SERVICES[@]}"; do
  "${DC[@]}" exec -T prometheus wget -q -O - "http://$s:${ADMIN[$s]}/metrics" > "$WORK/metrics.$s" \
    || fail "cannot read http://$s:${ADMIN[$s]}/metrics"
  n=$(grep -c '^hero_\|^go_\|^process_' "$WORK/metrics.$s" || true)
  [ "$n" -gt 0 ] || fail "$s /metrics has no samples"
  if out=$("${DC[@]}" exec -T prometheus promtool check metrics < "$WORK/metrics.$s" 2>&1); then
    say "$s: ok ($n samples, $(grep -c '^hero_' "$WORK/metrics.$s" || true) hero_*)"
  else
    lint_failed=1
    echo "  $s: promtool check metrics FAILED:"; while IFS= read -r l; do echo "    $l"; done <<<"$out"
  fi
done
[ -z "$lint_failed" ] || fail "promtool check metrics found problems (above)"

step "every query of deploy/grafana/dashboards/hero.json returns the expected series"
# $__rate_interval and $__interval become 10m (the flows above ran minutes before on a slow
# machine: a 1m window then holds no increase), $__range 1h. A query passes when Prometheus
# answers it with at least one series with a number (not NaN: a quantile over no runs),
# every series carries the labels of the query's `by (…)` (less `le`), and, for the panels
# below, the series show what the flows above made.
jq -r '[.. | objects | select(has("expr")) | .expr] | unique | .[]' deploy/grafana/dashboards/hero.json > "$WORK/queries"
nq=$(wc -l < "$WORK/queries")
[ "$nq" -gt 10 ] || fail "the dashboard has only $nq queries"
# EXPECT: a fragment that names one dashboard query, and a jq test of its data.result.
# has_all(L; V): some series has label L = each of the values V.
# failures_only: every series' code is a gRPC code's name other than OK (one spelling on
# both transports: a JSON-RPC "ok" would be counted as an error by these panels).
JQ_DEFS='def has_all($l; $v): [.[] | .metric[$l]] as $seen | all($v[]; . as $x | $seen | index($x) != null);
def failures_only: (map(.metric.code) - ["Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
  "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
  "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"]) == [];'
declare -A EXPECT=(
  ['hero_api_requests_total{code!="OK"}']='failures_only and has_all("code"; ["NotFound"])'
  ['hero_grpc_server_handled_total{code!="OK"}']='failures_only and has_all("code"; ["NotFound"])'
  ['sum by (outcome) (rate(hero_job_ends_total']='has_all("outcome"; ["completed", "failed", "retry", "cancelled"])'
  ['sum by (status) (rate(hero_flows_ended_total']='has_all("status"; ["finished", "error"])'
  ['sum by (script_type) (rate(hero_jobs_started_total']='has_all("script_type"; ["sh", "python"])'
  ['sum by (script_type, reason) (rate(hero_jobs_failed_total']='has_all("reason"; ["exit_code"])'
  ['sum by (transport, method) (rate(hero_api_requests_total']='has_all("transport"; ["jsonrpc", "grpc"])'
)
for frag in "${!EXPECT[@]}"; do
  n=$(grep -cF -- "$frag" "$WORK/queries" || true)
  [ "$n" = 1 ] || fail "compose-test expects one dashboard query with '$frag', the dashboard has $n: update EXPECT"
done
# dash_check EXPR: empty output when the query returns what it should, else why not.
dash_check() {
  local q=${1//\$__rate_interval/10m} by test=true frag
  q=${q//\$__interval/10m}; q=${q//\$__range/1h}; q=${q//\$\{__range\}/1h}
  by=$(grep -o 'by ([^)]*)' <<<"$1" | head -n 1 | sed 's/^by (//; s/)$//' | tr -d ' ' | tr ',' '\n' | grep -vx le | jq -R . | jq -sc .)
  for frag in "${!EXPECT[@]}"; do
    if grep -qF -- "$frag" <<<"$1"; then test=${EXPECT[$frag]}; fi
  done
  curl -fsS --max-time 5 -G "$PROM/api/v1/query" --data-urlencode "query=$q" | jq -r --argjson by "$by" --arg test "$test" "$JQ_DEFS
    if .status != \"success\" then \"query failed\"
    else [.data.result[] | select(.value[1] != \"NaN\")] as \$r
      | if (\$r | length) == 0 then \"no data\"
        elif ([\$r[] | .metric as \$m | \$by[] | select((\$m[.] // \"\") == \"\")] | length) > 0 then \"series without the labels \(\$by): \([\$r[].metric] | tojson)\"
        elif (\$r | $test | not) then \"not the expected series (\(\$test)): \([\$r[].metric] | tojson)\"
        else empty end
    end"
}
end=$(( $(date +%s) + 45 ))
while :; do
  problems=()
  while IFS= read -r q; do
    why=$(dash_check "$q" 2>&1) || why="query failed: $why"
    [ -z "$why" ] || problems+=("$q: $why")
  done < "$WORK/queries"
  [ ${#problems[@]} -eq 0 ] && break
  if [ "$(date +%s)" -ge "$end" ]; then
    printf '  %s\n' "${problems[@]}"
    fail "${#problems[@]} of $nq dashboard queries do not return the expected series"
  fi
  sleep 2
done
say "all $nq dashboard queries return the expected series (${#EXPECT[@]} of them checked for their values)"

step "every example meant for this stack ran"
for f in examples/*.yaml; do
  name=$(basename "$f")
  case " ${RAN_EXAMPLES[*]} " in *" $name "*) continue ;; esac
  # the others say in their first lines which setup they need instead
  head -n 5 "$f" | grep -q '^# Setup: TWO nodes' && continue
  fail "$f is not run by compose-test: run it here, or say in its header (# Setup: …) that it needs another setup and skip it here"
done
say "ran ${RAN_EXAMPLES[*]}; examples/two-nodes.yaml is make compose-two-nodes-test's"

if [ "${COMPOSE_TEST_KEEP:-0}" != 1 ]; then
  step "the README's last line: $README_LAST"
  if ! (cd "$CLONE" && env -u HERO_CONFIG_DIR HOME="$QS_HOME" DOCKER_CONFIG="${DOCKER_CONFIG:-$HOME/.docker}" \
    bash -euo pipefail -v -c "$README_LAST") 2>&1 | sed 's/^/  | /'; then
    fail "$README_LAST failed"
  fi
  left=$("${DC[@]}" ps -q)
  [ -z "$left" ] || fail "containers still run after $README_LAST: $left"
  say "no container of the stack is left (its volumes are: down -v below)"
fi
