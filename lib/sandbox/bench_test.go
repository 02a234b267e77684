package sandbox

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/procrun"
)

// BenchmarkJobStart measures what starting a job costs, layer by layer: a plain
// process, the trampoline, the trampoline with a cgroup, and the whole sandbox (with
// its own filesystem, its wrapper and its report: the result file taken).
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
