#!/usr/bin/env bash
# Runs the Hero coordinator's services as local processes on 127.0.0.1, without
# Docker: the services docker-compose.yml runs (supervisor-daemon, scheduler, router,
# runner, mycelium-gateway with a Mycelium node) next to Redis. State (pids, logs, Redis
# data, the operator secret) goes to $STATE_DIR (default .local-stack/ in the repository).
#
#   scripts/local-stack.sh up       start (building bin/ if needed, with its progress) and wait until ready
#   scripts/local-stack.sh status   print each endpoint and whether it is ready
#   scripts/local-stack.sh down     stop exactly the processes `up` started
#
# The API: JSON-RPC on 127.0.0.1:$HERO_HTTP_PORT (9652), gRPC on 127.0.0.1:$HERO_GRPC_PORT
# (9653), the variables that move docker-compose.yml's published ports, and that heroctl
# and the SDKs follow.
# Mycelium: $MYCELIUM_URL, a Mycelium node's HTTP API, when set; otherwise the node
# emulator of lib/testutil/myceliumemu (a test fixture: its node reaches no other) on
# 127.0.0.1:8989, as in docker-compose.yml.
#
# Redis: $REDIS_URL when set; otherwise a redis-server of its own on 127.0.0.1:6379,
# with the ACL users of $STATE_DIR/pki (each service its own user; no access without logging in).
# TLS: `heroctl pki init` makes $STATE_DIR/pki (kept across runs): mutual TLS between
# the services, TLS at the API (export HERO_TLS_CA=$STATE_DIR/pki/ca.pem), and the
# operator secrets' HMAC key (operator-secret-key: kept out of Redis).
# The operator secret: $HERO_ADMIN_SECRET when set; otherwise the one supervisor-daemon
# generates at its first start into $STATE_DIR/admin-secret (--admin-secret-file).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
STATE_DIR=${STATE_DIR:-$ROOT/.local-stack}
BIN=${BIN:-$ROOT/bin}
# In start order: the gateway's router and the router's gateway find each other later.
SERVICES=(scheduler mycelium-gateway router runner supervisor-daemon)
HTTP_PORT=${HERO_HTTP_PORT:-9652}
EMULATOR_ADDR=127.0.0.1:8989

declare -A GRPC=([supervisor-daemon]=${HERO_GRPC_PORT:-9653} [scheduler]=9654 [router]=9655 [runner]=9656 [mycelium-gateway]=9657)
declare -A ADMIN=([supervisor-daemon]=9660 [scheduler]=9661 [router]=9662 [runner]=9663 [mycelium-gateway]=9664)

die() { echo "local-stack: $*" >&2; exit 1; }

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# set_args fills ARGS with a service's flags: mutual TLS with its certificate of
# $PKI, and, on the Redis this script runs, its own ACL user.
set_args() {
  local s=$1
  ARGS=(--grpc-addr "127.0.0.1:${GRPC[$s]}" --admin-addr "127.0.0.1:${ADMIN[$s]}"
        --tls-ca "$PKI/ca.pem" --tls-cert "$PKI/$s.pem" --tls-key "$PKI/$s-key.pem")
  if [ -n "$OWN_REDIS" ]; then
    ARGS+=(--redis-url "redis://$s@127.0.0.1:6379/0" --redis-password-file "$PKI/redis-password-$s")
  fi
  case $s in
    supervisor-daemon) ARGS+=(--http-addr "127.0.0.1:$HTTP_PORT" --scheduler-addr 127.0.0.1:9654 --dispatcher-log-dir "$STATE_DIR/dispatcher-logs"
                              --admin-secret-file "$STATE_DIR/admin-secret" --api-tls-cert "$PKI/api.pem" --api-tls-key "$PKI/api-key.pem"
                              --operator-secret-key-file "$PKI/operator-secret-key") ;;
    router) ARGS+=(--scheduler-addr 127.0.0.1:9654 --router-id local-router --gateway-addr 127.0.0.1:9657) ;;
    mycelium-gateway) ARGS+=(--router-addr 127.0.0.1:9655 --mycelium-url "${MYCELIUM_URL:-http://$EMULATOR_ADDR}") ;;
    runner) ARGS+=(--runner-id 1 --contexts '*' --worker-id local-runner
                   --executors "python;cmd=python3 -u $ROOT/sdk/python/examples/example_executor.py;size=2;ro=$ROOT/sdk/python|mailer;cmd=python3 -u $ROOT/sdk/python/examples/mailer_executor.py;ro=$ROOT/sdk/python"
                   --dispatcher-workers 'local=/bin/sh' --dispatcher-log-dir "$STATE_DIR/dispatcher-logs") ;;
  esac
}

