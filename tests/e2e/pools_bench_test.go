package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// BenchmarkExecutorColdStart (issue 44): an executor pool's cold start in the job
// sandbox (the Go example and the Python example runtime, one process each), from the
// runner's "executor pool ready" line (start_ms: launch until it accepts connections
// and serves a second one); and a context's first handler job, from its submission
// (job.run) to its end, with the pool started ahead (start=ahead, the default: the
// runner started it when it began serving the context) and, for comparison, with
// start=demand (the job waits for the cold start).
func BenchmarkExecutorColdStart(b *testing.B) {
	root, err := harness.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	goExec := filepath.Join(binDir, harness.ExampleExecutor)
	py := "python3 -u " + filepath.Join(root, "sdk", "python", "examples", "example_executor.py") + ";ro=" + filepath.Join(root, "sdk", "python")
	s, c := benchStack(b, "--executors", "go;cmd="+goExec+"|python;cmd="+py+"|godemand;cmd="+goExec+";start=demand|pydemand;cmd="+py+";start=demand")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	startMS := regexp.MustCompile(`"start_ms":([0-9.]+)`)
	for _, ex := range []string{"go", "python"} {
		line, err := s.Runner.WaitLog(ctx, poolReady(ex, ctx1)...)
		if err != nil {
			b.Fatal(err)
		}
		m := startMS.FindStringSubmatch(line)
		if m == nil {
			b.Fatalf("no start_ms in %s", line)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		b.ReportMetric(v, ex+"_start_ms")
	}
	id := uint32(0)
	for _, ex := range []string{"go", "python", "godemand", "pydemand"} {
		id++
		start := time.Now()
		var j harness.Job
		c.MustCall(b, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": id, "function_name": ex + "#echo"}, "timeout": 60}, &j)
		if j.Status != "finished" {
			b.Fatalf("%s#echo: %+v", ex, j)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, ex+"_first_job_ms")
	}
}
