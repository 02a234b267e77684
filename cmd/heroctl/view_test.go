package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
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
