#!/usr/bin/env bash
# lua-check (part of make lint): the coordinator's atomic transitions stay in plain
# sight. It fails on
#   - a Lua script in a Go string (redis.call or redis.pcall, or their server.*
#     aliases, in a .go file other than a test): a script is a .lua file, embedded
#     with go:embed;
#   - a .lua file without its header (a first line "-- <name>: …", then lines that
#     start "-- KEYS", "-- ARGV" and "-- Reply", and "-- Derives" when its code uses a
#     key of the prelude (K_*); the lib_*.lua libraries say what they define instead);
#   - a Lua string literal that starts with a key prefix of lib/keys (job:, flow:,
#     message:, runner:, context:, actor:, queue:, msg_, coord:): keys come as KEYS or
#     from the prelude that lib/store generates from lib/keys (K_*);
#   - a .lua file (a script or a lib_*.lua library) that reads ARGV outside the
#     prologue that make lua-gen writes from a script's declared header
#     (lib/internal/luagen): scripts read named locals (run.status, not ARGV[i + 5]),
#     libraries what the scripts hand them; there is no list of exceptions;
#   - a .lua file that reads the prologue's views (the items of view[] arguments, left
#     in ARGV) other than at a view's offset: views[<name>_at + k] or
#     unpack(views, <name>_at + 1, <name>_at + <name>_n);
#   - Go code beside a script's lua/ directory that names the script's variable
#     (<name>Script) anywhere but the generated lua_gen.go: a call goes through the
#     generated <name>Args, never hand-built KEYS and ARGV.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0

gofiles=$(git ls-files --cached --others --exclude-standard '*.go' | grep -v '_test\.go$' || true)
if [ -n "$gofiles" ]; then
  if out=$(grep -nE '(redis|server)\.p?call\(' $gofiles); then
    echo "lua-check: Lua script in a Go string (put it in a .lua file, go:embed it):"
    echo "$out"
    fail=1
  fi
fi

# camel: finish_jobs -> finishJobsScript, the generated variable of a script.
camel() { awk -F_ '{ s = $1; for (i = 2; i <= NF; i++) s = s toupper(substr($i, 1, 1)) substr($i, 2); print s "Script" }' <<<"$1"; }

for f in $(git ls-files --cached --others --exclude-standard '*.lua'); do
  name=$(basename "$f" .lua)
  if ! head -1 "$f" | grep -q "^-- $name: "; then
    echo "lua-check: $f: the header's first line must be \"-- $name: <what it does>\""
    fail=1
  fi
  # ARGV is read only between the prologue's markers (a library has none).
  if out=$(awk '/^-- luagen: the prologue/ {in_p = 1} /^-- luagen: end of the prologue/ {in_p = 0; next}
      !in_p { line = $0; sub(/--.*/, "", line); if (line ~ /ARGV/) print FILENAME ":" FNR ": " $0 }' "$f"); [ -n "$out" ]; then
    echo "lua-check: ARGV read outside the generated prologue (declare the argument in the header, run make lua-gen, use its name):"
    echo "$out"
    fail=1
  fi
  # A view (a view[] argument, its items left in ARGV: lib/internal/luagen) is read
  # only at its offset: views[<name>_at + k] or unpack(views, <name>_at + 1, …).
  if out=$(awk '/^-- luagen: the prologue/ {in_p = 1} /^-- luagen: end of the prologue/ {in_p = 0; next}
      !in_p { line = $0; sub(/--.*/, "", line)
        gsub(/views\[[A-Za-z_][A-Za-z0-9_.]*_at \+ /, "", line); gsub(/unpack\(views, [A-Za-z_][A-Za-z0-9_.]*_at \+ /, "", line)
        if (line ~ /(^|[^A-Za-z0-9_])views([^A-Za-z0-9_]|$)/) print FILENAME ":" FNR ": " $0 }' "$f"); [ -n "$out" ]; then
    echo "lua-check: views read but at a view's offset (views[<name>_at + k], unpack(views, <name>_at + 1, <name>_at + <name>_n)):"
    echo "$out"
    fail=1
  fi
  case "$name" in
  lib_*) ;;
  *)
    dir=$(dirname "$(dirname "$f")")
    var=$(camel "$name")
    gofiles_here=$(git ls-files --cached --others --exclude-standard "$dir/*.go" | grep -v -e '_test\.go$' -e '/lua_gen\.go$' || true)
    if [ -n "$gofiles_here" ] && out=$(grep -nw "$var" $gofiles_here); then
      echo "lua-check: $var is called by hand (call the script through the generated ${var%Script}Args of lua_gen.go):"
      echo "$out"
      fail=1
    fi
    header=$(awk '/^--/ {print; next} {exit}' "$f")
    parts="KEYS ARGV Reply"
    # A key the script derives itself (a K_* of the prelude) is said in the header.
    if awk '/^--/ && !code {next} {code = 1; sub(/--.*/, ""); print}' "$f" | grep -qE '\<K_[A-Z_]+'; then
      parts="$parts Derives"
    fi
    for part in $parts; do
      if ! grep -q "^-- $part" <<<"$header"; then
        echo "lua-check: $f: the header has no \"-- $part\" line"
        fail=1
      fi
    done
    ;;
  esac
  # The code of each line (what precedes a "--" comment), then its string literals.
  if out=$(awk '{ line = $0; sub(/--.*/, "", line); print FILENAME ":" FNR ": " line }' "$f" |
    grep -E "[\"'](job|flow|message|runner|context|actor|queue|coord):|[\"']msg_"); then
    echo "lua-check: a key spelled in Lua (pass it as KEYS or use the prelude's K_* from lib/keys):"
    echo "$out"
    fail=1
  fi
done
exit $fail
