#!/usr/bin/env bash
# readme-block.sh NAME [FILE]: prints the lines of FILE's (default README.md) shell block
# marked for the tests: the ```sh fence right after the line
#
#   <!-- quickstart:NAME (…) -->
#
# up to its closing fence. make compose-test (NAME compose) and make quickstart-test
# (NAME local) run those lines as they are, so the README and the tests cannot drift.
# Exits 1, saying so, when the marker, its block or the block's end is missing.
set -euo pipefail
name=${1:?usage: readme-block.sh NAME [FILE]}
file=${2:-$(dirname "$0")/../README.md}
awk -v name="$name" '
  index($0, "<!-- quickstart:" name " ") == 1 || $0 == "<!-- quickstart:" name " -->" { marked = 1; next }
  marked && !inside && /^```sh[[:space:]]*$/ { inside = 1; next }
  marked && !inside && NF > 0 { print "readme-block: the line after the marker quickstart:" name " is not a ```sh fence" > "/dev/stderr"; bad = 1; exit 1 }
  inside && /^```[[:space:]]*$/ { done = 1; exit 0 }
  inside { print; lines++ }
  END {
    if (bad) exit 1
    if (!marked) { print "readme-block: no <!-- quickstart:" name " … --> marker in " FILENAME > "/dev/stderr"; exit 1 }
    if (!done || lines == 0) { print "readme-block: the block quickstart:" name " has no lines or no closing fence" > "/dev/stderr"; exit 1 }
  }
' "$file"
