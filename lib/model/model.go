package model

import (
	"encoding/json"
	"strings"
)

// Field tags: `hash:"name"` is the field's name in the Redis hash and in JSON. Options:
// "omitempty" leaves zero values out of the hash; "ms" marks extra millisecond
// timestamps. See docs/data-model.md for the encoding of every field.

// Actor is an identity that requests work and administers contexts (seed 002 §1).
// Actors are global: they live in DB 0 under actor:<id>.
type Actor struct {
	ID        uint32   `hash:"id" json:"id"`
	Pubkey    string   `hash:"pubkey" json:"pubkey"`
	Address   []string `hash:"address" json:"address"`
	CreatedAt int64    `hash:"created_at" json:"created_at"`
	UpdatedAt int64    `hash:"updated_at" json:"updated_at"`
}

// Context is a tenant with its permission lists (seed 002 §2). Context N lives in DB N.
type Context struct {
	ID        uint32   `hash:"id" json:"id"`
	Admins    []uint32 `hash:"admins" json:"admins"`
	Readers   []uint32 `hash:"readers" json:"readers"`
	Executors []uint32 `hash:"executors" json:"executors"`
	CreatedAt int64    `hash:"created_at" json:"created_at"`
	UpdatedAt int64    `hash:"updated_at" json:"updated_at"`

	// Extension: how long finished flows and jobs are kept (0: the scheduler's default).
	RetentionSeconds int64 `hash:"retention_seconds,omitempty" json:"retention_seconds,omitempty"`
	// Extension: the Mycelium public keys of the nodes allowed to send jobs into this
	// context (mycelium-gateway checks the source of every inbound job).
	AllowedSources []string `hash:"allowed_sources,omitempty" json:"allowed_sources,omitempty"`
	// Extension: the limits this context's jobs get unless they ask (its admins set
	// them), and the most a job of it may ask for (operators only).
	JobDefaults *JobLimits `hash:"job_defaults,omitempty" json:"job_defaults,omitempty"`
	JobMax      *JobLimits `hash:"job_max,omitempty" json:"job_max,omitempty"`
	// Extension: how much a job's wait counts against a better priority (ms per step
	// of priority; 0: PriorityAgeMs): a job is passed only by jobs of a better
	// priority queued less than (their priority's steps over its) × this after it
	// (docs/scheduling.md).
	PriorityAgeMs int64 `hash:"priority_age_ms,omitempty" json:"priority_age_ms,omitempty"`
	// Extension: the context's share of a runner it shares with other contexts (its
	// claims per round of the runner's wake list: 0 or 1 one, up to MaxWeight;
	// operators only; docs/scheduling.md).
	Weight uint32 `hash:"weight,omitempty" json:"weight,omitempty"`
}

// Flow is a DAG workflow of jobs (seed 002 §3). Its DAG edges live in each job's
// dependends; the node states in the side hash coord:dag:<id>.
type Flow struct {
	ID        uint32            `hash:"id" json:"id"`
	CallerID  uint32            `hash:"caller_id" json:"caller_id"`
	ContextID uint32            `hash:"context_id" json:"context_id"`
	Jobs      []uint32          `hash:"jobs" json:"jobs"`
	EnvVars   map[string]string `hash:"env_vars" json:"env_vars"`
	Result    map[string]string `hash:"result" json:"result"`
	CreatedAt int64             `hash:"created_at" json:"created_at"`
	UpdatedAt int64             `hash:"updated_at" json:"updated_at"`
	Status    FlowStatus        `hash:"status" json:"status"`

	// Extensions beyond the seed.
	Error       string `hash:"error,omitempty" json:"error,omitempty"`
	FailedJob   uint32 `hash:"failed_job,omitempty" json:"failed_job,omitempty"`
	CancelledBy string `hash:"cancelled_by,omitempty" json:"cancelled_by,omitempty"`
	StartedAt   int64  `hash:"started_at,omitempty" json:"started_at,omitempty"`
	FinishedAt  int64  `hash:"finished_at,omitempty" json:"finished_at,omitempty"`
	CreatedAtMs int64  `hash:"created_at_ms,omitempty" json:"created_at_ms,omitempty"`
	StartedAtMs int64  `hash:"started_at_ms,omitempty" json:"started_at_ms,omitempty"`
	EndedAtMs   int64  `hash:"finished_at_ms,omitempty" json:"finished_at_ms,omitempty"`
	// RunAtMs is when a scheduled flow starts (flow.start with run_at or delay).
	RunAtMs int64 `hash:"run_at_ms,omitempty" json:"run_at_ms,omitempty"`
	// Paused: flow.pause; no new job of the flow is dispatched until flow.resume.
	Paused    bool   `hash:"paused,omitempty" json:"paused,omitempty"`
	PauseNote string `hash:"pause_note,omitempty" json:"pause_note,omitempty"`
	// Traceparent is the producer's W3C traceparent (flow.create's or flow.start's
	// header): the trace of every job of the flow.
	Traceparent string `hash:"traceparent,omitempty" json:"traceparent,omitempty"`
	// A schedule's run: the schedule and the tick (its nominal time, ms) that made it.
	ScheduleID     string `hash:"schedule_id,omitempty" json:"schedule_id,omitempty"`
	ScheduleTickMs int64  `hash:"schedule_tick_ms,omitempty" json:"schedule_tick_ms,omitempty"`
}

