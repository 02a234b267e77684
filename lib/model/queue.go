package model

import (
	"errors"
	"fmt"
)

// Queue is one of a context's job queues, as queue.list, queue.pause and queue.resume
// show it (docs/scheduling.md, "Pause and resume"): a script type's (queue:<type>) or
// an executor's (queue:exec:<executor>).
type Queue struct {
	Queue      string `json:"queue"` // its key: queue:<type> or queue:exec:<executor>
	ScriptType string `json:"script_type,omitempty"`
	Executor   string `json:"executor,omitempty"`
	Depth      int64  `json:"depth"`            // jobs queued on it (those with a priority too)
	Pinned     int64  `json:"pinned,omitempty"` // its jobs queued for one runner (runner_id)
	Runners    int64  `json:"runners"`          // runners of the context that serve it
	Paused     bool   `json:"paused"`
	PausedAtMs int64  `json:"paused_at_ms,omitempty"`
	PausedBy   string `json:"paused_by,omitempty"`
	PauseNote  string `json:"pause_note,omitempty"`
}

// QueueRef names a queue by its script type or its executor (exactly one of them).
type QueueRef struct {
	ScriptType string `json:"script_type,omitempty"`
	Executor   string `json:"executor,omitempty"`
}

// Suffix checks the reference and returns the queue's name after "queue:" (<type>,
// exec:<executor>); the error names the field that is wrong.
func (r QueueRef) Suffix() (string, error) {
	switch {
	case r.ScriptType != "" && r.Executor != "":
		return "", errors.New("script_type: give script_type or executor, not both")
	case r.Executor != "":
		if !isHandlerName(r.Executor) {
			return "", fmt.Errorf("executor: %q is not a valid executor name ([A-Za-z_][A-Za-z0-9_.:-]*)", r.Executor)
		}
		return ExecQueueSuffix(r.Executor), nil
	case r.ScriptType != "":
		t, err := ParseScriptType(r.ScriptType)
		if err != nil {
			return "", fmt.Errorf("script_type: %w", err)
		}
		return t.QueueSuffix(), nil
	}
	return "", errors.New("script_type: give the queue's script_type or executor")
}
