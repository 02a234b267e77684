package model

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ValidationError names the object, the field and the rule that was broken, as in
// `job 12: script_type "pyhton" is not a known script type`.
type ValidationError struct {
	Object string // "job", "flow", …
	ID     string // the object's id, or "" when it has none yet
	Field  string
	Msg    string
}

func (e *ValidationError) Error() string {
	who := e.Object
	if e.ID != "" && e.ID != "0" {
		who += " " + e.ID
	}
	if e.Field == "" {
		return who + ": " + e.Msg
	}
	if strings.HasPrefix(e.Msg, e.Field) {
		return who + ": " + e.Msg
	}
	return who + ": " + e.Field + " " + e.Msg
}

// AsValidation returns the ValidationError inside err, if any.
func AsValidation(err error) (*ValidationError, bool) {
	var v *ValidationError
	ok := errors.As(err, &v)
	return v, ok
}

func verr(object string, id uint32, field, format string, a ...any) error {
	return &ValidationError{Object: object, ID: strconv.FormatUint(uint64(id), 10), Field: field, Msg: fmt.Sprintf(format, a...)}
}

// Limits of what the API accepts.
const (
	MaxScriptBytes   = 1 << 20
	MaxEnvVars       = 256
	MaxEnvValueBytes = 32 << 10
	MaxListLen       = 10000
	MaxStringBytes   = 4096
	// MaxFlowJobs is the ceiling of a flow's job list: the supervisor's own setting
	// (--max-flow-jobs, DefaultMaxFlowJobs unless set) is the limit a flow meets, checked
	// before anything of the flow is stored; MaxListLen bounds one job's dependencies.
	MaxFlowJobs = 1000000
	// DefaultMaxFlowJobs is --max-flow-jobs when not set.
	DefaultMaxFlowJobs = 100000
)

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hex64RE   = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)
)

// ValidateContextID rejects context 0 (DB 0 holds the actors).
func ValidateContextID(id uint32) error {
	if id == 0 {
		return &ValidationError{Object: "context", Field: "context_id", Msg: "context_id must be at least 1 (context 0 would share DB 0 with the actors)"}
	}
	return nil
}