// Log is one line of a Message's log stream.
type Log struct {
	Timestamp int64  `json:"timestamp"`
	Message   string `json:"message"`
}

// FlowNode is the orchestration view of one job in a flow (seed 003).
type FlowNode struct {
	ID            uint32     `json:"id"`
	Depends       []uint32   `json:"depends"`
	Prerequisites []string   `json:"prerequisites"`
	SupervisorURL string     `json:"supervisor_url"`
	NodeStatus    NodeStatus `json:"node_status"`
}

// Message is the transport unit between the coordinator's parts and between nodes
// (seed 001's field list, plus seed 003's flow_id, nodes and transport_id).
type Message struct {
	ID                uint32            `hash:"id" json:"id"`
	CallerID          uint32            `hash:"caller_id" json:"caller_id"`
	ContextID         uint32            `hash:"context_id" json:"context_id"`
	Message           string            `hash:"message" json:"message"`
	MessageType       MessageType       `hash:"message_type" json:"message_type"`
	MessageFormatType MessageFormatType `hash:"message_format_type" json:"message_format_type"`
	Timeout           uint32            `hash:"timeout" json:"timeout"`
	TimeoutAck        uint32            `hash:"timeout_ack" json:"timeout_ack"`
	TimeoutResult     uint32            `hash:"timeout_result" json:"timeout_result"`
	Job               []Job             `hash:"job" json:"job"`
	Logs              []Log             `hash:"logs" json:"logs"`
	CreatedAt         int64             `hash:"created_at" json:"created_at"`
	UpdatedAt         int64             `hash:"updated_at" json:"updated_at"`
	Status            MessageStatus     `hash:"status" json:"status"`

	// Seed 003.
	FlowID      uint32     `hash:"flow_id" json:"flow_id"`
	Nodes       []FlowNode `hash:"nodes" json:"nodes"`
	TransportID string     `hash:"transport_id" json:"transport_id"`

	// Extensions: what the message is about, for routing and the delivery state.
	Kind        string `hash:"kind,omitempty" json:"kind,omitempty"`
	Error       string `hash:"error,omitempty" json:"error,omitempty"`
	CreatedAtMs int64  `hash:"created_at_ms,omitempty" json:"created_at_ms,omitempty"`
	// Remote delivery (mycelium-gateway): where it was sent, when, and when acknowledged.
	TransportDst string `hash:"transport_dst,omitempty" json:"transport_dst,omitempty"`
	SentAtMs     int64  `hash:"sent_at_ms,omitempty" json:"sent_at_ms,omitempty"`
	AckedAtMs    int64  `hash:"acked_at_ms,omitempty" json:"acked_at_ms,omitempty"`
	// OriginMsg: for a result coming back, the key of the request message it answers.
	OriginMsg string `hash:"origin_msg,omitempty" json:"origin_msg,omitempty"`
}

// Message kinds (the extension field "kind"): what a job message carries.
const (
	KindJobRequest = "job_request" // a job to run, scheduler → router → runner
	KindJobResult  = "job_result"  // a finished job, runner → router → scheduler
)

// Runner is a worker registration in a context (seed 002 §5, seed 003's secret).
type Runner struct {
	ID        uint32 `hash:"id" json:"id"`
	Pubkey    string `hash:"pubkey" json:"pubkey"`
	Address   string `hash:"address" json:"address"`
	Topic     string `hash:"topic" json:"topic"`
	Local     bool   `hash:"local" json:"local"`
	Secret    string `hash:"secret,omitempty" json:"-"`
	CreatedAt int64  `hash:"created_at" json:"created_at"`
	UpdatedAt int64  `hash:"updated_at" json:"updated_at"`

	// Extensions: the script types the runner's processes serve (announced by them,
	// or declared at creation) and the live processes (from coord:runner:<id>:procs).
	ScriptTypes []ScriptType    `hash:"script_types,omitempty" json:"script_types"`
	Executors   []string        `hash:"executors,omitempty" json:"executors,omitempty"` // announced RRQ executors
	Processes   []RunnerProcess `hash:"-" json:"processes,omitempty"`
}

