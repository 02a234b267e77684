package dispatcher

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hero-coordinator/hero/lib/model"
)

// Status is a job's status. The seed names four; reads accept other spellings
// ("Finished", "WaitingForPrerequisites") and keep unknown values as they are. The
// values are the job statuses of lib/model (one spelling of each for the whole
// coordinator; the wire strings are the seeds').
type Status string

const (
	StatusDispatched = Status(model.JobDispatched)
	StatusStarted    = Status(model.JobStarted)
	StatusError      = Status(model.JobError)
	StatusFinished   = Status(model.JobFinished)
	// StatusWaitingForPrerequisites is never written by this package (a waiting job
	// stays "dispatched", the seed's four statuses only); it is understood on read.
	StatusWaitingForPrerequisites = Status(model.JobWaitingForPrerequisites)
)

// Terminal says whether the job has ended.
func (s Status) Terminal() bool { return s == StatusFinished || s == StatusError }

// ParseStatus reads a status tolerantly: case and CamelCase do not matter.
func ParseStatus(s string) Status {
	s = strings.TrimSpace(s)
	if strings.ToUpper(s) == s {
		return Status(strings.ToLower(s)) // "ERROR", "FINISHED"
	}
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 && s[i-1] != '_' {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return Status(b.String())
}

// Job is the seed's job hash, field by field.
type Job struct {
	ID            string            // id: UUID v4
	CallerID      string            // caller_id
	WorkerID      string            // worker_id
	ContextID     string            // context_id
	Script        string            // script: fed to the worker's interpreter on stdin
	Timeout       time.Duration     // timeout: whole seconds in the hash; 0 = no limit
	Retries       int               // retries: re-runs after a failure (0–255)
	Concurrent    bool              // concurrent: true/false (docs/dispatcher.md: how it is read)
	LogPath       string            // log_path: optional file for the job's output
	CreatedAt     time.Time         // created_at: ISO 8601
	UpdatedAt     time.Time         // updated_at: ISO 8601
	Status        Status            // status: dispatched, started, error, finished
	EnvVars       map[string]string // env_vars: JSON object (optional)
	Prerequisites []string          // prerequisites: JSON array of job ids (optional)
	Dependents    []string          // dependents: JSON array of job ids (optional)
	Output        string            // output: set by the worker
	Error         string            // error: set by the worker
	Dependencies  []string          // dependencies: JSON array of job ids
}

// Field names of the job hash, in the seed's order.
const (
	FieldID            = "id"
	FieldCallerID      = "caller_id"
	FieldWorkerID      = "worker_id"
	FieldContextID     = "context_id"
	FieldScript        = "script"
	FieldTimeout       = "timeout"
	FieldRetries       = "retries"
	FieldConcurrent    = "concurrent"
	FieldLogPath       = "log_path"
	FieldCreatedAt     = "created_at"
	FieldUpdatedAt     = "updated_at"
	FieldStatus        = "status"
	FieldEnvVars       = "env_vars"
	FieldPrerequisites = "prerequisites"
	FieldDependents    = "dependents"
	FieldOutput        = "output"
	FieldError         = "error"
	FieldDependencies  = "dependencies"
)

// MaxRetries is the largest retries value accepted (the seed's u8).
const MaxRetries = 255

// TimeFormat is how timestamps are written: ISO 8601 / RFC 3339 in UTC with
// milliseconds, e.g. 2025-01-02T15:04:05.123Z.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime writes a timestamp as the protocol does.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// ParseTime reads a timestamp tolerantly: RFC 3339 with any fraction and zone, ISO
// 8601 without a zone (UTC), a space instead of the T, or Unix seconds/milliseconds.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > 1e12 {
			return time.UnixMilli(n).UTC(), nil
		}
		return time.Unix(n, 0).UTC(), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999Z0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("not an ISO 8601 timestamp")
}

// NewJobID returns a random UUID v4 (crypto/rand).
func NewJobID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// NewJob returns a job for a worker with a fresh id and both timestamps set to now,
// status dispatched.
func NewJob(workerID, script string) *Job {
	now := time.Now().UTC()
	return &Job{ID: NewJobID(), WorkerID: workerID, Script: script, CreatedAt: now, UpdatedAt: now, Status: StatusDispatched}
}

// BadField is one field of a job hash that cannot be read.
type BadField struct {
	Field  string
	Value  string
	Reason string
}

func (e *BadField) Error() string {
	v := e.Value
	if len(v) > 80 {
		v = v[:80] + "…"
	}
	return fmt.Sprintf("%s %q %s", e.Field, v, e.Reason)
}

// DecodeError lists the fields of a hash that could not be read (in the seed's
// field order); the job holds everything else.
type DecodeError []*BadField

func (e DecodeError) Error() string {
	parts := make([]string, len(e))
	for i, f := range e {
		parts[i] = f.Error()
	}
	return strings.Join(parts, "; ")
}