# build makes bin/ (make build) and the Mycelium node emulator, printing each binary
# with the time since the start, and every 15 s while one compiles: a first build
# compiles every package (minutes).
build() {
  local t0
  t0=$(date +%s)
  echo "local-stack: building bin/ (make build: a first build compiles every package, some minutes; later ones seconds)"
  if ! { make --no-print-directory build 2>&1 &&
         echo "build bin/mycelium-emulator (the Mycelium node emulator)" &&
         CGO_ENABLED=0 go build -trimpath -o "$BIN/mycelium-emulator" ./lib/testutil/myceliumemu/cmd/mycelium-emulator 2>&1; } |
       progress "$t0"; then
    die "the build failed (above)"
  fi
  echo "local-stack: built in $(( $(date +%s) - t0 ))s"
}

# progress T0: prints each line of its input with the seconds since T0, and a line
# every 15 s that none comes.
progress() {
  local line rc last=
  while :; do
    if IFS= read -r -t 15 line; then
      last=$line
      printf 'local-stack: [%4ss] %s\n' "$(( $(date +%s) - $1 ))" "$line"
    else
      rc=$?
      [ "$rc" -gt 128 ] || return 0 # end of input (a timeout is > 128)
      printf 'local-stack: [%4ss]   … still at: %s\n' "$(( $(date +%s) - $1 ))" "$last"
    fi
  done
}

# start_emulator runs the Mycelium node emulator on $EMULATOR_ADDR (unless MYCELIUM_URL
# names a node) and waits until it answers.
start_emulator() {
  [ -z "${MYCELIUM_URL:-}" ] || return 0
  pid_alive "$STATE_DIR/mycelium-emulator.pid" && return 0
  port_busy "${EMULATOR_ADDR##*:}" && die "$EMULATOR_ADDR (the Mycelium node emulator) is in use by another program; set MYCELIUM_URL to use that node"
  nohup "$BIN/mycelium-emulator" --nodes "node1=$EMULATOR_ADDR" >>"$STATE_DIR/mycelium-emulator.log" 2>&1 &
  echo $! > "$STATE_DIR/mycelium-emulator.pid"
  for _ in $(seq 1 100); do port_busy "${EMULATOR_ADDR##*:}" && return 0; sleep 0.05; done
  die "the Mycelium node emulator did not start; see $STATE_DIR/mycelium-emulator.log"
}

up() {
  mkdir -p "$STATE_DIR" "$STATE_DIR/dispatcher-logs"
  for s in "${SERVICES[@]}"; do
    pid_alive "$STATE_DIR/$s.pid" && die "$s is already running (pid $(cat "$STATE_DIR/$s.pid")); run: $0 down"
  done
  if [ ! -x "$BIN/supervisor-daemon" ] || [ ! -x "$BIN/heroctl" ] || [ ! -x "$BIN/mycelium-gateway" ] || [ ! -x "$BIN/mycelium-emulator" ]; then
    build
  fi
  # The deployment's certificates and Redis users (kept across runs).
  PKI=$STATE_DIR/pki
  "$BIN/heroctl" pki init --dir "$PKI" >/dev/null || die "heroctl pki init failed"
  OWN_REDIS=
  if [ -z "${REDIS_URL:-}" ]; then
    OWN_REDIS=1
    if pid_alive "$STATE_DIR/redis.pid"; then :; else
      command -v redis-server >/dev/null || die "redis-server is not installed (apt-get install redis-server), or set REDIS_URL"
      port_busy 6379 && die "127.0.0.1:6379 is taken by another program; set REDIS_URL to use that Redis (e.g. REDIS_URL=redis://127.0.0.1:6379/0)"
      mkdir -p "$STATE_DIR/redis"
      redis-server --bind 127.0.0.1 --port 6379 --dir "$STATE_DIR/redis" --appendonly yes --databases 1024 --zset-max-listpack-entries 8 --rdbcompression no \
        --aclfile "$PKI/redis-users.acl" --daemonize yes --pidfile "$STATE_DIR/redis.pid" --logfile "$STATE_DIR/redis.log" >/dev/null
      for _ in $(seq 1 100); do port_busy 6379 && break; sleep 0.05; done
      port_busy 6379 || die "redis-server did not start; see $STATE_DIR/redis.log"
    fi
    export REDIS_URL=redis://127.0.0.1:6379/0
  fi
  echo "$REDIS_URL" > "$STATE_DIR/redis-url"
  for s in "${SERVICES[@]}"; do
    for p in ${GRPC[$s]} ${ADMIN[$s]}; do port_busy "$p" && die "port $p (for $s) is in use by another program"; done
  done
  port_busy "$HTTP_PORT" && die "port $HTTP_PORT (the JSON-RPC API) is in use by another program; move the API with HERO_HTTP_PORT and HERO_GRPC_PORT"
  start_emulator
  if [ -n "${HERO_ADMIN_SECRET:-}" ]; then
    (umask 077; printf '%s\n' "$HERO_ADMIN_SECRET" > "$STATE_DIR/admin-secret")
  fi
  for s in "${SERVICES[@]}"; do
    set_args "$s"
    REDIS_URL=$REDIS_URL nohup "$BIN/$s" "${ARGS[@]}" >>"$STATE_DIR/$s.log" 2>&1 &
    echo $! > "$STATE_DIR/$s.pid"
  done
  for s in "${SERVICES[@]}"; do
    local ok=
    for _ in $(seq 1 200); do
      pid_alive "$STATE_DIR/$s.pid" || die "$s exited; see $STATE_DIR/$s.log: $(tail -n 1 "$STATE_DIR/$s.log")"
      if "$BIN/$s" healthcheck --admin-addr "127.0.0.1:${ADMIN[$s]}" >/dev/null 2>&1; then ok=1; break; fi
      sleep 0.1
    done
    [ -n "$ok" ] || die "$s is not ready after 20s; see $STATE_DIR/$s.log"
  done
  status
  cat <<TXT

Try it (the API serves TLS from the stack's CA; Redis has ACL users, redis-cli:
  redis-cli --user operator --pass \$(cat $PKI/redis-password-operator)):
  export HERO_TLS_CA=$PKI/ca.pem HERO_ADMIN_SECRET=\$(cat $STATE_DIR/admin-secret)
  bin/heroctl actor create --id 1 && bin/heroctl context create 1 --admins 1
  export HERO_ACTOR=1 HERO_CONTEXT=1
  bin/heroctl runner create 1
  bin/heroctl flow submit examples/diamond.yaml --watch
  bin/heroctl job run --function python#echo --kwargs '{"hello": "world"}'   # a handler job (executor "python")
  bin/heroctl flow submit examples/handlers.yaml --wait   # scripts and handlers, one of executor "mailer"
  bin/heroctl dispatcher run --worker local --script 'echo hi from the Hero Dispatcher protocol'
TXT
}

