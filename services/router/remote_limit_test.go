package main

import (
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
)

// A remote job's result deadline: by default its timeout plus the margin; a job
// without a timeout gets --remote-job-timeout plus the margin (never "no limit");
// --remote-result-timeout and the message's timeout_result win.
func TestRemoteResultLimit(t *testing.T) {
	c := remoteConfig{ResultMargin: time.Minute, JobTimeout: time.Hour}
	for _, tc := range []struct {
		name string
		cfg  remoteConfig
		m    model.Message
		want time.Duration
	}{
		{"job timeout plus margin", c, model.Message{Job: []model.Job{{Timeout: 30}}}, 30*time.Second + time.Minute},
		{"job without a timeout", c, model.Message{Job: []model.Job{{}}}, time.Hour + time.Minute},
		{"configured", remoteConfig{ResultTimeout: 5 * time.Minute, ResultMargin: time.Minute, JobTimeout: time.Hour}, model.Message{Job: []model.Job{{Timeout: 30}}}, 5 * time.Minute},
		{"message's timeout_result", c, model.Message{TimeoutResult: 7, Job: []model.Job{{Timeout: 30}}}, 7 * time.Second},
	} {
		if got := tc.cfg.resultLimit(&tc.m); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
