package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/procrun"
)

// groupNices is the nice of every process of process group pgid (from /proc).
func groupNices(t *testing.T, pgid int) map[int]int {
	t.Helper()
	out := map[int]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// After the command's name (in parentheses, which may hold anything): state,
		// ppid, pgrp, … nice is the 17th field from there (the 19th of the line).
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 17 || fields[2] != strconv.Itoa(pgid) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		out[pid], _ = strconv.Atoi(fields[16])
	}
	return out
}

// niceOf is one process's nice (-100: gone).
func niceOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -100
	}
	s := string(b)
	n, _ := strconv.Atoi(strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[16])
	return n
}

// A sandbox made ahead is made, and waits, at the lowest CPU priority, off the way of
// the jobs that run and of the services that move the next step; a job that waits for
// one has it made at the runner's priority, and every job runs at the runner's
// priority, as a job in a sandbox made for it does (issue 44: a dependent step on two
// cores had the next sandbox's making beside it).
func TestAheadSandboxWaitsAtLowPriority(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed (apt-get install bubblewrap)")
	}
	var mu sync.Mutex
	var gated []int // the nice of each sandbox's first process once through its gate
	s, err := New(context.Background(), Options{UID: 61000, GID: 61000, Ahead: AheadOptions{Max: 1}, Pause: func(step string, pid int) {
		if step == "gated" {
			mu.Lock()
			defer mu.Unlock()
			gated = append(gated, niceOf(pid))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.prio.lower {
		t.Skip("this process may not raise a priority back (no CAP_SYS_NICE, RLIMIT_NICE): sandboxes are made at its own")
	}
	base := s.prio.base
	lim := Limits{Pids: 64, DiskBytes: 16 << 20}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	niceJob := func(p *Prepared) string {
		t.Helper()
		dir, _, _ := s.WorkDir("", JobDir)
		var out procrun.Capped
		out.Max = 1 << 10
		cmd, j, waited, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-s"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir,
			Script: "nice; (nice)", Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Cleanup()
		if res := procrun.Adopt(cmd, waited, 0).Wait(); res.ExitCode != 0 {
			t.Fatalf("exit %d: %s", res.ExitCode, out.String())
		}
		return strings.Join(strings.Fields(out.String()), " ")
	}
	want := strconv.Itoa(base) + " " + strconv.Itoa(base)

	// The first job finds none made: its own is made at the runner's priority. The
	// next one, made while the first job has its sandbox, is made and waits at 19:
	// all of its processes.
	p, err := s.Take(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitAhead(ctx, func(ready, making int) bool { return ready == 1 && making == 0 }); err != nil {
		t.Fatalf("the next sandbox was not made: %v", err)
	}
	s.ahead.mu.Lock()
	next := s.ahead.keys[lim].ready[0].cmd.Process.Pid
	s.ahead.mu.Unlock()
	mu.Lock()
	if len(gated) != 2 || gated[0] != base || gated[1] != aheadNice {
		t.Errorf("sandboxes' first processes through their gates at nice %v, want [%d %d] (the job's own, the next)", gated, base, aheadNice)
	}
	mu.Unlock()
	nices := groupNices(t, next)
	if len(nices) < 2 {
		t.Fatalf("the next sandbox's processes: %v, want bwrap and its wrapper at least", nices)
	}
	for pid, n := range nices {
		if n != aheadNice {
			t.Errorf("the waiting sandbox's process %d at nice %d, want %d: %v", pid, n, aheadNice, nices)
		}
	}
	// Every job runs at the runner's priority: the one whose sandbox was made for it,
	// and the one handed the sandbox that waited at 19 (its processes raised first).
	if got := niceJob(p); got != want {
		t.Errorf("the first job ran at nice %q, want %q", got, want)
	}
	p, err = s.Take(ctx, lim)
	if err != nil {
		t.Fatal(err)
	}
	if got := niceJob(p); got != want {
		t.Errorf("the job handed the sandbox made ahead ran at nice %q, want %q", got, want)
	}

}

// A job that comes while a sandbox for it is being made at the lowest priority raises
// that making to the runner's: it is the job's own wait now.
func TestAheadSandboxRaisedForAWaitingJob(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed (apt-get install bubblewrap)")
	}
	hold := make(chan struct{})
	spawned := make(chan int, 1)
	var once sync.Once
	s, err := New(context.Background(), Options{UID: 61000, GID: 61000, Ahead: AheadOptions{Max: 1}, Pause: func(step string, pid int) {
		if step == "spawned" {
			once.Do(func() { spawned <- pid; <-hold })
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer func() {
		select {
		case <-hold:
		default:
			close(hold)
		}
	}()
	if !s.prio.lower {
		t.Skip("this process may not raise a priority back (no CAP_SYS_NICE, RLIMIT_NICE): sandboxes are made at its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lim := Limits{Pids: 32, DiskBytes: 16 << 20}
	s.Warm(lim)
	first := <-spawned // held at its gate
	if n := niceOf(first); n != aheadNice {
		t.Errorf("a sandbox warmed for limits no job waits for starts at nice %d, want %d", n, aheadNice)
	}
	took := make(chan error, 1)
	go func() {
		p, err := s.Take(ctx, lim)
		if err == nil {
			p.Destroy()
		}
		took <- err
	}()
	for waiting := false; !waiting; runtime.Gosched() {
		s.ahead.mu.Lock()
		waiting = len(s.ahead.keys[lim].waiters) > 0
		s.ahead.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatal("the job never waited")
		}
	}
	if n := niceOf(first); n != s.prio.base {
		t.Errorf("the sandbox being made for a job that waits is at nice %d, want the runner's %d", n, s.prio.base)
	}
	close(hold)
	if err := <-took; err != nil {
		t.Fatal(err)
	}
}