// RunnerProcess is one live process serving a Runner record.
type RunnerProcess struct {
	ID            string `json:"id"`
	LastHeartbeat int64  `json:"last_heartbeat_ms"`
}

// Job is a RunnerJob (seed 002 §6), stored under job:<caller_id>:<id>.
type Job struct {
	ID            uint32            `hash:"id" json:"id"`
	CallerID      uint32            `hash:"caller_id" json:"caller_id"`
	ContextID     uint32            `hash:"context_id" json:"context_id"`
	Script        string            `hash:"script" json:"script"`
	ScriptType    ScriptType        `hash:"script_type" json:"script_type"`
	Timeout       uint32            `hash:"timeout" json:"timeout"`
	Retries       uint8             `hash:"retries" json:"retries"`
	EnvVars       map[string]string `hash:"env_vars" json:"env_vars"`
	Result        map[string]string `hash:"result" json:"result"`
	Prerequisites []string          `hash:"prerequisites" json:"prerequisites"`
	Dependends    []uint32          `hash:"dependends" json:"dependends"`
	CreatedAt     int64             `hash:"created_at" json:"created_at"`
	UpdatedAt     int64             `hash:"updated_at" json:"updated_at"`
	Status        JobStatus         `hash:"status" json:"status"`

	// Handler jobs (seed 004): a call of a handler in a long-lived executor process
	// instead of a script. FunctionName is "executor#handler" or "handler".
	FunctionName string          `hash:"function_name,omitempty" json:"function_name,omitempty"`
	Args         json.RawMessage `hash:"args,omitempty" json:"args,omitempty"`
	Kwargs       json.RawMessage `hash:"kwargs,omitempty" json:"kwargs,omitempty"`
	// ResultJSON is a handler's result as the executor returned it (any JSON value),
	// beside Result, the seed's string map made from it; empty for script jobs.
	ResultJSON json.RawMessage `hash:"result_json,omitempty" json:"result_json,omitempty"`

	// Extensions beyond the seed.
	RunnerID uint32 `hash:"runner_id,omitempty" json:"runner_id,omitempty"`
	// Priority orders the job within its queue: 1 first … 5 last (0: PriorityDefault),
	// with ageing (Context.PriorityAgeMs; docs/scheduling.md).
	Priority uint8 `hash:"priority,omitempty" json:"priority,omitempty"`
	// ConcurrencyKey groups jobs of the context (any string the producer sets, e.g. a
	// customer id): at most ConcurrencyLimit of them (0: 1) run at once; the others
	// wait, held, in order, and the keys take turns (docs/scheduling.md).
	ConcurrencyKey   string `hash:"concurrency_key,omitempty" json:"concurrency_key,omitempty"`
	ConcurrencyLimit uint32 `hash:"concurrency_limit,omitempty" json:"concurrency_limit,omitempty"`
	// ConcurrencyPolicy says what happens to a job of a key at its limit:
	// ConcurrencyQueue (none: the default) holds it, ConcurrencyCancelNewest cancels
	// it, ConcurrencyCancelOldest cancels the key's oldest job in flight instead.
	ConcurrencyPolicy string `hash:"concurrency_policy,omitempty" json:"concurrency_policy,omitempty"`
	// Held says why a claim held the job back (a limit it met) until it goes back to
	// its queue.
	Held string `hash:"held,omitempty" json:"held,omitempty"`
	// DebounceKey is the submission's debounce key: of the jobs submitted with it
	// within the window, only the last runs (docs/scheduling.md).
	DebounceKey string `hash:"debounce_key,omitempty" json:"debounce_key,omitempty"`
	// Limited: its last claim started it under its context's run or rate limits
	// (limit.set): the end of its run gives its slot back.
	Limited bool `hash:"limited,omitempty" json:"-"`
	// Awaited: a job.run call waits for the job (its submission's): the runner's finish
	// tells its successful end with its hash, which the call answers with without a
	// read of its own (lib/store ParseJobDone).
	Awaited  bool   `hash:"awaited,omitempty" json:"-"`
	FlowID   uint32 `hash:"flow_id,omitempty" json:"flow_id,omitempty"`
	Error    string `hash:"error,omitempty" json:"error,omitempty"`
	ExitCode int    `hash:"exit_code,omitempty" json:"exit_code,omitempty"`
	Attempt  uint32 `hash:"attempt,omitempty" json:"attempt,omitempty"`
	Worker   string `hash:"worker,omitempty" json:"worker,omitempty"`
	Fatal    bool   `hash:"fatal,omitempty" json:"fatal,omitempty"`
	TraceID  string `hash:"trace_id,omitempty" json:"trace_id,omitempty"` // W3C trace id of the last run
	// Traceparent is the producer's W3C traceparent (the submission's header, or its
	// flow's): every attempt continues its trace.
	Traceparent  string `hash:"traceparent,omitempty" json:"traceparent,omitempty"`
	RetryAfterMs int64  `hash:"retry_after_ms,omitempty" json:"retry_after_ms,omitempty"` // an executor's requested retry delay
	DLQAtMs      int64  `hash:"dlq_at_ms,omitempty" json:"dlq_at_ms,omitempty"`           // when the job entered the dead-letter queue
	// The limits the job asks for (within its context's job_max); the runner fills
	// in the rest from the context's job_defaults and its own defaults.
	Limits *JobLimits `hash:"limits,omitempty" json:"limits,omitempty"`

	// Remote execution: a job materialised on this node for another node's flow
	// carries where it came from, and its dependencies' results (the far node's).
	Origin       *Origin                      `hash:"origin,omitempty" json:"origin,omitempty"`
	DepResults   map[string]map[string]string `hash:"dep_results,omitempty" json:"dep_results,omitempty"`       // the last error is not worth a retry
	StopAsked    bool                         `hash:"stop_requested,omitempty" json:"stop_requested,omitempty"` // job.stop was called
	StartedAt    int64                        `hash:"started_at,omitempty" json:"started_at,omitempty"`
	FinishedAt   int64                        `hash:"finished_at,omitempty" json:"finished_at,omitempty"`
	CreatedAtMs  int64                        `hash:"created_at_ms,omitempty" json:"created_at_ms,omitempty"`
	ReadyAtMs    int64                        `hash:"ready_at_ms,omitempty" json:"ready_at_ms,omitempty"`
	DispatchedMs int64                        `hash:"dispatched_at_ms,omitempty" json:"dispatched_at_ms,omitempty"`
	StartedAtMs  int64                        `hash:"started_at_ms,omitempty" json:"started_at_ms,omitempty"`
	FinishedAtMs int64                        `hash:"finished_at_ms,omitempty" json:"finished_at_ms,omitempty"`
	// RunAtMs is when a delayed job is dispatched (job.submit with run_at or delay).
	RunAtMs int64 `hash:"run_at_ms,omitempty" json:"run_at_ms,omitempty"`
	// A schedule's run: the schedule and the tick (its nominal time, ms) that made it.
	ScheduleID     string `hash:"schedule_id,omitempty" json:"schedule_id,omitempty"`
	ScheduleTickMs int64  `hash:"schedule_tick_ms,omitempty" json:"schedule_tick_ms,omitempty"`
	// Microsecond times of the last start and end (the runner's clock), for latencies
	// below a millisecond (the dependent hop: started_at_us − the dependency's finished_at_us).
	StartedAtUs  int64 `hash:"started_at_us,omitempty" json:"started_at_us,omitempty"`
	FinishedAtUs int64 `hash:"finished_at_us,omitempty" json:"finished_at_us,omitempty"`
}

