package rrq

import (
	"context"
	"io"
	"testing"
	"time"
)

// BenchmarkPoolColdStart: an executor pool's cold start, unsandboxed — StartPool of
// one process until it accepts connections (with the check that it serves a second
// one, unless Connections 1), then its first call (echo), then Close. The runner's
// sandboxed figure is in tests/e2e BenchmarkExecutorColdStart.
func BenchmarkPoolColdStart(b *testing.B) {
	for _, bc := range []struct {
		name  string
		cmd   func(testing.TB) []string
		conns int
	}{
		{"go", func(t testing.TB) []string { return []string{goExampleBinary(t)} }, 0},
		{"go-connections1", func(t testing.TB) []string { return []string{goExampleBinary(t)} }, 1},
		{"python", pythonExample, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cmd := bc.cmd(b)
			ctx := context.Background()
			var ready time.Duration
			for b.Loop() {
				start := time.Now()
				p, err := StartPool(ctx, PoolConfig{Name: "bench", Command: cmd, Client: ClientOptions{Connections: bc.conns}, StopGrace: time.Second, Stdout: io.Discard, Stderr: io.Discard})
				if err != nil {
					b.Fatal(err)
				}
				ready += time.Since(start)
				if out, err := p.Execute(ctx, NewRequest("job-echo", "echo", nil, nil)); err != nil || out.Status != StatusSuccess {
					b.Fatalf("echo: %+v %v", out, err)
				}
				if err := p.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(ready.Microseconds())/float64(b.N)/1000, "ready-ms/op")
		})
	}
}
