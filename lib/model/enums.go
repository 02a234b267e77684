// Package model holds the objects of the Hero coordinator (seeds 001, 002 and 003):
// their fields, enums, validation and the Redis hash encoding shared by every service.
package model

import (
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// FlowStatus is the lifecycle of a Flow (seed 002).
type FlowStatus string

const (
	FlowDispatched FlowStatus = "dispatched"
	// FlowScheduled (ext): flow.start with run_at or delay; it starts at run_at_ms.
	FlowScheduled FlowStatus = "scheduled"
	FlowStarted   FlowStatus = "started"
	FlowError     FlowStatus = "error"
	FlowFinished  FlowStatus = "finished"
)

// JobStatus is the lifecycle of a RunnerJob (seed 002).
type JobStatus string

const (
	JobDispatched JobStatus = "dispatched"
	// JobScheduled (ext): job.submit with run_at or delay; dispatched at run_at_ms.
	JobScheduled               JobStatus = "scheduled"
	JobWaitingForPrerequisites JobStatus = "waiting_for_prerequisites"
	JobStarted                 JobStatus = "started"
	JobError                   JobStatus = "error"
	JobFinished                JobStatus = "finished"
)

// MessageStatus is the lifecycle of a Message (seed 002).
type MessageStatus string

const (
	MessageDispatched   MessageStatus = "dispatched"
	MessageAcknowledged MessageStatus = "acknowledged"
	MessageError        MessageStatus = "error"
	MessageProcessed    MessageStatus = "processed"
)

// MessageType says how a Message is interpreted (seed 002).
type MessageType string

const (
	MessageTypeJob  MessageType = "job"
	MessageTypeChat MessageType = "chat"
	MessageTypeMail MessageType = "mail"
)

// QueueSuffix mirrors the seed's MessageType.queue_suffix().
func (t MessageType) QueueSuffix() string { return string(t) }

// MessageFormatType is a rendering hint for a Message body (seed 002).
type MessageFormatType string

const (
	FormatHTML MessageFormatType = "html"
	FormatText MessageFormatType = "text"
	FormatMD   MessageFormatType = "md"
)

// RunnerType is the runtime family of a runner (seed 002; not stored in the seed).
type RunnerType string

const (
	RunnerTypeV      RunnerType = "v"
	RunnerTypePython RunnerType = "python"
	RunnerTypeOSIS   RunnerType = "osis"
	RunnerTypeRust   RunnerType = "rust"
)

// ScriptType is the language or runtime of a job's script. The seed's osis, sal, v and
// python are extended with the shells and the Hero scripting languages.
type ScriptType string

const (
	ScriptOSIS       ScriptType = "osis"
	ScriptSAL        ScriptType = "sal"
	ScriptV          ScriptType = "v"
	ScriptPython     ScriptType = "python"
	ScriptSh         ScriptType = "sh"
	ScriptBash       ScriptType = "bash"
	ScriptRhai       ScriptType = "rhai"
	ScriptHeroScript ScriptType = "heroscript"
	ScriptRust       ScriptType = "rust"
	ScriptGo         ScriptType = "go"
)

// QueueSuffix mirrors the seed's ScriptType.queue_suffix(): the name of the local job
// queue is "queue:" + suffix.
func (t ScriptType) QueueSuffix() string { return string(t) }

// NodeStatus is the execution state of a DAG node (seed 003).
type NodeStatus string

const (
	NodePending    NodeStatus = "pending"
	NodeReady      NodeStatus = "ready"
	NodeDispatched NodeStatus = "dispatched"
	NodeRunning    NodeStatus = "running"
	NodeCompleted  NodeStatus = "completed"
	NodeFailed     NodeStatus = "failed"
	NodeCancelled  NodeStatus = "cancelled"
)

// Terminal reports whether a node can no longer change.
func (s NodeStatus) Terminal() bool {
	return s == NodeCompleted || s == NodeFailed || s == NodeCancelled
}

// Terminal reports whether a job has ended.
func (s JobStatus) Terminal() bool { return s == JobFinished || s == JobError }

// Terminal reports whether a flow has ended.
func (s FlowStatus) Terminal() bool { return s == FlowFinished || s == FlowError }

var (
	flowStatuses    = []FlowStatus{FlowDispatched, FlowScheduled, FlowStarted, FlowError, FlowFinished}
	jobStatuses     = []JobStatus{JobScheduled, JobDispatched, JobWaitingForPrerequisites, JobStarted, JobError, JobFinished}
	messageStatuses = []MessageStatus{MessageDispatched, MessageAcknowledged, MessageError, MessageProcessed}
	messageTypes    = []MessageType{MessageTypeJob, MessageTypeChat, MessageTypeMail}
	formatTypes     = []MessageFormatType{FormatHTML, FormatText, FormatMD}
	runnerTypes     = []RunnerType{RunnerTypeV, RunnerTypePython, RunnerTypeOSIS, RunnerTypeRust}
	scriptTypes     = []ScriptType{ScriptOSIS, ScriptSAL, ScriptV, ScriptPython, ScriptSh, ScriptBash, ScriptRhai, ScriptHeroScript, ScriptRust, ScriptGo}
	nodeStatuses    = []NodeStatus{NodePending, NodeReady, NodeDispatched, NodeRunning, NodeCompleted, NodeFailed, NodeCancelled}
)

// FlowStatuses lists every FlowStatus value.
func FlowStatuses() []FlowStatus { return append([]FlowStatus(nil), flowStatuses...) }

// JobStatuses lists every JobStatus value.
func JobStatuses() []JobStatus { return append([]JobStatus(nil), jobStatuses...) }

// MessageStatuses lists every MessageStatus value.
func MessageStatuses() []MessageStatus { return append([]MessageStatus(nil), messageStatuses...) }

// ScriptTypes lists every known ScriptType.
func ScriptTypes() []ScriptType { return append([]ScriptType(nil), scriptTypes...) }

// NodeStatuses lists every NodeStatus value.
func NodeStatuses() []NodeStatus { return append([]NodeStatus(nil), nodeStatuses...) }

// RunnerTypes lists every RunnerType value.
func RunnerTypes() []RunnerType { return append([]RunnerType(nil), runnerTypes...) }

func contains[T ~string](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func names[T ~string](list []T) string {
	s := make([]string, len(list))
	for i, v := range list {
		s[i] = string(v)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// Valid reports whether the value is one of the enum's.
func (s FlowStatus) Valid() bool        { return contains(flowStatuses, s) }
func (s JobStatus) Valid() bool         { return contains(jobStatuses, s) }
func (s MessageStatus) Valid() bool     { return contains(messageStatuses, s) }
func (t MessageType) Valid() bool       { return contains(messageTypes, t) }
func (t MessageFormatType) Valid() bool { return contains(formatTypes, t) }
func (t RunnerType) Valid() bool        { return contains(runnerTypes, t) }
func (t ScriptType) Valid() bool        { return contains(scriptTypes, t) }
func (s NodeStatus) Valid() bool        { return contains(nodeStatuses, s) }

// ParseScriptType returns the ScriptType named s or an error that names the known ones.
func ParseScriptType(s string) (ScriptType, error) {
	t := ScriptType(normalizeEnum(s))
	if !t.Valid() {
		return "", fmt.Errorf("%q is not a known script type (known: %s)", s, names(scriptTypes))
	}
	return t, nil
}

// ParseJobStatus returns the JobStatus named s.
func ParseJobStatus(s string) (JobStatus, error) {
	v := JobStatus(normalizeEnum(s))
	if !v.Valid() {
		return "", fmt.Errorf("%q is not a job status (known: %s)", s, names(jobStatuses))
	}
	return v, nil
}

// ParseFlowStatus returns the FlowStatus named s.
func ParseFlowStatus(s string) (FlowStatus, error) {
	v := FlowStatus(normalizeEnum(s))
	if !v.Valid() {
		return "", fmt.Errorf("%q is not a flow status (known: %s)", s, names(flowStatuses))
	}
	return v, nil
}

// ParseMessageStatus returns the MessageStatus named s.
func ParseMessageStatus(s string) (MessageStatus, error) {
	v := MessageStatus(normalizeEnum(s))
	if !v.Valid() {
		return "", fmt.Errorf("%q is not a message status (known: %s)", s, names(messageStatuses))
	}
	return v, nil
}

// normalizeEnum maps spellings that other implementations write (Rust's serde default
// "WaitingForPrerequisites", upper case "ERROR") onto the seeds' lowercase snake_case.
func normalizeEnum(s string) string {
	if isPlainEnum(s) {
		return s // already as stored (every value this stack writes)
	}
	s = strings.TrimSpace(s)
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 && !unicode.IsUpper(rune(s[i-1])) && s[i-1] != '_' {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// UnmarshalText accepts the spellings normalizeEnum knows, inside JSON too.
func (s *FlowStatus) UnmarshalText(b []byte) error {
	*s = FlowStatus(normalizeEnum(string(b)))
	return nil
}
func (s *JobStatus) UnmarshalText(b []byte) error {
	*s = JobStatus(normalizeEnum(string(b)))
	return nil
}
func (s *MessageStatus) UnmarshalText(b []byte) error {
	*s = MessageStatus(normalizeEnum(string(b)))
	return nil
}
func (t *MessageType) UnmarshalText(b []byte) error {
	*t = MessageType(normalizeEnum(string(b)))
	return nil
}
func (t *MessageFormatType) UnmarshalText(b []byte) error {
	*t = MessageFormatType(normalizeEnum(string(b)))
	return nil
}
func (t *ScriptType) UnmarshalText(b []byte) error {
	*t = ScriptType(normalizeEnum(string(b)))
	return nil
}
func (s *NodeStatus) UnmarshalText(b []byte) error {
	*s = NodeStatus(normalizeEnum(string(b)))
	return nil
}
func (t *RunnerType) UnmarshalText(b []byte) error {
	*t = RunnerType(normalizeEnum(string(b)))
	return nil
}

// isPlainEnum reports whether s is an enum's stored spelling already: lowercase ASCII
// letters, digits and underscores (normalizeEnum would return it unchanged).
func isPlainEnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