func validateEnv(object string, id uint32, field string, env map[string]string) error {
	if len(env) > MaxEnvVars {
		return verr(object, id, field, "has %d entries, more than %d", len(env), MaxEnvVars)
	}
	for k, v := range env {
		if !envNameRE.MatchString(k) {
			return verr(object, id, field, "name %q is not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
		}
		if strings.HasPrefix(k, "HERO_") {
			return verr(object, id, field, "name %q uses the reserved HERO_ prefix", k)
		}
		if len(v) > MaxEnvValueBytes {
			return verr(object, id, field, "value of %q is %d bytes, more than %d", k, len(v), MaxEnvValueBytes)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return verr(object, id, field, "value of %q contains a NUL byte", k)
		}
	}
	return nil
}

func validateIDs(object string, id uint32, field string, ids []uint32, limit int) error {
	if len(ids) > limit {
		return verr(object, id, field, "has %d entries, more than %d", len(ids), limit)
	}
	seen := make(map[uint32]bool, len(ids))
	for _, x := range ids {
		if x == 0 {
			return verr(object, id, field, "contains id 0; ids start at 1")
		}
		if seen[x] {
			return verr(object, id, field, "lists %d twice", x)
		}
		seen[x] = true
	}
	return nil
}

func validateString(object string, id uint32, field, s string, max int) error {
	if len(s) > max {
		return verr(object, id, field, "is %d bytes, more than %d", len(s), max)
	}
	return nil
}

// Validate checks an Actor.
func (a *Actor) Validate() error {
	if a.Pubkey != "" && !isHexKey(a.Pubkey) {
		return verr("actor", a.ID, "pubkey", "must be an Ed25519 public key: 64 hex characters (heroctl key generate makes one)")
	}
	if len(a.Address) > 64 {
		return verr("actor", a.ID, "address", "has %d entries, more than 64", len(a.Address))
	}
	for _, ad := range a.Address {
		if ad == "" {
			return verr("actor", a.ID, "address", "contains an empty address")
		}
		if err := validateString("actor", a.ID, "address", ad, MaxStringBytes); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a Context.
func (c *Context) Validate() error {
	if c.ID == 0 {
		return &ValidationError{Object: "context", Field: "id", Msg: "id must be at least 1 (context 0 would share DB 0 with the actors)"}
	}
	for _, l := range []struct {
		name string
		ids  []uint32
	}{{"admins", c.Admins}, {"readers", c.Readers}, {"executors", c.Executors}} {
		if err := validateIDs("context", c.ID, l.name, l.ids, MaxListLen); err != nil {
			return err
		}
	}
	if len(c.Admins) == 0 {
		return verr("context", c.ID, "admins", "must name at least one actor")
	}
	if c.RetentionSeconds < 0 {
		return verr("context", c.ID, "retention_seconds", "must not be negative")
	}
	if c.PriorityAgeMs < 0 || c.PriorityAgeMs > PriorityAgeMaxMs {
		return verr("context", c.ID, "priority_age_ms", "%d is not between 0 (the default, %d) and %d", c.PriorityAgeMs, PriorityAgeMs, PriorityAgeMaxMs)
	}
	if c.Weight > MaxWeight {
		return verr("context", c.ID, "weight", "%d is more than %d (0 or 1: one claim per round)", c.Weight, MaxWeight)
	}
	if err := c.JobDefaults.Validate("context", c.ID, "job_defaults"); err != nil {
		return err
	}
	if err := c.JobMax.Validate("context", c.ID, "job_max"); err != nil {
		return err
	}
	if why := c.JobDefaults.Exceeds(c.JobMax); why != "" {
		return verr("context", c.ID, "job_defaults", "%s (job_max)", why)
	}
	for _, pk := range c.AllowedSources {
		if !hex64RE.MatchString(pk) {
			return verr("context", c.ID, "allowed_sources", "%q is not a Mycelium public key (64 hex digits)", pk)
		}
	}
	return nil
}

// Validate checks a Runner.
func (r *Runner) Validate() error {
	if err := validateString("runner", r.ID, "pubkey", r.Pubkey, MaxStringBytes); err != nil {
		return err
	}
	if err := validateString("runner", r.ID, "address", r.Address, MaxStringBytes); err != nil {
		return err
	}
	if err := validateString("runner", r.ID, "topic", r.Topic, 255); err != nil {
		return err
	}
	if !r.Local && r.Pubkey == "" && r.Address == "" {
		return verr("runner", r.ID, "local", "is false, so pubkey or address must say where the runner is")
	}
	for _, t := range r.ScriptTypes {
		if !t.Valid() {
			_, err := ParseScriptType(string(t))
			return verr("runner", r.ID, "script_types", "%v", err)
		}
	}
	if len(r.Executors) > MaxListLen {
		return verr("runner", r.ID, "executors", "has more than %d entries", MaxListLen)
	}
	for _, e := range r.Executors {
		if !isHandlerName(e) {
			return verr("runner", r.ID, "executors", "%q is not a valid executor name ([A-Za-z_][A-Za-z0-9_.:-]*)", e)
		}
	}
	return nil
}

// Validate checks a Job.
func (j *Job) Validate() error {
	if j.CallerID == 0 {
		return verr("job", j.ID, "caller_id", "must be set (the actor creating the job)")
	}
	if err := ValidateContextID(j.ContextID); err != nil {
		return err
	}
	if j.IsHandler() {
		if err := j.validateHandler(); err != nil {
			return err
		}
	}
	if exec, _ := j.Handler(); j.ScriptType == "" && (!j.IsHandler() || exec == "") {
		return verr("job", j.ID, "script_type", "must be set (known: %s)", names(scriptTypes))
	}
	if j.ScriptType != "" && !j.ScriptType.Valid() {
		return verr("job", j.ID, "script_type", "%q is not a known script type (known: %s)", string(j.ScriptType), names(scriptTypes))
	}
	if !j.IsHandler() && strings.TrimSpace(j.Script) == "" {
		return verr("job", j.ID, "script", "must not be empty (or set function_name for a handler job)")
	}
	if len(j.Script) > MaxScriptBytes {
		return verr("job", j.ID, "script", "is %d bytes, more than %d", len(j.Script), MaxScriptBytes)
	}
	if err := validateEnv("job", j.ID, "env_vars", j.EnvVars); err != nil {
		return err
	}
	if err := validateIDs("job", j.ID, "dependends", j.Dependends, MaxListLen); err != nil {
		return err
	}
	for _, d := range j.Dependends {
		if d == j.ID && j.ID != 0 {
			return verr("job", j.ID, "dependends", "lists the job itself")
		}
	}
	if len(j.Prerequisites) > MaxListLen {
		return verr("job", j.ID, "prerequisites", "has more than %d entries", MaxListLen)
	}
	if err := j.validateConcurrency(); err != nil {
		return err
	}
	if j.Priority > PriorityLowest {
		return verr("job", j.ID, "priority", "%d is not a priority (1 first … %d last; 0 or none: %d)", j.Priority, PriorityLowest, PriorityDefault)
	}
	return j.Limits.Validate("job", j.ID, "limits")
}

// validateConcurrency checks a job's concurrency key, limit and policy.
func (j *Job) validateConcurrency() error {
	if len(j.ConcurrencyKey) > MaxConcurrencyKeyLen || strings.ContainsAny(j.ConcurrencyKey, "\t\n\r") {
		return verr("job", j.ID, "concurrency_key", "must be at most %d bytes, without tabs or line breaks", MaxConcurrencyKeyLen)
	}
	if j.ConcurrencyLimit > MaxConcurrencyLimit || (j.ConcurrencyLimit != 0 && j.ConcurrencyKey == "") {
		return verr("job", j.ID, "concurrency_limit", "must be at most %d, and needs a concurrency_key", MaxConcurrencyLimit)
	}
	switch j.ConcurrencyPolicy {
	case "", ConcurrencyQueue, ConcurrencyCancelNewest, ConcurrencyCancelOldest:
		if j.ConcurrencyPolicy != "" && j.ConcurrencyKey == "" {
			return verr("job", j.ID, "concurrency_policy", "needs a concurrency_key")
		}
	default:
		return verr("job", j.ID, "concurrency_policy", "%q is not a policy (%s, %s or %s)", j.ConcurrencyPolicy, ConcurrencyQueue, ConcurrencyCancelNewest, ConcurrencyCancelOldest)
	}
	return nil
}

// Validate checks a Flow's own fields; the DAG is checked when the flow starts.
func (f *Flow) Validate() error {
	if f.CallerID == 0 {
		return verr("flow", f.ID, "caller_id", "must be set (the actor creating the flow)")
	}
	if err := ValidateContextID(f.ContextID); err != nil {
		return err
	}
	if len(f.Jobs) == 0 {
		return verr("flow", f.ID, "jobs", "must list at least one job")
	}
	if err := validateIDs("flow", f.ID, "jobs", f.Jobs, MaxFlowJobs); err != nil {
		return err
	}
	return validateEnv("flow", f.ID, "env_vars", f.EnvVars)
}

// Validate checks a Message.
func (m *Message) Validate() error {
	if m.CallerID == 0 {
		return verr("message", m.ID, "caller_id", "must be set")
	}
	if err := ValidateContextID(m.ContextID); err != nil {
		return err
	}
	if m.MessageType == "" {
		m.MessageType = MessageTypeJob
	}
	if !m.MessageType.Valid() {
		return verr("message", m.ID, "message_type", "%q is not one of %s", string(m.MessageType), names(messageTypes))
	}
	if m.MessageFormatType == "" {
		m.MessageFormatType = FormatText
	}
	if !m.MessageFormatType.Valid() {
		return verr("message", m.ID, "message_format_type", "%q is not one of %s", string(m.MessageFormatType), names(formatTypes))
	}
	if err := validateString("message", m.ID, "message", m.Message, MaxScriptBytes); err != nil {
		return err
	}
	for i := range m.Job {
		if err := m.Job[i].Validate(); err != nil {
			return verr("message", m.ID, "job", "%v", err)
		}
	}
	return nil
}

// isHandlerName reports whether s is a handler or an executor name,
// [A-Za-z_][A-Za-z0-9_.:-]* (checked by hand: a regexp was 2% of supervisor-daemon's
// CPU per submitted job).
func isHandlerName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
		case i > 0 && (c >= '0' && c <= '9' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// validateHandler checks a handler job and fills script_type from the executor prefix.
func (j *Job) validateHandler() error {
	if strings.TrimSpace(j.Script) != "" {
		return verr("job", j.ID, "function_name", "and script are both set; a job is a script or a handler call")
	}
	exec, handler := j.Handler()
	if !isHandlerName(handler) {
		return verr("job", j.ID, "function_name", "%q is not executor#handler or handler (a handler name is [A-Za-z_][A-Za-z0-9_.:-]*)", j.FunctionName)
	}
	if exec != "" && !isHandlerName(exec) {
		return verr("job", j.ID, "function_name", "executor %q in %q is not a valid name", exec, j.FunctionName)
	}
	if j.ScriptType == "" {
		if exec == "" {
			return verr("job", j.ID, "script_type", "must be set for a handler without an executor prefix (or write function_name as executor#handler)")
		}
		// The prefix alone routes the job (to the runners that have that executor);
		// script_type is optional: filled when the executor is named after one.
		if t := ScriptType(exec); t.Valid() {
			j.ScriptType = t
		}
	}
	if len(j.Args) > 0 {
		var a []json.RawMessage
		if err := json.Unmarshal(j.Args, &a); err != nil {
			return verr("job", j.ID, "args", "must be a JSON array")
		}
	}
	if len(j.Kwargs) > 0 {
		var k map[string]json.RawMessage
		if err := json.Unmarshal(j.Kwargs, &k); err != nil || k == nil {
			return verr("job", j.ID, "kwargs", "must be a JSON object")
		}
	}
	if len(j.Args)+len(j.Kwargs) > MaxScriptBytes {
		return verr("job", j.ID, "args", "args and kwargs are more than %d bytes", MaxScriptBytes)
	}
	return nil
}

// isHexKey reports whether s is 32 bytes as hex: an Ed25519 public key.
func isHexKey(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
