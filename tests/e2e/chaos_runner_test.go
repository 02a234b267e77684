package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The chaos suite's runner faults of issue 43 (long mode): the runner killed in the
// middle of a job's start, and stopped past its lease; and what the ledger tells of
// them: job processes alive after their runner's death, runs again after a freeze.

const (
	// chaosLease is the runner's and the router's lease: a flow that waits one out shows.
	chaosLease = 10 * time.Second
	// chaosJobTimeout is every job's timeout (s): far above its 0.1–0.3 s, below a
	// freeze, so that a freeze passes it in the runner's clock.
	chaosJobTimeout = 8
	// chaosFreezeFor is how long a freeze stops the runner: past its lease, so that the
	// router's sweep queues its jobs again meanwhile.
	chaosFreezeFor = chaosLease + 5*time.Second
	// chaosDeathBound: a job's process that starts, or writes its end, later than this
	// after the death of the runner that launched it outlived its runner.
	chaosDeathBound = 100 * time.Millisecond
	// chaosStartKills and chaosFreezes are the long mode's runner faults.
	chaosStartKills, chaosFreezes = 10, 3
)

// chaosFreeze is when the runner was stopped.
type chaosFreeze struct{ from, to time.Time }

// chaosInterpreters is the runner's --interpreters for its life'th life: a script's
// shell gets HERO_CHAOS_LIFE, so that each ledger line names the runner that
// launched its run.
func chaosInterpreters(life int) string {
	return fmt.Sprintf("python=python3,sh=/usr/bin/env HERO_CHAOS_LIFE=%d /bin/sh,bash=bash", life)
}

// restartRunner kills the runner (kill -9), records its death, and starts its next
// life under the same worker id.
func (ch *chaosRun) restartRunner() {
	p := ch.s.Runner
	ch.old = append(ch.old, p)
	sent := time.Now()
	p.Kill() // SIGKILL to its process group, then the wait for its end
	// Its death is its end (its pipes, the guard's among them, close as it exits), not
	// the signal: how long the exit took is in the report.
	dead := time.Now()
	ch.rep.deaths[ch.life] = dead
	ch.rep.exitAfterKill = append(ch.rep.exitAfterKill, dead.Sub(sent))
	ch.rep.runnerKills = append(ch.rep.runnerKills, sent)
	ch.life++
	args := ch.s.Args["runner"]
	for i := range args {
		if args[i] == "--interpreters" && i+1 < len(args) {
			args[i+1] = chaosInterpreters(ch.life)
		}
	}
	ch.s.Start("runner")
}

// runnerFaults does the long mode's runner faults of cycle c: a kill in the middle of
// a job's start (in turn: after a claim, at a sandbox's spawn, at the job's own start)
// in each of the first chaosStartKills cycles, and a freeze past the lease in each of
// the first chaosFreezes. It returns how many cycles after this one still have some
// (none: 0 or less).
func (ch *chaosRun) runnerFaults(c int) int {
	if c < chaosStartKills {
		kinds := []chaosFault{
			{"kill -9 runner after a claim", func() { ch.killAtStart(ch.waitClaim) }},
			{"kill -9 runner at a sandbox's spawn", func() { ch.killAtStart(ch.waitSpawn) }},
			{"kill -9 runner at a job's start", func() {
				ch.killAtStart(func() bool { ch.starts.Drain(); return ch.starts.Wait(1, time.Minute) })
			}},
		}
		ch.fault(kinds[c%len(kinds)])
	}
	if c < chaosFreezes {
		ch.fault(chaosFault{fmt.Sprintf("runner SIGSTOP, %s (lease %s)", chaosFreezeFor, chaosLease), ch.freezeRunner})
	}
	return max(chaosStartKills, chaosFreezes) - 1 - c
}

// killAtStart restarts the runner (kill -9) as soon as step says a job's start got
// there (or, failing that within its deadline, at once).
func (ch *chaosRun) killAtStart(step func() bool) {
	if !step() {
		ch.t.Log("chaos: the start step was not seen; the runner is killed anyway")
	}
	ch.restartRunner()
}

