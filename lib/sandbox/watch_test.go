package sandbox

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// watchFiles calls changed when a watched file is modified, and not once its stop
// has returned (a change made then is not reported).
func TestWatchFilesStops(t *testing.T) {
	file := filepath.Join(t.TempDir(), "events")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var stopped atomic.Bool
	got := make(chan struct{}, 16)
	stop := watchFiles([]string{file}, func() {
		if stopped.Load() {
			t.Error("changed called after its watch's stop returned")
		}
		got <- struct{}{}
	})
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(time.Minute):
		t.Fatal("a modification was not reported within a minute")
	}
	stop()
	stopped.Store(true)
	if err := os.WriteFile(file, []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop() // a second stop does nothing
}

// BenchmarkWatchStop: a watch made and stopped, as each sandboxed job's limits watch
// is. Its stop is on the job's way from its end to its finish: it must not wait for
// the inotify descriptor's close (the kernel's fsnotify grace period, milliseconds).
func BenchmarkWatchStop(b *testing.B) {
	file := filepath.Join(b.TempDir(), "events")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	var stopping time.Duration
	for i := 0; i < b.N; i++ {
		stop := watchFiles([]string{file}, func() {})
		t0 := time.Now()
		stop()
		stopping += time.Since(t0)
	}
	b.ReportMetric(float64(stopping.Microseconds())/float64(b.N), "stop-µs/op")
}
