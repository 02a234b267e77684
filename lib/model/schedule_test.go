package model

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A cron spec that matches no time is refused naming spec.cron (its Next was zero:
// stored as a tick long past, due again at once, forever); one that matches rarely
// (the 29th of February) is taken, and its next tick is a real time.
func TestScheduleSpecOfNoTick(t *testing.T) {
	for _, cron := range []string{"0 0 30 2 *", "0 0 31 4 *", "0 0 31 11 *"} {
		_, err := ScheduleSpec{Cron: cron}.Parse()
		var ve *ValidationError
		if err == nil || !errors.As(err, &ve) || ve.Field != "spec.cron" || !strings.Contains(err.Error(), "matches no time") {
			t.Errorf("cron %q: %v; want a refusal naming spec.cron", cron, err)
		}
	}
	tk, err := ScheduleSpec{Cron: "0 0 29 2 *"}.Parse()
	if err != nil {
		t.Fatalf("cron of the 29th of February: %v", err)
	}
	if tk.Next(time.Now()).IsZero() {
		t.Fatal("the 29th of February has no next tick")
	}
}
