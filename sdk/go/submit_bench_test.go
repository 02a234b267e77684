package hero

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
)

// BenchmarkSubmitStream: Submit from 32 goroutines over one SubmitJobStream to an
// in-process server that takes batches and answers each message's submissions at
// its end (no TLS, no Redis): the client's group commit, its encoding and its
// answers' decoding, with the server's gRPC side. Reports this process's CPU per
// submission (client and server) and the submissions per message.
func BenchmarkSubmitStream(b *testing.B) {
	s := &streamServer{batch: 256, batches: true, seen: map[string]int{}}
	c := serve(b, s)
	cpu0 := processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Submit(context.Background(), &model.Job{ScriptType: model.ScriptSh, Script: "true"}, SubmitOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	s.mu.Lock()
	b.ReportMetric(float64(b.N)/float64(s.msgs), "jobs/msg")
	s.mu.Unlock()
}

// processCPU is this process's CPU time so far (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
