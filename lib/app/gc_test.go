package app

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// The services' GOGC is DefaultGCPercent and their GOMEMLIMIT 90% of a cgroup's
// memory limit, each unless the environment sets it.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	dir := t.TempDir()
	write := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	limited, unlimited, v1none := write("limited", "268435456\n"), write("max", "max\n"), write("v1", "9223372036854771712\n")
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1 << 62)
	gc, mem := tuneGC(env(nil), []string{filepath.Join(dir, "missing"), limited})
	if gc != DefaultGCPercent || debug.SetGCPercent(-2) != DefaultGCPercent {
		t.Errorf("GOGC unset: set %d, want %d", gc, DefaultGCPercent)
	}
	limit := float64(268435456)
	if want := int64(limit * memoryLimitShare); mem != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("a 256 MiB cgroup: GOMEMLIMIT %d, want %d", mem, want)
	}

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1 << 62)
	gc, mem = tuneGC(env(map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}), []string{limited})
	if gc != 0 || mem != 0 || debug.SetGCPercent(-2) != 100 || debug.SetMemoryLimit(-1) != 1<<62 {
		t.Errorf("GOGC and GOMEMLIMIT set: tuneGC changed them (%d, %d)", gc, mem)
	}
	for _, f := range []string{unlimited, v1none} {
		if _, mem := tuneGC(env(nil), []string{f}); mem != 0 {
			t.Errorf("%s: GOMEMLIMIT %d, want none (no limit)", f, mem)
		}
	}
}
