#!/usr/bin/env bash
# Counts the instructions Redis spends per handler job in each step of a job's path:
# runs lib/store's BenchmarkJobPathRedis against a redis-server under valgrind's
# callgrind (which counts instructions, the same run after run, where timings on a
# shared VM drift by ±30%) and prints the count per job for each stage.
#
#   scripts/redis-instructions.sh [JOBS] [BENCHMARK]
#
# JOBS defaults to 1000 (~30 s per 1000 jobs); BENCHMARK to BenchmarkJobPathRedis (a
# flow's jobs through every step); BenchmarkSubmitPathRedis counts getting standalone
# jobs in (job.run's former path, job.submit, job.submit_batch);
# BenchmarkStandalonePathRedis a standalone handler job through every step with its
# submission, and prints the memory a finished one holds.
#
# COMMANDS_ONLY=1 counts only the instructions of the commands Redis runs (its call():
# the scripts and every command they and the clients send, no network I/O, no
# serverCron): the totals move by 10% and more on a loaded machine, where a stage
# takes longer and the timers run more often; these do not;
# SCRIPTS_ONLY=1 (instead of COMMANDS_ONLY) counts only the scripts' calls (FCALL:
# a script and the commands it calls, none the clients send themselves): what a
# script's change moves, by ~1% between runs where COMMANDS_ONLY's totals move by
# ±4% on a loaded machine;
# KEEP_CALLGRIND=1 keeps the dumps (one per stage) for callgrind_annotate;
# HERO_PATH_BATCH=k has the runner's claims and finishes take k jobs a call (default 32;
# BenchmarkPeers (a) prints the sizes the runner's calls have there);
# HERO_PATH_VIA_SCHEDULER=1 has the ends go through the router and the scheduler (a
# runner's --apply-ends=false) instead of being applied by the finish.
#
# Needs valgrind (apt-get install valgrind) and redis-server on PATH. docs/benchmarks.md
# has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${1:-1000}"
bench="${2:-BenchmarkJobPathRedis}"
for tool in valgrind callgrind_control redis-server; do
	command -v "$tool" >/dev/null || { echo "redis-instructions: $tool not found (apt-get install valgrind redis-server)" >&2; exit 1; }
done
work="$(mktemp -d)"
if [ -n "${KEEP_CALLGRIND:-}" ]; then
	echo "redis-instructions: callgrind dumps kept in $work (callgrind_annotate $work/cg.out.<pid>.<n>)" >&2
else
	trap 'rm -rf "$work"' EXIT
fi
toggle="${COMMANDS_ONLY:+--toggle-collect=call}"
if [ -n "${SCRIPTS_ONLY:-}" ]; then toggle="--toggle-collect=fcallCommand"; fi
# The test harness starts "redis-server" from PATH: this one runs the real one under callgrind.
cat >"$work/redis-server" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind $toggle --callgrind-out-file=$work/cg.out.%p $(command -v redis-server) "\$@"
EOF
chmod +x "$work/redis-server"
(cd lib && PATH="$work:$PATH" HERO_BENCH=1 HERO_PATH_JOBS="$jobs" HERO_PATH_CALLGRIND=1 \
	go test -run '^$' -bench "^$bench\$" -benchtime 1x ./store/ >"$work/bench.log" 2>&1) || {
	cat "$work/bench.log" >&2
	exit 1
}
# Every dump names its stage ("Trigger: dump <stage>") and its total ("summary: N").
awk -v jobs="$jobs" '
	/^desc: Trigger: dump / { stage = $4 }
	/^summary: / && stage != "" {
		if (!(stage in total)) order[n++] = stage
		total[stage] += $2
		stage = ""
	}
	END {
		for (i = 0; i < n; i++) {
			if (order[i] == "setup") continue
			printf "  %-40s %8.1f k instructions/job\n", order[i], total[order[i]] / jobs / 1000
			all += total[order[i]]
		}
		printf "  %-40s %8.1f k instructions/job\n", "all", all / jobs / 1000
	}' $(ls -v "$work"/cg.out.*)
grep -h '^Redis memory' "$work/bench.log" || true
