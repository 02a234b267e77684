package rrq

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPoolNoop: no-op calls through a Pool of the Go example executor, as the
// runner makes them in bench-peers' (a): two processes (GOMAXPROCS=1 each), 16 calls in
// flight per process on one connection each, 32 callers. Besides ns/op it reports the
// CPU per call of this process (the callers and the client: getrusage) and of the
// executor processes (/proc/<pid>/stat): CPU per call is far less sensitive to other
// load than the time per call.
func BenchmarkPoolNoop(b *testing.B) {
	p, err := StartPool(context.Background(), PoolConfig{Name: "bench", Command: []string{goExampleBinary(b)}, Size: 2,
		Env: []string{"GOMAXPROCS=1"}, Client: ClientOptions{MaxInFlight: 16, Pipeline: 16}, StopGrace: time.Second, Stdout: io.Discard, Stderr: io.Discard,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	call := func() {
		if out, err := p.Execute(ctx, ExecutionRequest{JobID: "1:1:1", FunctionName: "noop", Context: ExecutionContext{QueueName: "queue:exec:go", WorkerID: "runner-1",
			TraceContext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}); err != nil || out.Status != StatusSuccess {
			b.Fatalf("noop: %+v %v", out, err)
		}
	}
	for range 1000 { // warm: connections open, buffers grown
		call()
	}
	self0, exec0 := selfCPU(b), poolCPU(b, p)
	b.SetParallelism(16) // 32 callers on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			call()
		}
	})
	b.StopTimer()
	self1, exec1 := selfCPU(b), poolCPU(b, p)
	b.ReportMetric(float64((self1-self0).Microseconds())/float64(b.N), "client-cpu-us/op")
	b.ReportMetric(float64((exec1-exec0).Microseconds())/float64(b.N), "executor-cpu-us/op")
}

func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// poolCPU is the user and system CPU its processes have used (clock ticks of 10 ms:
// run enough calls).
func poolCPU(b *testing.B, p *Pool) time.Duration {
	var total time.Duration
	for _, ps := range p.Stats().Processes {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ps.PID))
		if err != nil {
			b.Fatal(err)
		}
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		for _, i := range []int{11, 12} { // utime, stime (fields 14 and 15)
			n, _ := strconv.ParseInt(f[i], 10, 64)
			total += time.Duration(n) * 10 * time.Millisecond
		}
	}
	return total
}
