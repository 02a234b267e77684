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