// Field returns the problem with one field, if any.
func (e DecodeError) Field(name string) *BadField {
	for _, f := range e {
		if f.Field == name {
			return f
		}
	}
	return nil
}

// ParseJob reads a job hash. Unknown fields are ignored and missing ones stay zero;
// a field that cannot be read is left zero and reported in the DecodeError, so the
// job is always returned. id comes from the key when the hash has no id field.
func ParseJob(id string, h map[string]string) (*Job, error) {
	j := &Job{ID: id}
	var bad DecodeError
	fail := func(field, reason string) {
		bad = append(bad, &BadField{Field: field, Value: h[field], Reason: reason})
	}
	if v := strings.TrimSpace(h[FieldID]); v != "" {
		j.ID = v
	}
	j.CallerID = h[FieldCallerID]
	j.WorkerID = h[FieldWorkerID]
	j.ContextID = h[FieldContextID]
	j.Script = h[FieldScript]
	if v, ok := h[FieldTimeout]; ok {
		d, err := ParseTimeout(v)
		if err != nil {
			fail(FieldTimeout, err.Error())
		}
		j.Timeout = d
	}
	if v, ok := h[FieldRetries]; ok {
		n, err := parseRetries(v)
		if err != nil {
			fail(FieldRetries, err.Error())
		}
		j.Retries = n
	}
	if v, ok := h[FieldConcurrent]; ok {
		b, err := parseBool(v)
		if err != nil {
			fail(FieldConcurrent, err.Error())
		}
		j.Concurrent = b
	}
	j.LogPath = strings.TrimSpace(h[FieldLogPath])
	var err error
	if j.CreatedAt, err = ParseTime(h[FieldCreatedAt]); err != nil {
		fail(FieldCreatedAt, err.Error())
	}
	if j.UpdatedAt, err = ParseTime(h[FieldUpdatedAt]); err != nil {
		fail(FieldUpdatedAt, err.Error())
	}
	j.Status = ParseStatus(h[FieldStatus])
	if j.EnvVars, err = parseEnv(h[FieldEnvVars]); err != nil {
		fail(FieldEnvVars, err.Error())
	}
	if j.Prerequisites, err = parseIDList(h[FieldPrerequisites]); err != nil {
		fail(FieldPrerequisites, err.Error())
	}
	if j.Dependents, err = parseIDList(h[FieldDependents]); err != nil {
		fail(FieldDependents, err.Error())
	}
	j.Output = h[FieldOutput]
	j.Error = h[FieldError]
	if j.Dependencies, err = parseIDList(h[FieldDependencies]); err != nil {
		fail(FieldDependencies, err.Error())
	}
	if len(bad) > 0 {
		return j, bad
	}
	return j, nil
}

// ParseTimeout reads the timeout field: seconds, a non-negative number ("30",
// tolerantly "30.5", "30s"); empty means none.
func ParseTimeout(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "s"), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errors.New("is not a number of seconds")
	}
	if f < 0 {
		return 0, errors.New("is negative")
	}
	if f > float64(math.MaxInt64/int64(time.Second)) {
		return 0, errors.New("is too large")
	}
	return time.Duration(f * float64(time.Second)), nil
}

func parseRetries(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > MaxRetries {
		return 0, fmt.Errorf("is not a whole number from 0 to %d", MaxRetries)
	}
	return int(n), nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "false", "0", "no", "off":
		return false, nil
	case "true", "1", "yes", "on":
		return true, nil
	}
	return false, errors.New("is not true or false")
}

// parseEnv reads env_vars: a JSON object; string, number and boolean values are taken
// as their text, null as "".
func parseEnv(v string) (map[string]string, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "null" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(strings.NewReader(v))
	if err := dec.Decode(&raw); err != nil {
		return nil, errors.New("is not a JSON object")
	}
	if dec.More() {
		return nil, errors.New("is not a JSON object (trailing data)")
	}
	out := make(map[string]string, len(raw))
	for k, r := range raw {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("has the variable name %q (empty, or with '=' or NUL)", k)
		}
		r = bytes.TrimSpace(r)
		switch {
		case len(r) == 0 || string(r) == "null":
			out[k] = ""
		case r[0] == '"':
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return nil, fmt.Errorf("has a bad value for %s", k)
			}
			out[k] = s
		case r[0] == '{' || r[0] == '[':
			return nil, fmt.Errorf("has a non-scalar value for %s (want a string, number or boolean)", k)
		default:
			out[k] = string(r) // number, true, false
		}
		if strings.ContainsRune(out[k], 0) {
			return nil, fmt.Errorf("has a NUL byte in the value of %s", k)
		}
	}
	return out, nil
}

