#!/usr/bin/env bash
# size-check (part of make lint): the API daemon stays one room per API area. It fails
# when a file of services/supervisor-daemon (Go code, tests, the console's assets;
# go.sum aside) has more than MAX_LINES lines (600): split it by resource, the way
# jobs.go, flows.go, schedules.go, operator.go … are.
set -euo pipefail
cd "$(dirname "$0")/.."
max="${MAX_LINES:-600}"
fail=0
for f in $(git ls-files --cached --others --exclude-standard services/supervisor-daemon | grep -v '/go\.sum$'); do
	n=$(wc -l <"$f")
	if [ "$n" -gt "$max" ]; then
		echo "size-check: $f has $n lines, more than $max (split it by API area)"
		fail=1
	fi
done
if [ "$fail" = 0 ]; then
	echo "size-check: no file of services/supervisor-daemon over $max lines"
fi
exit "$fail"
