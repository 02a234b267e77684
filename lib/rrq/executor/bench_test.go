package executor_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hero-coordinator/hero/lib/rrq"
	"github.com/hero-coordinator/hero/lib/rrq/executor"
)

// BenchmarkExecuteNoop: no-op handler calls through a Client and an executor on a Unix
// socket, 64 callers at once (as the runner's job workers call), both sides in this
// process: the protocol's cost per call (ns/op is CPU per call while both cores are busy).
func BenchmarkExecuteNoop(b *testing.B) {
	for _, pipeline := range []int{1, 4, 8, 32} {
		b.Run(fmt.Sprintf("pipeline=%d", pipeline), func(b *testing.B) { benchNoop(b, pipeline) })
	}
}

func benchNoop(b *testing.B, pipeline int) {
	h := startExecutor(b, executor.Options{})
	if err := h.client.Close(); err != nil {
		b.Fatal(err)
	}
	c, err := rrq.NewClient(h.ep, rrq.ClientOptions{Logger: quietLogger(), MaxInFlight: 32, Pipeline: pipeline})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	b.SetParallelism(32) // 64 callers on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			out, err := c.Execute(context.Background(), rrq.ExecutionRequest{JobID: "1:1:1", FunctionName: "noop"})
			if err != nil || out.Status != rrq.StatusSuccess {
				b.Errorf("execute: %v %+v", err, out)
				return
			}
		}
	})
}