// parseIDList reads a list of job ids: a JSON array of strings or numbers; tolerantly
// also "a,b c" (comma or space separated) when the value is not JSON.
func parseIDList(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "null" || v == "[]" {
		return nil, nil
	}
	if strings.HasPrefix(v, "[") {
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(v), &raw); err != nil {
			return nil, errors.New("is not a JSON array of job ids")
		}
		var out []string
		for _, r := range raw {
			r = bytes.TrimSpace(r)
			var s string
			switch {
			case len(r) > 0 && r[0] == '"':
				if err := json.Unmarshal(r, &s); err != nil {
					return nil, errors.New("is not a JSON array of job ids")
				}
			case len(r) > 0 && (r[0] == '-' || (r[0] >= '0' && r[0] <= '9')):
				s = string(r)
			default:
				return nil, errors.New("is not a JSON array of job ids (strings or numbers)")
			}
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out, nil
	}
	f := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if len(f) == 0 {
		return nil, nil
	}
	return f, nil
}

// FormatTimeout writes a timeout as the seed's whole seconds (a fraction is rounded
// up, so that a limit is never shortened).
func FormatTimeout(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// FormatList is a list as the protocol stores it: a JSON array ([] for none).
func FormatList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonMap(m map[string]string) string {
	if m == nil {
		m = map[string]string{}
	}
	b, _ := json.Marshal(m) // encoding/json sorts map keys
	return string(b)
}

// Hash returns the job as the seed's hash fields. Every seed field is written except
// the optional ones while empty (log_path, env_vars, prerequisites, dependents) and
// output/error, which the worker writes.
func (j *Job) Hash() map[string]string {
	h := map[string]string{
		FieldID:           j.ID,
		FieldCallerID:     j.CallerID,
		FieldWorkerID:     j.WorkerID,
		FieldContextID:    j.ContextID,
		FieldScript:       j.Script,
		FieldTimeout:      FormatTimeout(j.Timeout),
		FieldRetries:      strconv.Itoa(j.Retries),
		FieldConcurrent:   strconv.FormatBool(j.Concurrent),
		FieldStatus:       string(j.Status),
		FieldDependencies: FormatList(j.Dependencies),
	}
	if !j.CreatedAt.IsZero() {
		h[FieldCreatedAt] = FormatTime(j.CreatedAt)
	}
	if !j.UpdatedAt.IsZero() {
		h[FieldUpdatedAt] = FormatTime(j.UpdatedAt)
	}
	if j.LogPath != "" {
		h[FieldLogPath] = j.LogPath
	}
	if len(j.EnvVars) > 0 {
		h[FieldEnvVars] = jsonMap(j.EnvVars)
	}
	if len(j.Prerequisites) > 0 {
		h[FieldPrerequisites] = FormatList(j.Prerequisites)
	}
	if len(j.Dependents) > 0 {
		h[FieldDependents] = FormatList(j.Dependents)
	}
	if j.Output != "" {
		h[FieldOutput] = j.Output
	}
	if j.Error != "" {
		h[FieldError] = j.Error
	}
	return h
}

// hashArgs flattens a hash for HSET in a stable order.
func hashArgs(h map[string]string) []any {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, h[k])
	}
	return out
}

// AllDependencies is the union of prerequisites and dependencies, in order, without
// repeats: the jobs that must have finished before this one runs.
func (j *Job) AllDependencies() []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range [][]string{j.Prerequisites, j.Dependencies} {
		for _, d := range l {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// MarshalJSON writes the job with the seed's field names: timeout in seconds,
// timestamps in ISO 8601, lists and maps as JSON.
func (j *Job) MarshalJSON() ([]byte, error) {
	type out struct {
		ID            string            `json:"id"`
		CallerID      string            `json:"caller_id"`
		WorkerID      string            `json:"worker_id"`
		ContextID     string            `json:"context_id"`
		Script        string            `json:"script"`
		Timeout       int64             `json:"timeout"`
		Retries       int               `json:"retries"`
		Concurrent    bool              `json:"concurrent"`
		LogPath       string            `json:"log_path"`
		CreatedAt     string            `json:"created_at"`
		UpdatedAt     string            `json:"updated_at"`
		Status        Status            `json:"status"`
		EnvVars       map[string]string `json:"env_vars"`
		Prerequisites []string          `json:"prerequisites"`
		Dependents    []string          `json:"dependents"`
		Output        string            `json:"output"`
		Error         string            `json:"error"`
		Dependencies  []string          `json:"dependencies"`
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return FormatTime(t)
	}
	nz := func(v []string) []string {
		if v == nil {
			return []string{}
		}
		return v
	}
	env := j.EnvVars
	if env == nil {
		env = map[string]string{}
	}
	timeout, _ := strconv.ParseInt(FormatTimeout(j.Timeout), 10, 64)
	return json.Marshal(out{j.ID, j.CallerID, j.WorkerID, j.ContextID, j.Script, timeout, j.Retries, j.Concurrent, j.LogPath,
		ts(j.CreatedAt), ts(j.UpdatedAt), j.Status, env, nz(j.Prerequisites), nz(j.Dependents), j.Output, j.Error, nz(j.Dependencies)})
}
