package main

import (
	"fmt"
	"os"
	"time"
)

// pauseHook is a test hook, read from the environment only (no operator has a use for
// it, and it is no flag): HERO_TEST_PAUSE_AT=<step> stops the runner for good at that
// step of a job's start — "claimed" (the job claimed and started in Redis, nothing of
// it running), "taken" (a finish wrote its runs' ends and claimed a dependent for this
// process, the take: nothing of the dependent running), or the sandbox's (lib/sandbox Options.Pause): "spawned" (its process
// waiting at its gate), "gated" (through it, its sandbox being made), "network" (its
// sandbox made, held for its network) — once it has appended "paused <step> <pid>"
// (the job's process, 0 at "claimed") to the file HERO_TEST_PAUSE_FILE; a test then
// kills it there (tests/e2e TestRunnerKilledMidStartRunsNothingAfter, the chaos suite).
// nil without HERO_TEST_PAUSE_AT.
func pauseHook(getenv func(string) string) func(step string, pid int) {
	at, file := getenv("HERO_TEST_PAUSE_AT"), getenv("HERO_TEST_PAUSE_FILE")
	if at == "" {
		return nil
	}
	return func(step string, pid int) {
		if step != at {
			return
		}
		if f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			_, _ = fmt.Fprintf(f, "paused %s %d\n", step, pid)
			_ = f.Close()
		}
		for {
			time.Sleep(time.Hour) // until the test kills the runner
		}
	}
}
