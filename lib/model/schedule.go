package model

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"regexp"
	"time"

	"github.com/robfig/cron/v3"
)

// OverlapPolicy says what a schedule's tick does while the schedule's previous run
// has not ended (docs/scheduling.md).
type OverlapPolicy string

const (
	OverlapSkip           OverlapPolicy = "skip"            // the tick is skipped
	OverlapBufferOne      OverlapPolicy = "buffer_one"      // one tick waits for the run's end; more are skipped
	OverlapAllowAll       OverlapPolicy = "allow_all"       // runs side by side
	OverlapCancelPrevious OverlapPolicy = "cancel_previous" // the previous run is stopped, the tick runs
)

// OverlapPolicies lists every OverlapPolicy.
func OverlapPolicies() []OverlapPolicy {
	return []OverlapPolicy{OverlapSkip, OverlapBufferOne, OverlapAllowAll, OverlapCancelPrevious}
}

// ScheduleSpec is when a schedule ticks: a cron expression (5 fields, or 6 with
// seconds first; @hourly, @daily, …) in a time zone, or an interval (ticks at the
// multiples of every since the Unix epoch); jitter delays each tick's run by up to that
// much (the same delay for a tick on every scheduler).
type ScheduleSpec struct {
	Cron     string `json:"cron,omitempty"`
	Every    string `json:"every,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	Jitter   string `json:"jitter,omitempty"`
}

// Schedule is a schedule of a context: coord:sched:<id> (docs/scheduling.md).
type Schedule struct {
	ID        string          `hash:"id" json:"id"`
	ContextID uint32          `hash:"context_id" json:"context_id"`
	CallerID  uint32          `hash:"caller_id" json:"caller_id"` // its runs are this caller's jobs
	Spec      ScheduleSpec    `hash:"spec" json:"spec"`
	Job       json.RawMessage `hash:"job" json:"job"` // the template of each run (job.submit's job); none for a flow's schedule
	// Flow, instead of Job: each run creates and starts a flow of the template's jobs.
	Flow          *FlowTemplate `hash:"flow,omitempty" json:"flow,omitempty"`
	Overlap       OverlapPolicy `hash:"overlap" json:"overlap"`
	CatchupWindow string        `hash:"catchup_window,omitempty" json:"catchup_window,omitempty"` // a duration; 0: every missed tick runs
	Paused        bool          `hash:"paused,omitempty" json:"paused"`
	Note          string        `hash:"note,omitempty" json:"note,omitempty"` // why it was paused (or resumed)
	NextTickMs    int64         `hash:"next_tick_ms,omitempty" json:"next_tick_ms,omitempty"`
	NextFireMs    int64         `hash:"next_fire_ms,omitempty" json:"next_fire_ms,omitempty"` // the next tick with its jitter
	LastTickMs    int64         `hash:"last_tick_ms,omitempty" json:"last_tick_ms,omitempty"`
	LastRun       string        `hash:"last_run,omitempty" json:"last_run,omitempty"`   // "<caller>:<id>" of the last run's job
	LastFlow      uint32        `hash:"last_flow,omitempty" json:"last_flow,omitempty"` // the last run's flow (a flow's schedule)
	PendingTickMs int64         `hash:"pending_tick_ms,omitempty" json:"pending_tick_ms,omitempty"`
	BufferedTick  int64         `hash:"buffered_tick_ms,omitempty" json:"buffered_tick_ms,omitempty"`
	Fired         int64         `hash:"fired,omitempty" json:"fired"`
	Skipped       int64         `hash:"skipped,omitempty" json:"skipped"`
	Missed        int64         `hash:"missed,omitempty" json:"missed"`
	LastError     string        `hash:"last_error,omitempty" json:"last_error,omitempty"`
	CreatedAtMs   int64         `hash:"created_at_ms" json:"created_at_ms"`
	UpdatedAtMs   int64         `hash:"updated_at_ms" json:"updated_at_ms"`
}

var scheduleID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidScheduleID says whether id may name a schedule: 1 to 64 letters, digits, '_',
// '.', '-', not starting with a punctuation mark.
func ValidScheduleID(id string) bool { return scheduleID.MatchString(id) }

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Ticker is a parsed ScheduleSpec.
type Ticker struct {
	cron   cron.Schedule
	every  time.Duration
	loc    *time.Location
	jitter time.Duration
}

// Parse checks the spec and returns its ticker; the error names the field.
func (s ScheduleSpec) Parse() (*Ticker, error) {
	t := &Ticker{loc: time.UTC}
	if s.Timezone != "" {
		loc, err := time.LoadLocation(s.Timezone)
		if err != nil {
			return nil, &ValidationError{Object: "schedule", Field: "spec.timezone", Msg: fmt.Sprintf("unknown time zone %q (an IANA name: Europe/Brussels)", s.Timezone)}
		}
		t.loc = loc
	}
	switch {
	case s.Cron != "" && s.Every != "":
		return nil, &ValidationError{Object: "schedule", Field: "spec.cron", Msg: "give cron or every, not both"}
	case s.Cron != "":
		c, err := cronParser.Parse(s.Cron)
		if err != nil {
			return nil, &ValidationError{Object: "schedule", Field: "spec.cron", Msg: fmt.Sprintf("cron %q: %v", s.Cron, err)}
		}
		t.cron = c
		// A spec that matches no time (the 30th of February) has no next tick: its
		// Next is zero, which was stored as a tick long past, due again at once,
		// forever (the scheduler busy and a run made at each tick).
		if c.Next(time.Now().In(t.loc)).IsZero() {
			return nil, &ValidationError{Object: "schedule", Field: "spec.cron", Msg: fmt.Sprintf("cron %q matches no time in the next five years", s.Cron)}
		}
	case s.Every != "":
		d, err := time.ParseDuration(s.Every)
		if err != nil || d < time.Second {
			return nil, &ValidationError{Object: "schedule", Field: "spec.every", Msg: fmt.Sprintf("every %q is not a duration of 1s or more", s.Every)}
		}
		t.every = d
	default:
		return nil, &ValidationError{Object: "schedule", Field: "spec", Msg: "a schedule needs spec.cron or spec.every"}
	}
	if s.Jitter != "" {
		d, err := time.ParseDuration(s.Jitter)
		if err != nil || d < 0 {
			return nil, &ValidationError{Object: "schedule", Field: "spec.jitter", Msg: fmt.Sprintf("jitter %q is not a duration of 0 or more", s.Jitter)}
		}
		t.jitter = d
	}
	return t, nil
}

// Next is the first tick after t (zero when the cron expression has none).
func (t *Ticker) Next(after time.Time) time.Time {
	if t.every > 0 {
		n := after.UnixMilli()/t.every.Milliseconds() + 1
		return time.UnixMilli(n * t.every.Milliseconds())
	}
	return t.cron.Next(after.In(t.loc)).Truncate(time.Millisecond)
}

// Fire is when tick's run is due: the tick delayed by its jitter, the same for the
// schedule id on every scheduler.
func (t *Ticker) Fire(id string, tick time.Time) time.Time {
	if t.jitter <= 0 {
		return tick
	}
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s|%d", id, tick.UnixMilli())
	return tick.Add(time.Duration(h.Sum64() % uint64(t.jitter)))
}
