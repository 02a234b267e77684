package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
)

// --submit-inflight outside 1 to 16 is refused, naming the flag and the range.
func TestSubmitInflightBounds(t *testing.T) {
	for _, n := range []int{0, 1, 2, 16, 17} {
		c := Config{ConsoleSessionTTL: time.Hour, MaxFlowJobs: model.DefaultMaxFlowJobs, SubmitInflight: n}
		err := c.validateBounds()
		switch ok := n >= 1 && n <= 16; {
		case ok && err != nil:
			t.Errorf("--submit-inflight %d: %v", n, err)
		case !ok && (err == nil || !strings.Contains(err.Error(), "--submit-inflight") || !strings.Contains(err.Error(), "between 1 and 16")):
			t.Errorf("--submit-inflight %d: %v; want a refusal naming the flag and its range", n, err)
		}
	}
}
