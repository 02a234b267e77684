package main

import (
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/model"
)

// A job's logger writes the job's fields (context, flow, job, caller, attempt, trace)
// on each of its lines, and on the lines of the loggers made from it, with the
// line's own; made for every job, it costs little: its fields are written only with
// a line (a handler job's successful run writes none at the info level), not into a
// 512-byte context of its own (zerolog's With).
func TestJobLogCarriesTheJobsFields(t *testing.T) {
	var buf bytes.Buffer
	r := &runner{log: zerolog.New(&buf).Level(zerolog.InfoLevel).With().Str("service", "runner").Logger()}
	j := &model.Job{ID: 7, CallerID: 3, FlowID: 5, Attempt: 2, TraceID: "0af7651916cd43dd8448eb211c80319c"}
	log := r.jobLog(9, j)
	log.Debug().Msg("job finished") // below the level: nothing
	log.Info().Str("error", "boom").Msg("job failed")
	hlog := log.With().Str("executor", "go").Logger()
	hlog.Warn().Msg("a call's line")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	for i, want := range []map[string]any{{"error": "boom", "message": "job failed"}, {"executor": "go", "message": "a call's line"}} {
		var got map[string]any
		if err := json.Unmarshal(lines[i], &got); err != nil {
			t.Fatal(err)
		}
		want["service"], want["context_id"], want["flow_id"], want["job_id"], want["caller_id"], want["attempt"], want["trace_id"] =
			"runner", 9.0, 5.0, 7.0, 3.0, 2.0, j.TraceID
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("line %d: %s = %v, want %v\n%s", i, k, got[k], v, lines[i])
			}
		}
	}
	r.log = zerolog.New(io.Discard).Level(zerolog.InfoLevel)
	var m0, m1 runtime.MemStats
	const n = 1000
	runtime.ReadMemStats(&m0)
	for range n {
		log := r.jobLog(9, j)
		log.Debug().Msg("job finished")
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per > 128 {
		t.Fatalf("a job's logger made %d bytes, want at most 128", per)
	}
}

// A job's script_type label: its script type, else exec:<executor> for a handler job
// (each such label made once per executor, not for every job), else "none".
func TestMetricType(t *testing.T) {
	for _, c := range []struct {
		j    model.Job
		want string
	}{
		{model.Job{ScriptType: "python"}, "python"},
		{model.Job{ScriptType: "go", FunctionName: "go#noop"}, "go"},
		{model.Job{FunctionName: "mailer#send_email"}, "exec:mailer"},
		{model.Job{FunctionName: "go#noop"}, "exec:go"},
		{model.Job{}, "none"},
	} {
		if got := metricType(&c.j); got != c.want {
			t.Fatalf("%+v: %q, want %q", c.j, got, c.want)
		}
	}
	j := &model.Job{FunctionName: "mailer#send_email"}
	if n := testing.AllocsPerRun(100, func() { _ = metricType(j) }); n != 0 {
		t.Fatalf("a handler job's label made with %.0f allocations, want none", n)
	}
}
