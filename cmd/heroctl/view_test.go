package main

import (
	"context"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

// The watch view labels its columns, shows a failed attempt with another to come as
// retrying, and a handler job's function as its type.
func TestDagViewLabelsAndRetrying(t *testing.T) {
	d := &hero.DAG{Flow: &model.Flow{ID: 3, Status: model.FlowStarted}, Nodes: []*hero.DagNode{
		{ID: 1, ScriptType: "sh", NodeStatus: model.NodeCompleted, JobStatus: model.JobFinished, Attempt: 1, Depends: []uint32{}},
		{ID: 2, ScriptType: "sh", NodeStatus: model.NodeReady, JobStatus: model.JobError, Attempt: 1, Depends: []uint32{1}, Error: "attempt 1 failed: exit code 1"},
		{ID: 3, FunctionName: "mailer#send_email", NodeStatus: model.NodeFailed, JobStatus: model.JobError, Attempt: 2, Depends: []uint32{1}, Error: "exit code 1"},
	}}
	v := dagView(d)
	for _, re := range []string{
		`flow 3  started\s+\[#{20}\.{10}\] 2/3 jobs done`,
		`(?m)^  JOB\s+TYPE\s+STATE\s+JOB STATUS\s+ATTEMPT\s+DEPENDS\s+ERROR$`,
		`(?m)^  1\s+sh\s+completed\s+finished\s+1\s+-\s+-$`,
		`(?m)^  2\s+sh\s+retrying\s+error\s+1\s+1\s+attempt 1 failed: exit code 1$`,
		`(?m)^  3\s+mailer#send_email\s+failed\s+error\s+2\s+1\s+exit code 1$`,
	} {
		if !regexp.MustCompile(re).MatchString(v) {
			t.Errorf("the view lacks %s:\n%s", re, v)
		}
	}
	// A big flow: counts, then only the jobs worth a look.
	for i := 0; i < bigFlow; i++ {
		d.Nodes = append(d.Nodes, &hero.DagNode{ID: uint32(10 + i), ScriptType: "sh", NodeStatus: model.NodePending, JobStatus: model.JobDispatched})
	}
	v = dagView(d)
	if !strings.Contains(v, "  pending 40, ready 1, completed 1, failed 1\n") || strings.Contains(v, "  10 ") || !strings.Contains(v, "exit code 1") {
		t.Errorf("big flow view:\n%s", v)
	}
}

// flow get lists the result map in the order of the flow's jobs (job 10's keys after
// job 8's, not between 1's and 2's as text would) and leaves out the output of a job
// that printed nothing.
func TestFlowGetResultOrder(t *testing.T) {
	f := &model.Flow{ID: 1, Status: model.FlowFinished, Result: map[string]string{
		"10.TOTAL": "483", "10.output": "D: 483\n", "8.SEED": "21", "8.output": "", "9.output": "\n", "9.DOUBLED": "42", "2.A": "x",
		"11.output": "two\nlines",
	}}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	printFlow(w, f)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	_, result, _ := strings.Cut(b.String(), "result:")
	var keys []string
	for _, l := range strings.Split(result, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], ".") {
			keys = append(keys, f[0])
		}
	}
	if want := "2.A 8.SEED 9.DOUBLED 10.TOTAL 10.output 11.output"; strings.Join(keys, " ") != want {
		t.Errorf("flow get's result rows: %v, want %s\n%s", keys, want, b.String())
	}
}

// runnerAPI creates runners without script types; its runner process announces them
// after a while (the second read).
type runnerAPI struct {
	herov1.UnimplementedCoordinatorServer
	reads atomic.Int64
}

func (r *runnerAPI) CreateRunner(_ context.Context, req *herov1.CreateRunnerRequest) (*herov1.CreateRunnerResponse, error) {
	return &herov1.CreateRunnerResponse{Runner: &herov1.Runner{Id: req.Runner.Id, Local: true, Topic: "runner1"}}, nil
}

func (r *runnerAPI) GetRunner(_ context.Context, req *herov1.GetRunnerRequest) (*herov1.GetRunnerResponse, error) {
	rn := &herov1.Runner{Id: req.Id, Local: true, Topic: "runner1"}
	if r.reads.Add(1) >= 2 {
		rn.ScriptTypes = []string{"bash", "python", "sh"}
	}
	return &herov1.GetRunnerResponse{Runner: rn}, nil
}

// runner create shows the script types the runner's process announces, not "-".
func TestRunnerCreateShowsScriptTypes(t *testing.T) {
	clearHeroEnv(t)
	api := &runnerAPI{}
	addr, _ := serveGRPC(t, api)
	out, errOut, code := heroctl(t, "--addr", addr, "--plaintext", "--admin-secret", "s3cret-s3cret-s3cret", "runner", "create", "1")
	if code != 0 || !regexp.MustCompile(`(?m)^script types\s+bash,python,sh$`).MatchString(out) {
		t.Errorf("runner create: exit %d, %q %q", code, out, errOut)
	}
}
