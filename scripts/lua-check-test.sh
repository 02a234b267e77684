#!/usr/bin/env bash
# lua-check-test (part of make lint): runs scripts/lua-check.sh on a small repository
# of its own, once clean, then with one file for each thing it must refuse; fails
# unless it passes the clean tree and names every bad file.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/lua"
cp "$here/lua-check.sh" "$tmp/scripts/"
git -C "$tmp" init -q

# lua writes lua/<name>.lua: a header (its first line, then the lines of the parts
# given), then the code.
lua() { # lua name "part ..." code
  local name=$1 parts=$2 code=$3
  {
    echo "-- $name: moves an id from one list to another."
    echo "--"
    for p in $parts; do echo "-- $p: [1] …"; done
    echo "$code"
  } >"$tmp/lua/$name.lua"
}
all="KEYS ARGV Reply Derives"
prologue="-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local id = ARGV[1]
-- luagen: end of the prologue"
move="$prologue
if redis.call('LREM', KEYS[1], 1, id) == 0 then return 0 end -- 'job:' in a comment is fine
redis.call('XADD', K_EVENTS, '*', 'id', id) -- ARGV[1] in a comment is fine"

# a script that reads a view (view[]) in place, at its offset
viewprologue="-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local views = ARGV -- the view[] arguments' items
local items_n = tonumber(ARGV[1])
local items_at = 1
-- luagen: end of the prologue"
viewed="$viewprologue
redis.call('HSET', KEYS[1], unpack(views, items_at + 1, items_at + items_n))
return views[items_at + 1] -- views[3] in a comment is fine"

# The clean tree.
lua move "$all" "$move"
lua plain "KEYS ARGV Reply" "return redis.call('GET', KEYS[1])"
lua viewed "KEYS ARGV Reply" "$viewed"
printf -- '-- lib_util: defines noop.\nlocal function noop() end\n' >"$tmp/lua/lib_util.lua"
printf 'package x\n\nimport _ "embed"\n\n//go:embed lua/move.lua\nvar moveLua string\n' >"$tmp/x.go"
printf 'package x\n\nvar snippet = `return redis.call(1)` // a test may hold Lua\n' >"$tmp/x_test.go"
failures=0
if ! out=$(bash "$tmp/scripts/lua-check.sh" 2>&1); then
  echo "lua-check-test: the clean tree was refused:"
  echo "$out"
  failures=1
fi

# One bad file per case; each must be named in the output.
bad=()
for prefix in job: flow: message: runner: context: actor: queue: msg_ coord:; do
  n="key_${prefix%:}"
  lua "$n" "$all" "$move
redis.call('DEL', '${prefix}' .. ARGV[1])"
  bad+=("lua/$n.lua:")
done
printf -- "-- lib_key: defines k.\nlocal k = \"coord:x\"\n" >"$tmp/lua/lib_key.lua"
bad+=("lua/lib_key.lua:")
i=0
for call in "redis.call('GET', KEYS[1])" "redis.pcall('GET', KEYS[1])" "server.call('GET', KEYS[1])"; do
  i=$((i + 1))
  printf 'package x\n\nvar bad%d = `return %s`\n' $i "$call" >"$tmp/gostring$i.go"
  bad+=("gostring$i.go:")
done
lua unnamed "$all" "$move"
sed -i '1s/.*/-- moves an id/' "$tmp/lua/unnamed.lua"
bad+=("lua/unnamed.lua:")
for part in KEYS ARGV Reply Derives; do
  lua "no_$part" "$(sed "s/$part//" <<<"$all")" "$move"
  bad+=("lua/no_$part.lua:")
done
printf -- '-- lib_other: defines nothing.\n' >"$tmp/lua/lib_misnamed.lua"
bad+=("lua/lib_misnamed.lua:")
# ARGV read by position outside the prologue
lua by_position "KEYS ARGV Reply" "$prologue
return redis.call('GET', ARGV[2])"
bad+=("lua/by_position.lua:")
# a script with no prologue that reads ARGV: no file is exempt, not even one listed
# where an exceptions list used to be
lua undeclared "KEYS ARGV Reply" "return redis.call('GET', ARGV[1])"
printf '# not declared yet\nlua/undeclared.lua\n' >"$tmp/scripts/lua-legacy.txt"
bad+=("lua/undeclared.lua:")
# a library that reads ARGV
printf -- "-- lib_argv: defines first.\nlocal function first() return ARGV[1] end\n" >"$tmp/lua/lib_argv.lua"
bad+=("lua/lib_argv.lua:")
# a view read other than at its offset: by position, or handed on whole
lua view_by_position "KEYS ARGV Reply" "$viewprologue
return views[3]"
bad+=("lua/view_by_position.lua:")
lua view_aliased "KEYS ARGV Reply" "$viewprologue
local all = views
return all[items_at + 1]"
bad+=("lua/view_aliased.lua:")
# a declared script called by hand, not through its generated Args
printf 'package x\n\nvar hand = moveScript\n' >"$tmp/handcall.go"
bad+=("handcall.go:")

rc=0
out=$(bash "$tmp/scripts/lua-check.sh" 2>&1) || rc=$?
if [ $rc -eq 0 ]; then
  echo "lua-check-test: the tree with bad files passed"
  failures=$((failures + 1))
fi
for b in "${bad[@]}"; do
  if ! grep -qF "$b" <<<"$out"; then
    echo "lua-check-test: lua-check did not name $b"
    failures=$((failures + 1))
  fi
done
for good in lua/move.lua lua/plain.lua lua/viewed.lua lua/lib_util.lua x.go x_test.go; do
  if grep -qF "$good" <<<"$out"; then
    echo "lua-check-test: lua-check named $good, which is clean:"
    grep -F "$good" <<<"$out"
    failures=$((failures + 1))
  fi
done
if [ $failures -ne 0 ]; then
  echo "lua-check-test: $failures case(s) wrong; lua-check said:"
  echo "$out"
  exit 1
fi
echo "lua-check-test: ok (${#bad[@]} bad files refused)"
