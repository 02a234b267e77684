package sandbox

import (
	"context"
	"os"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/procrun"
	"github.com/hero-coordinator/hero/lib/testutil/proctest"
)

// BenchmarkJobStart measures what starting a job costs, layer by layer: a plain
// process, the trampoline, the trampoline with a cgroup, the whole sandbox (with its
// own filesystem, its wrapper and its report: the result file taken), and a job
// handed a sandbox made ahead.
func BenchmarkJobStart(b *testing.B) {
	if _, err := os.Stat("/usr/bin/bwrap"); err != nil {
		b.Skip("no bwrap")
	}
	for _, tc := range []struct {
		name string
		mode string
		lim  Limits
	}{{"trampoline", ModeNone, Limits{}}, {"trampoline+cgroup", ModeNone, Limits{MemoryBytes: 1 << 30, Pids: 512}},
		{"bwrap", ModeBwrap, Limits{}}, {"bwrap+cgroup", ModeBwrap, Limits{MemoryBytes: 1 << 30, Pids: 512}}} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := New(context.Background(), Options{Mode: tc.mode, UID: 61000, GID: 61000})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < b.N; i++ {
				dir, remove, err := s.WorkDir("", "hero-sbx-bench-")
				if err != nil {
					b.Fatal(err)
				}
				j, err := s.PrepareWith(dir, []string{"/bin/sh", "-s"}, tc.lim, Extra{Result: "result", ResultMax: 1 << 20})
				if err != nil {
					b.Fatal(err)
				}
				p, err := procrun.Start(procrun.Spec{Argv: j.Argv, Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Stdin: strings.NewReader("true"), Launch: j.Launch})
				if err != nil {
					b.Fatal(err)
				}
				if r := p.Wait(); r.ExitCode != 0 {
					b.Fatalf("%+v", r)
				}
				j.Result()
				j.Cleanup()
				remove()
			}
		})
	}
	// A job in a sandbox made ahead (issue 44): from its handoff to its end, its
	// cgroup removed; the sandbox's making (in the background) is left out. With a
	// cgroup (the runner's default limits: memory and processes) and without one (no
	// such limit: none is made), and cleanup_ms, what of it is the sandbox's cleanup
	// after the job's end (its cgroup emptied and removed): what a cgroup of its own
	// still costs on a job's path once the sandbox is made ahead.
	// fork-*: a forking sandbox (zygote.go), which serves one job after another: a
	// job's cleanup gives it back for the next.
	for _, tc := range []struct {
		name string
		lim  Limits
		fork bool
	}{{"bwrap+cgroup-ahead", Limits{MemoryBytes: 1 << 30, Pids: 512}, false}, {"bwrap-ahead", Limits{}, false},
		{"fork+cgroup-ahead", Limits{MemoryBytes: 1 << 30, Pids: 512}, true}, {"fork-ahead", Limits{}, true}} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := New(context.Background(), benchOptions(b, 1, tc.fork))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var cleanup time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				p, err := s.Take(context.Background(), tc.lim)
				if err != nil {
					b.Fatal(err)
				}
				dir, _, _ := s.WorkDir("", "hero-sbx-bench-")
				b.StartTimer()
				j := handTrue(b, p, dir)
				t0 := time.Now()
				j.Cleanup()
				cleanup += time.Since(t0)
			}
			b.ReportMetric(float64(cleanup.Microseconds())/1000/float64(b.N), "cleanup_ms")
		})
	}
	// A chain of jobs in sandboxes made ahead (issue 44): each job takes the sandbox
	// made while the one before it ran and hands it its job at once, as a dependent step
	// does, while the next is made beside it (--sandbox-ahead 8). begun_ms: the handoff
	// to the job's command's start (its started_at_us); run_ms: from there to its end
	// seen and its result read (its finished_at_us); p50 of each, and the CPU per job
	// of the sandboxes (this process's children: their making included).
	// With forking sandboxes (fork+cgroup-ahead-chain) the CPU is counted once they
	// are closed (a zygote's children count for this process when it ends).
	for _, fork := range []bool{false, true} {
		name := "bwrap+cgroup-ahead-chain"
		if fork {
			name = "fork+cgroup-ahead-chain"
		}
		b.Run(name, func(b *testing.B) { chain(b, fork) })
	}
	b.Run("plain", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			p, err := procrun.Start(procrun.Spec{Argv: []string{"/bin/sh", "-s"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdin: strings.NewReader("true")})
			if err != nil {
				b.Fatal(err)
			}
			p.Wait()
		}
	})
}

// benchOptions are a benchmark's sandbox options: max made ahead, forking or not.
func benchOptions(b *testing.B, max int, fork bool) Options {
	opt := Options{UID: 61000, GID: 61000, Ahead: AheadOptions{Max: max}}
	if fork {
		opt.Fork, opt.Zygote = true, zygoteBinary(b)
	}
	return opt
}

// readyCPU is the CPU of the sandboxes ready in s and of the children they reaped
// (proctest.CPU): a forking sandbox's jobs.
func readyCPU(s *Sandbox) time.Duration {
	var pgids []int
	s.ahead.mu.Lock()
	for _, k := range s.ahead.keys {
		for _, p := range k.ready {
			pgids = append(pgids, p.cmd.Process.Pid)
		}
	}
	s.ahead.mu.Unlock()
	var sum time.Duration
	for _, g := range pgids {
		for _, pid := range proctest.Group(g) {
			sum += proctest.CPU(pid)
		}
	}
	return sum
}

// chain is BenchmarkJobStart's chain of jobs in sandboxes made ahead.
func chain(b *testing.B, fork bool) {
	{
		s, err := New(context.Background(), benchOptions(b, 8, fork))
		if err != nil {
			b.Fatal(err)
		}
		closed := false
		defer func() {
			if !closed {
				s.Close()
			}
		}()
		lim := Limits{MemoryBytes: 1 << 30, Pids: 512}
		s.Warm(lim)
		ctx := context.Background()
		if err := s.WaitAhead(ctx, func(ready, making int) bool { return ready == 8 }); err != nil {
			b.Fatal(err)
		}
		var begun, run []float64
		cpu0 := childrenCPU() + readyCPU(s)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			p, err := s.Take(ctx, lim)
			if err != nil {
				b.Fatal(err)
			}
			dir, _, _ := s.WorkDir("", JobDir)
			j := handTrue(b, p, dir)
			end := time.Now()
			at, _ := j.Begun()
			begun = append(begun, float64(at.Sub(t0).Microseconds())/1000)
			run = append(run, float64(end.Sub(at).Microseconds())/1000)
			j.Cleanup() // after the end, as the runner's release
		}
		b.StopTimer()
		// The CPU of this process's children, and of the sandboxes alive (a forking
		// sandbox's jobs are its children, not this process's).
		cpu := childrenCPU() + readyCPU(s) - cpu0
		s.Close()
		closed = true
		b.ReportMetric(median(begun), "begun_ms")
		b.ReportMetric(median(run), "run_ms")
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu_ms/job")
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// childrenCPU is the CPU of this process's children that ended and were waited for.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// handTrue hands a sandbox made ahead the job `sh -s` with the script true in dir,
// waits for its end (exit 0) and reads its result.
func handTrue(b *testing.B, p *Prepared, dir string) *Job {
	b.Helper()
	proc, j, err := p.Hand(Handoff{Argv: []string{"/bin/sh", "-s"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir, Script: "true", Result: "result", ResultMax: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	if r := proc.Wait(); r.ExitCode != 0 {
		b.Fatalf("%+v", r)
	}
	j.Result()
	return j
}
