package model

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RunLimit is a context's limit on the jobs of one scope (limit.set;
// docs/scheduling.md): at most MaxRunning of them run at once, and at most Rate of
// them start per Per (a token bucket of Burst tokens). The claim enforces it, in its
// script, across every runner of the context.
type RunLimit struct {
	// Scope is "context" (every job of the context), "type:<script type>",
	// "executor:<name>" (a handler job's executor) or "key:<concurrency key>" (a
	// concurrency key: max_running replaces its jobs' concurrency_limit; a rate holds
	// its jobs back from the claim until their token comes).
	Scope      string `json:"scope"`
	MaxRunning uint32 `json:"max_running,omitempty"`
	Rate       uint32 `json:"rate,omitempty"`
	// Per is the rate's period ("1s", "1m", …; none: 1s).
	Per string `json:"per,omitempty"`
	// Burst is the most starts at once the rate allows after a quiet time (none:
	// a tenth of a second's worth, at least 1).
	Burst uint32 `json:"burst,omitempty"`
	// Running is how many runs the scope's max_running counts now (limit.list).
	Running int64 `json:"running"`
}

// Bounds of a RunLimit.
const (
	MaxRunLimitRunning = 100_000
	MaxRunLimitRate    = 1_000_000
	MinRunLimitPer     = time.Millisecond
	MaxRunLimitPer     = 24 * time.Hour
)

// RunLimitContext is the scope of every job of a context.
const RunLimitContext = "context"

// Check validates the limit and fills in its defaults (Per, Burst); the error names
// the field.
func (l *RunLimit) Check() error {
	scope, err := CheckRunLimitScope(l.Scope)
	if err != nil {
		return err
	}
	l.Scope = scope
	bad := func(field, format string, a ...any) error {
		return &ValidationError{Object: "limit", ID: l.Scope, Field: field, Msg: fmt.Sprintf(format, a...)}
	}
	if l.MaxRunning == 0 && l.Rate == 0 {
		return bad("max_running", "a limit needs max_running or rate (or both)")
	}
	if l.MaxRunning > MaxRunLimitRunning {
		return bad("max_running", "%d is more than %d", l.MaxRunning, MaxRunLimitRunning)
	}
	if l.Rate > MaxRunLimitRate {
		return bad("rate", "%d is more than %d", l.Rate, MaxRunLimitRate)
	}
	if l.Rate == 0 {
		if l.Per != "" || l.Burst != 0 {
			return bad("per", "per and burst need a rate")
		}
		return nil
	}
	per, err := l.PerDuration()
	if err != nil {
		return bad("per", "%v", err)
	}
	if l.Per == "" {
		l.Per = "1s"
	}
	if l.Burst == 0 {
		l.Burst = uint32(max(1, int64(l.Rate)*int64(100*time.Millisecond)/int64(per)))
	}
	if l.Burst > MaxRunLimitRate {
		return bad("burst", "%d is more than %d", l.Burst, MaxRunLimitRate)
	}
	return nil
}

// PerDuration is Per as a duration (none: a second).
func (l *RunLimit) PerDuration() (time.Duration, error) {
	if l.Per == "" {
		return time.Second, nil
	}
	d, err := time.ParseDuration(l.Per)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (1s, 1m, …)", l.Per)
	}
	if d < MinRunLimitPer || d > MaxRunLimitPer {
		return 0, fmt.Errorf("%s is not between %s and %s", d, MinRunLimitPer, MaxRunLimitPer)
	}
	return d, nil
}

// CheckRunLimitScope validates a limit's scope and returns it as stored (a script
// type's name normalized).
func CheckRunLimitScope(scope string) (string, error) {
	bad := func(format string, a ...any) (string, error) {
		return "", &ValidationError{Object: "limit", ID: scope, Field: "scope", Msg: fmt.Sprintf(format, a...)}
	}
	if scope == RunLimitContext {
		return scope, nil
	}
	kind, name, ok := strings.Cut(scope, ":")
	switch {
	case !ok || (kind != "type" && kind != "executor" && kind != "key"):
		return bad("%q is not a scope (context, type:<script type>, executor:<name>, key:<concurrency key>)", scope)
	case name == "" || len(name) > MaxConcurrencyKeyLen || strings.ContainsAny(name, " \t\n\r"):
		return bad("the name after %s: must be 1 to %d bytes without spaces, tabs or line breaks", kind, MaxConcurrencyKeyLen)
	case kind == "type":
		t, err := ParseScriptType(name)
		if err != nil {
			return bad("%v", err)
		}
		return "type:" + string(t), nil
	}
	return scope, nil
}

// Spec is the limit as the claim reads it (coord:limits): "<max running> <rate> <per
// ms> <burst>". Check first.
func (l *RunLimit) Spec() string {
	per, _ := l.PerDuration()
	return strconv.FormatUint(uint64(l.MaxRunning), 10) + " " + strconv.FormatUint(uint64(l.Rate), 10) + " " +
		strconv.FormatInt(per.Milliseconds(), 10) + " " + strconv.FormatUint(uint64(l.Burst), 10)
}

// ParseRunLimit reads a limit stored as Spec wrote it.
func ParseRunLimit(scope, spec string) (*RunLimit, error) {
	f := strings.Fields(spec)
	if len(f) != 4 {
		return nil, fmt.Errorf("limit %s: %q is not a stored limit", scope, spec)
	}
	var n [4]uint64
	for i, s := range f {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("limit %s: %q is not a stored limit", scope, spec)
		}
		n[i] = v
	}
	l := &RunLimit{Scope: scope, MaxRunning: uint32(n[0]), Rate: uint32(n[1]), Burst: uint32(n[3])}
	if l.Rate > 0 {
		l.Per = (time.Duration(n[2]) * time.Millisecond).String()
	}
	return l, nil
}