// waitClaim waits for the next job start the events of the chaos context record (a
// runner's claim: the job's process is not up yet).
func (ch *chaosRun) waitClaim() bool {
	rc := ch.rs.Client(ch.t, ctx1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	last := "$"
	for {
		res, err := rc.XRead(ctx, &redis.XReadArgs{Streams: []string{keys.Events, last}, Count: 100, Block: time.Minute}).Result()
		if err != nil {
			return false
		}
		for _, st := range res {
			for _, e := range store.EntryEvents(ctx1, st.Messages) { // one entry may hold several events
				if e.Type == string(model.EventJobStarted) {
					return true
				}
			}
			if n := len(st.Messages); n > 0 {
				last = st.Messages[n-1].ID
			}
		}
	}
}

// waitSpawn waits for a claim, then for the runner's next new child process: the
// sandbox of a job it is starting.
func (ch *chaosRun) waitSpawn() bool {
	if !ch.waitClaim() {
		return false
	}
	pid := ch.s.Runner.Cmd.Process.Pid
	before := children(pid)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for c := range children(pid) {
			if !before[c] {
				return true
			}
		}
		time.Sleep(time.Millisecond) // the process table, polled: a fork has no event here
	}
	return false
}

// children are a process's child pids (/proc/<pid>/task/*/children).
func children(pid int) map[int]bool {
	out := map[int]bool{}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out[c] = true
			}
		}
	}
	return out
}

// freezeRunner stops the runner (SIGSTOP) past its lease, then lets it go on.
func (ch *chaosRun) freezeRunner() {
	from := time.Now()
	if err := ch.s.Runner.Signal(syscall.SIGSTOP); err != nil {
		ch.t.Fatal(err)
	}
	time.Sleep(chaosFreezeFor) // the freeze under test
	if err := ch.s.Runner.Signal(syscall.SIGCONT); err != nil {
		ch.t.Fatal(err)
	}
	ch.rep.freezes = append(ch.rep.freezes, chaosFreeze{from, time.Now()})
}

// frozenAt says whether the runner was stopped at ms (Unix ms).
func (ch *chaosRun) frozenAt(ms int64) bool {
	for _, f := range ch.rep.freezes {
		if ms >= f.from.UnixMilli() && ms <= f.to.UnixMilli() {
			return true
		}
	}
	return false
}

// frozenBetween says whether a freeze came between a job's first start (or during its
// launch) and its last.
func (ch *chaosRun) frozenBetween(first, last int64) bool {
	for _, f := range ch.rep.freezes {
		if f.from.UnixMilli() <= last && f.to.UnixMilli() >= first-chaosLaunchBound.Milliseconds() {
			return true
		}
	}
	return false
}

// checkRunsAfterDeath counts a job's ledger lines written by a process whose runner
// (the life that launched it) had died more than chaosDeathBound before.
func (ch *chaosRun) checkRunsAfterDeath(key string, l []chaosLine) {
	for _, x := range l {
		d, dead := ch.rep.deaths[x.life]
		if late := x.ms - d.UnixMilli(); dead && late > chaosDeathBound.Milliseconds() {
			ch.rep.afterDeath = append(ch.rep.afterDeath, fmt.Sprintf("%s %s %dms after runner life %d died", key, x.kind, late, x.life))
		}
	}
}

// checkTimeout: a flow that ended in error because a job timed out, although the job's
// script ended (exit 0) within its time, goes to the report's timeouts.
func (ch *chaosRun) checkTimeout(c *harness.Client, f harness.Flow, lines map[string][]chaosLine) {
	var j harness.Job
	if f.FailedJob == 0 || c.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": f.FailedJob}, &j) != nil {
		return
	}
	key := fmt.Sprintf("%d:1:%d", ctx1, f.FailedJob)
	// Every flipped flow's failed job is a suspect: its ledger and log lines are shown.
	ch.rep.flippedJobs = append(ch.rep.flippedJobs, key)
	ch.t.Logf("flow %d ended in error: job %s: %q", f.ID, key, j.Error)
	if j.Error != "timeout" {
		return
	}
	starts := map[string]int64{}
	for _, x := range lines[key] {
		if x.kind == "start" {
			starts[x.run] = x.ms
		} else if s, ok := starts[x.run]; ok && x.ms-s < chaosJobTimeout*1000 {
			ch.rep.timeouts = append(ch.rep.timeouts, key)
			return
		}
	}
}
