#!/usr/bin/env bash
# Move one context from one Redis server to another (docs/architecture.md, "Placement").
#
#   scripts/move-context.sh <context id> <from redis url> <to redis url>
#
# Run it while every service is stopped (the placement map is read at start: no
# service may write the context while it moves), then start every service with the
# new --redis-placement. It copies every key of DB <id> (MIGRATE ... COPY REPLACE),
# then the context's coordination entries in DB 0 (its members of coord:flows:active,
# coord:due, coord:expire and coord:remote_due); it checks the copy (DBSIZE), and
# only then removes the context from the old server. Wake tokens are not moved: the
# services' idle claims take the context's waiting items within seconds of the start.
# The URLs are redis-cli's -u form (redis://[user:password@]host:port); the old server
# must reach the new one (MIGRATE runs there).
set -euo pipefail

if [ $# -ne 3 ]; then
	echo "usage: $0 <context id> <from redis url> <to redis url>" >&2
	exit 2
fi
id=$1 from=$2 to=$3
case $id in '' | *[!0-9]* | 0) echo "context id must be a number of at least 1" >&2; exit 2 ;; esac

old() { redis-cli -u "$from" --no-auth-warning "$@"; }
new() { redis-cli -u "$to" --no-auth-warning "$@"; }

if [ "$(new -n "$id" DBSIZE)" != 0 ]; then
	echo "DB $id of the new server is not empty: refusing to overwrite it" >&2
	exit 1
fi
total=$(old -n "$id" DBSIZE)

# Where MIGRATE on the old server finds the new one, and how it logs in.
hostport=${to#*://}
hostport=${hostport#*@}
hostport=${hostport%%/*}
host=${hostport%:*} port=${hostport##*:}
[ "$port" = "$hostport" ] && port=6379
auth=()
userinfo=${to#*://}
if [ "$userinfo" != "${userinfo#*@}" ]; then
	userinfo=${userinfo%%@*}
	if [ "$userinfo" != "${userinfo#*:}" ]; then
		auth=(AUTH2 "${userinfo%%:*}" "${userinfo#*:}")
	else
		auth=(AUTH "$userinfo")
	fi
fi

# 1. The context's database, 100 keys per MIGRATE.
old -n "$id" --scan | while mapfile -t -n 100 batch && [ ${#batch[@]} -gt 0 ]; do
	out=$(old -n "$id" MIGRATE "$host" "$port" "" "$id" 60000 COPY REPLACE "${auth[@]}" KEYS "${batch[@]}")
	if [ "$out" != OK ] && [ "$out" != NOKEY ]; then
		echo "MIGRATE: $out" >&2
		exit 1
	fi
done
if [ "$(new -n "$id" DBSIZE)" != "$total" ]; then
	echo "copied $(new -n "$id" DBSIZE) of $total keys of DB $id: nothing removed from the old server" >&2
	exit 1
fi

# 2. Its coordination entries in DB 0: the script prints them as commands for the new
# server (members and scores have no spaces); with "remove" it also deletes them.
read -r -d '' coord <<'LUA' || true
local n, remove, out = ARGV[1], ARGV[2] == 'remove', {}
local function zset(key, prefix)
  local m = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  for i = 1, #m, 2 do
    if string.sub(m[i], 1, #prefix) == prefix then
      out[#out + 1] = 'ZADD ' .. key .. ' ' .. m[i + 1] .. ' ' .. m[i]
      if remove then redis.call('ZREM', key, m[i]) end
    end
  end
end
zset('coord:due', 'retry:' .. n .. ':')
zset('coord:expire', n .. ':')
zset('coord:remote_due', n .. '|')
for _, m in ipairs(redis.call('SMEMBERS', 'coord:flows:active')) do
  if string.sub(m, 1, #n + 1) == n .. ':' then
    out[#out + 1] = 'SADD coord:flows:active ' .. m
    if remove then redis.call('SREM', 'coord:flows:active', m) end
  end
end
return table.concat(out, '\n')
LUA
entries=$(old --raw EVAL "$coord" 0 "$id" keep)
if [ -n "$entries" ]; then
	printf '%s\n' "$entries" | new >/dev/null
fi

# 3. Only now: remove the context from the old server.
old --raw EVAL "$coord" 0 "$id" remove >/dev/null
old -n "$id" FLUSHDB >/dev/null
# Its wake tokens on the runners' lists (shared with the server's other contexts), and
# its lists of the layout before those.
old --scan --pattern "coord:wake:runner:*" | while read -r k; do old LREM "$k" 0 "$id" >/dev/null; done
old --scan --pattern "coord:wake:$id:*" | while read -r k; do old UNLINK "$k" >/dev/null; done
echo "context $id: $total keys and $(printf '%s' "$entries" | grep -c . || true) coordination entries moved; start the services with the new --redis-placement"