// GlobalKey names a job outside its context: <context_id>:<caller_id>:<id>.
func (j *Job) GlobalKey() string { return JobRef{j.ContextID, j.CallerID, j.ID}.String() }

// Ref returns the job's reference.
func (j *Job) Ref() JobRef { return JobRef{j.ContextID, j.CallerID, j.ID} }

// Handler splits FunctionName into its executor prefix ("" when none) and handler.
func (j *Job) Handler() (executor, handler string) {
	if e, h, ok := strings.Cut(j.FunctionName, "#"); ok {
		return e, h
	}
	return "", j.FunctionName
}

// QueueSuffix names the job's queue ("queue:" + suffix): a handler job that names its
// executor ("executor#handler") goes to "exec:<executor>", served by the runners that
// have that executor; any other job to its script type's queue.
func (j *Job) QueueSuffix() string {
	if e, _ := j.Handler(); e != "" {
		return ExecQueueSuffix(e)
	}
	return j.ScriptType.QueueSuffix()
}

// ExecQueueSuffix is the queue suffix of an executor's handler jobs.
func ExecQueueSuffix(executor string) string { return "exec:" + executor }

// IsHandler reports whether the job calls a handler instead of running a script.
func (j *Job) IsHandler() bool { return j.FunctionName != "" }

// Origin says where a remotely materialised job came from and where its result goes.
type Origin struct {
	PK        string `json:"pk"`         // the origin node's Mycelium public key
	ContextID uint32 `json:"context_id"` // the context on the origin node
	MsgKey    string `json:"msg_key"`    // the request message on the origin node
	// TakeByMs: the job must be queued here before this time (Unix ms; 0: no bound),
	// else it is dropped — its origin has given up on it (lib/remote).
	TakeByMs int64 `json:"take_by_ms,omitempty"`
}
