package model

// EventType names a state change in a context's event stream (coord:events):
// "<object>.<verb>". The store's Lua scripts get these values from the prelude that
// lib/store generates from this list, so a type is spelled in one place.
type EventType string

const (
	EventContextCreated   EventType = "context.created"
	EventContextUpdated   EventType = "context.updated"
	EventRunnerCreated    EventType = "runner.created"
	EventRunnerDeleted    EventType = "runner.deleted"
	EventFlowCreated      EventType = "flow.created"
	EventFlowScheduled    EventType = "flow.scheduled"
	EventFlowPaused       EventType = "flow.paused"
	EventFlowResumed      EventType = "flow.resumed"
	EventFlowStarted      EventType = "flow.started"
	EventFlowFinished     EventType = "flow.finished"
	EventFlowError        EventType = "flow.error"
	EventFlowCancelled    EventType = "flow.cancelled"
	EventFlowRetried      EventType = "flow.retried"
	EventFlowDeleted      EventType = "flow.deleted"
	EventJobCreated       EventType = "job.created"
	EventJobDispatched    EventType = "job.dispatched"
	EventJobStarted       EventType = "job.started"
	EventJobFinished      EventType = "job.finished"
	EventJobFailed        EventType = "job.failed"
	EventJobRetried       EventType = "job.retried"
	EventJobCancelled     EventType = "job.cancelled"
	EventJobStopRequested EventType = "job.stop_requested"
	EventJobDeadLettered  EventType = "job.dead_lettered"
	EventJobRequeued      EventType = "job.requeued"
	EventJobDeleted       EventType = "job.deleted"
	EventJobHeld          EventType = "job.held" // a claim held it back at a limit (its detail says which)
	EventJobReleased      EventType = "job.released"
	EventDLQPurged        EventType = "dlq.purged"
	EventQueuePaused      EventType = "queue.paused" // queue.pause (its detail: the queue and the note)
	EventQueueResumed     EventType = "queue.resumed"
)

var eventTypes = []EventType{
	EventContextCreated, EventContextUpdated, EventRunnerCreated, EventRunnerDeleted,
	EventFlowCreated, EventFlowScheduled, EventFlowPaused, EventFlowResumed, EventFlowStarted, EventFlowFinished, EventFlowError, EventFlowCancelled, EventFlowRetried, EventFlowDeleted,
	EventJobCreated, EventJobDispatched, EventJobStarted, EventJobFinished, EventJobFailed, EventJobRetried, EventJobCancelled,
	EventJobStopRequested, EventJobDeadLettered, EventJobRequeued, EventJobDeleted, EventDLQPurged,
	EventJobHeld, EventJobReleased,
	EventQueuePaused, EventQueueResumed,
}

// EventTypes lists every EventType value.
func EventTypes() []EventType { return append([]EventType(nil), eventTypes...) }

// storedEventTypes are the short codes the event stream stores for the job events
// every job of a flow writes (issue 49, memory: about 10 B of each of a job's four
// events); every other type is stored as it is spelled. Reads give the type back
// (EventTypeOfStored), so entries written before, with the full type, read the same.
var storedEventTypes = map[EventType]string{
	EventJobCreated: "c", EventJobDispatched: "d", EventJobStarted: "s", EventJobFinished: "f", EventJobFailed: "x",
}

// Stored is the type as the event stream stores it: its short code, or itself.
func (t EventType) Stored() string {
	if c, ok := storedEventTypes[t]; ok {
		return c
	}
	return string(t)
}

// EventTypeOfStored is the type of a stream entry's stored type (Stored's inverse):
// a short code's type; anything else as it is.
func EventTypeOfStored(s string) string {
	if len(s) == 1 {
		for t, c := range storedEventTypes {
			if c == s {
				return string(t)
			}
		}
	}
	return s
}