status() {
  printf '%-18s %-8s %-62s %s\n' SERVICE STATE ENDPOINTS LOG
  for s in "${SERVICES[@]}"; do
    local st=stopped
    if pid_alive "$STATE_DIR/$s.pid"; then
      st=running
      "$BIN/$s" healthcheck --admin-addr "127.0.0.1:${ADMIN[$s]}" >/dev/null 2>&1 && st=ready
    fi
    local ep="grpc 127.0.0.1:${GRPC[$s]}"
    [ "$s" = supervisor-daemon ] && ep="json-rpc 127.0.0.1:$HTTP_PORT, $ep"
    [ "$s" = mycelium-gateway ] && ep="$ep, node ${MYCELIUM_URL:-http://$EMULATOR_ADDR}"
    printf '%-18s %-8s %-62s %s\n' "$s" "$st" "$ep, admin :${ADMIN[$s]}" "$STATE_DIR/$s.log"
  done
  if [ -f "$STATE_DIR/mycelium-emulator.pid" ]; then
    local st=stopped
    pid_alive "$STATE_DIR/mycelium-emulator.pid" && st=running
    printf '%-18s %-8s %-62s %s\n' mycelium "$st" "$EMULATOR_ADDR (the node emulator)" "$STATE_DIR/mycelium-emulator.log"
  fi
  if [ -f "$STATE_DIR/redis.pid" ]; then
    local st=stopped
    pid_alive "$STATE_DIR/redis.pid" && st=running
    printf '%-18s %-8s %-62s %s\n' redis "$st" "127.0.0.1:6379" "$STATE_DIR/redis.log"
  elif [ -f "$STATE_DIR/redis-url" ]; then
    printf '%-18s %-8s %s\n' redis external "$(sed 's#//[^@]*@#//xxxxx@#' "$STATE_DIR/redis-url")"
  fi
}

down() {
  local any=
  for s in supervisor-daemon runner router mycelium-gateway scheduler mycelium-emulator; do
    if pid_alive "$STATE_DIR/$s.pid"; then
      kill -TERM "$(cat "$STATE_DIR/$s.pid")" && any=1
    fi
  done
  for s in supervisor-daemon runner router mycelium-gateway scheduler mycelium-emulator; do
    local f="$STATE_DIR/$s.pid"
    for _ in $(seq 1 150); do pid_alive "$f" || break; sleep 0.1; done
    pid_alive "$f" && kill -KILL "$(cat "$f")"
    rm -f "$f"
  done
  if pid_alive "$STATE_DIR/redis.pid"; then
    kill -TERM "$(cat "$STATE_DIR/redis.pid")" && any=1
    for _ in $(seq 1 100); do pid_alive "$STATE_DIR/redis.pid" || break; sleep 0.1; done
    rm -f "$STATE_DIR/redis.pid"
  fi
  rm -f "$STATE_DIR/redis-url"
  [ -n "$any" ] && echo "local-stack: stopped" || echo "local-stack: nothing was running"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
