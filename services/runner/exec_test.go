package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
)

// Without --job-*-max the runner's defaults are ceilings: a job asking for more
// memory or processes than the default ends error, "limits refused", naming the
// limit, without running; one asking for less runs.
func TestJobAboveTheDefaultCeilingIsRefused(t *testing.T) {
	h := newHarness(t)
	h.start()
	for _, lim := range []*model.JobLimits{{MemoryBytes: 1 << 40}, {Pids: 100000}} {
		j := h.submitJob(&model.Job{Script: "echo ran", Limits: lim})
		got := h.waitStatus(j.ID, 15*time.Second, model.JobFinished, model.JobError)
		if got.Status != model.JobError || !strings.HasPrefix(got.Error, "limits refused: ") || !strings.Contains(got.Error, "above this runner's maximum") ||
			got.Result["output"] != "" {
			t.Errorf("job asking %s: status %s error %q result %v", lim, got.Status, got.Error, got.Result)
		}
	}
	j := h.submitJob(&model.Job{Script: "echo ran", Limits: &model.JobLimits{MemoryBytes: 256 << 20, Pids: 64}})
	if got := h.waitStatus(j.ID, 15*time.Second, model.JobFinished, model.JobError); got.Status != model.JobFinished {
		t.Errorf("job asking for less than the defaults: status %s error %q", got.Status, got.Error)
	}
}
