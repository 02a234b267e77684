// Package protoconv converts between the model (lib/model) and the gRPC messages
// (hero.v1), both ways, field by field. It links no Redis client: the Go SDK uses
// it (events, which lib/store defines, are converted where they are served).
package protoconv

import (
	"encoding/json"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"

	"github.com/hero-coordinator/hero/lib/model"
)

func ActorToPB(a *model.Actor) *herov1.Actor {
	if a == nil {
		return nil
	}
	return &herov1.Actor{Id: a.ID, Pubkey: a.Pubkey, Address: a.Address, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

func ActorFromPB(a *herov1.Actor) *model.Actor {
	if a == nil {
		return &model.Actor{}
	}
	return &model.Actor{ID: a.Id, Pubkey: a.Pubkey, Address: a.Address, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

func ContextToPB(c *model.Context) *herov1.Context {
	if c == nil {
		return nil
	}
	return &herov1.Context{Id: c.ID, Admins: c.Admins, Readers: c.Readers, Executors: c.Executors, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, RetentionSeconds: c.RetentionSeconds, AllowedSources: c.AllowedSources,
		JobDefaults: LimitsToPB(c.JobDefaults), JobMax: LimitsToPB(c.JobMax), PriorityAgeMs: c.PriorityAgeMs, Weight: c.Weight}
}

// LimitsToPB converts job limits (nil stays nil).
func LimitsToPB(l *model.JobLimits) *herov1.JobLimits {
	if l == nil {
		return nil
	}
	return &herov1.JobLimits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CpuMillis: l.CPUMillis, FileSizeBytes: l.FileSizeBytes, DiskBytes: l.DiskBytes, Network: l.Network}
}

// LimitsFromPB converts job limits; an unset or empty message is nil.
func LimitsFromPB(l *herov1.JobLimits) *model.JobLimits {
	if l == nil {
		return nil
	}
	out := &model.JobLimits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUMillis: l.CpuMillis, FileSizeBytes: l.FileSizeBytes, DiskBytes: l.DiskBytes, Network: l.Network}
	if out.IsZero() {
		return nil
	}
	return out
}

func ContextFromPB(c *herov1.Context) *model.Context {
	if c == nil {
		return &model.Context{}
	}
	return &model.Context{ID: c.Id, Admins: c.Admins, Readers: c.Readers, Executors: c.Executors, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, RetentionSeconds: c.RetentionSeconds, AllowedSources: c.AllowedSources,
		JobDefaults: LimitsFromPB(c.JobDefaults), JobMax: LimitsFromPB(c.JobMax), PriorityAgeMs: c.PriorityAgeMs, Weight: c.Weight}
}

func RunnerToPB(r *model.Runner) *herov1.Runner {
	if r == nil {
		return nil
	}
	out := &herov1.Runner{Id: r.ID, Pubkey: r.Pubkey, Address: r.Address, Topic: r.Topic, Local: r.Local, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	for _, t := range r.ScriptTypes {
		out.ScriptTypes = append(out.ScriptTypes, string(t))
	}
	out.Executors = r.Executors
	for _, p := range r.Processes {
		out.Processes = append(out.Processes, &herov1.RunnerProcess{Id: p.ID, LastHeartbeatMs: p.LastHeartbeat})
	}
	return out
}

func RunnerFromPB(r *herov1.Runner) *model.Runner {
	if r == nil {
		return &model.Runner{}
	}
	out := &model.Runner{ID: r.Id, Pubkey: r.Pubkey, Address: r.Address, Topic: r.Topic, Local: r.Local, Secret: r.Secret, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	for _, t := range r.ScriptTypes {
		out.ScriptTypes = append(out.ScriptTypes, model.ScriptType(t))
	}
	out.Executors = r.Executors
	return out
}

func JobToPB(j *model.Job) *herov1.Job {
	if j == nil {
		return nil
	}
	return &herov1.Job{
		Id: j.ID, CallerId: j.CallerID, ContextId: j.ContextID, Script: j.Script, ScriptType: string(j.ScriptType),
		Timeout: j.Timeout, Retries: uint32(j.Retries), EnvVars: j.EnvVars, Result: j.Result, Prerequisites: j.Prerequisites,
		Dependends: j.Dependends, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, Status: string(j.Status), RunnerId: j.RunnerID,
		FlowId: j.FlowID, Error: j.Error, ExitCode: int32(j.ExitCode), Attempt: j.Attempt, Worker: j.Worker,
		StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, CreatedAtMs: j.CreatedAtMs, ReadyAtMs: j.ReadyAtMs,
		DispatchedAtMs: j.DispatchedMs, StartedAtMs: j.StartedAtMs, FinishedAtMs: j.FinishedAtMs,
		FunctionName: j.FunctionName, Args: string(j.Args), Kwargs: string(j.Kwargs), TraceId: j.TraceID, DlqAtMs: j.DLQAtMs,
		ResultJson: string(j.ResultJSON), Traceparent: j.Traceparent, Fatal: j.Fatal, StopRequested: j.StopAsked, RetryAfterMs: j.RetryAfterMs, StartedAtUs: j.StartedAtUs, FinishedAtUs: j.FinishedAtUs, RunAtMs: j.RunAtMs,
		Origin: originToPB(j.Origin), DepResults: depResultsToPB(j.DepResults), Limits: LimitsToPB(j.Limits), Priority: uint32(j.Priority),
		ConcurrencyKey: j.ConcurrencyKey, ConcurrencyLimit: j.ConcurrencyLimit, ConcurrencyPolicy: j.ConcurrencyPolicy, Held: j.Held,
		ScheduleId: j.ScheduleID, ScheduleTickMs: j.ScheduleTickMs,
		DebounceKey: j.DebounceKey,
	}
}

// originToPB and depResultsToPB are jsonOrEmpty of a job's origin and dependencies'
// results without the encoder for the usual job, which has neither (each Submit's
// job, and its answer, is converted).
func originToPB(o *model.Origin) string {
	if o == nil {
		return ""
	}
	return jsonOrEmpty(o)
}

func depResultsToPB(d map[string]map[string]string) string {
	if d == nil {
		return ""
	}
	return jsonOrEmpty(d)
}

func jsonOrEmpty[T any](v T) string {
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return ""
	}
	return string(b)
}

// JobFromPB converts a job; retries above 255 are clamped by the caller's validation.
func JobFromPB(j *herov1.Job) *model.Job {
	if j == nil {
		return &model.Job{}
	}
	retries := j.Retries
	if retries > 255 {
		retries = 255
	}
	out := &model.Job{
		ID: j.Id, CallerID: j.CallerId, ContextID: j.ContextId, Script: j.Script, ScriptType: model.ScriptType(j.ScriptType),
		Timeout: j.Timeout, Retries: uint8(retries), EnvVars: j.EnvVars, Result: j.Result, Prerequisites: j.Prerequisites,
		Dependends: j.Dependends, CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, Status: model.JobStatus(j.Status), RunnerID: j.RunnerId,
		FlowID: j.FlowId, Error: j.Error, ExitCode: int(j.ExitCode), Attempt: j.Attempt, Worker: j.Worker,
		StartedAt: j.StartedAt, FinishedAt: j.FinishedAt, CreatedAtMs: j.CreatedAtMs, ReadyAtMs: j.ReadyAtMs,
		DispatchedMs: j.DispatchedAtMs, StartedAtMs: j.StartedAtMs, FinishedAtMs: j.FinishedAtMs,
		FunctionName: j.FunctionName, TraceID: j.TraceId, DLQAtMs: j.DlqAtMs,
		Args: rawOrNil(j.Args), Kwargs: rawOrNil(j.Kwargs), Limits: LimitsFromPB(j.Limits), ResultJSON: rawOrNil(j.ResultJson), Traceparent: j.Traceparent,
		Fatal: j.Fatal, StopAsked: j.StopRequested, RetryAfterMs: j.RetryAfterMs, StartedAtUs: j.StartedAtUs, FinishedAtUs: j.FinishedAtUs, RunAtMs: j.RunAtMs,
		Priority: uint8(min(j.Priority, 255)), ConcurrencyKey: j.ConcurrencyKey, ConcurrencyLimit: j.ConcurrencyLimit, ConcurrencyPolicy: j.ConcurrencyPolicy, Held: j.Held,
		ScheduleID: j.ScheduleId, ScheduleTickMs: j.ScheduleTickMs,
		DebounceKey: j.DebounceKey,
	}
	if j.Origin != "" {
		var o model.Origin
		if json.Unmarshal([]byte(j.Origin), &o) == nil {
			out.Origin = &o
		}
	}
	if j.DepResults != "" {
		_ = json.Unmarshal([]byte(j.DepResults), &out.DepResults)
	}
	return out
}

func rawOrNil(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

func FlowToPB(f *model.Flow) *herov1.Flow {
	if f == nil {
		return nil
	}
	return &herov1.Flow{
		Id: f.ID, CallerId: f.CallerID, ContextId: f.ContextID, Jobs: f.Jobs, EnvVars: f.EnvVars, Result: f.Result,
		CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt, Status: string(f.Status), Error: f.Error, FailedJob: f.FailedJob,
		StartedAt: f.StartedAt, FinishedAt: f.FinishedAt, CancelledBy: f.CancelledBy, Traceparent: f.Traceparent,
		CreatedAtMs: f.CreatedAtMs, StartedAtMs: f.StartedAtMs, FinishedAtMs: f.EndedAtMs, RunAtMs: f.RunAtMs,
		ScheduleId: f.ScheduleID, ScheduleTickMs: f.ScheduleTickMs, Paused: f.Paused, PauseNote: f.PauseNote,
	}
}

func FlowFromPB(f *herov1.Flow) *model.Flow {
	if f == nil {
		return &model.Flow{}
	}
	return &model.Flow{
		ID: f.Id, CallerID: f.CallerId, ContextID: f.ContextId, Jobs: f.Jobs, EnvVars: f.EnvVars, Result: f.Result,
		CreatedAt: f.CreatedAt, UpdatedAt: f.UpdatedAt, Status: model.FlowStatus(f.Status), Error: f.Error, FailedJob: f.FailedJob,
		StartedAt: f.StartedAt, FinishedAt: f.FinishedAt, CancelledBy: f.CancelledBy, Traceparent: f.Traceparent,
		CreatedAtMs: f.CreatedAtMs, StartedAtMs: f.StartedAtMs, EndedAtMs: f.FinishedAtMs, RunAtMs: f.RunAtMs,
		ScheduleID: f.ScheduleId, ScheduleTickMs: f.ScheduleTickMs, Paused: f.Paused, PauseNote: f.PauseNote,
	}
}

func MessageToPB(m *model.Message) *herov1.Message {
	if m == nil {
		return nil
	}
	out := &herov1.Message{
		Id: m.ID, CallerId: m.CallerID, ContextId: m.ContextID, Message: m.Message, MessageType: string(m.MessageType),
		MessageFormatType: string(m.MessageFormatType), Timeout: m.Timeout, TimeoutAck: m.TimeoutAck, TimeoutResult: m.TimeoutResult,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, Status: string(m.Status), FlowId: m.FlowID, TransportId: m.TransportID,
		Kind: m.Kind, Error: m.Error, OriginMsg: m.OriginMsg, TransportDst: m.TransportDst, SentAtMs: m.SentAtMs, AckedAtMs: m.AckedAtMs,
	}
	for i := range m.Job {
		out.Job = append(out.Job, JobToPB(&m.Job[i]))
	}
	for _, l := range m.Logs {
		out.Logs = append(out.Logs, &herov1.Log{Timestamp: l.Timestamp, Message: l.Message})
	}
	for _, n := range m.Nodes {
		out.Nodes = append(out.Nodes, &herov1.FlowNode{Id: n.ID, Depends: n.Depends, Prerequisites: n.Prerequisites, SupervisorUrl: n.SupervisorURL, NodeStatus: string(n.NodeStatus)})
	}
	return out
}

func MessageFromPB(m *herov1.Message) *model.Message {
	if m == nil {
		return &model.Message{}
	}
	out := &model.Message{
		ID: m.Id, CallerID: m.CallerId, ContextID: m.ContextId, Message: m.Message, MessageType: model.MessageType(m.MessageType),
		MessageFormatType: model.MessageFormatType(m.MessageFormatType), Timeout: m.Timeout, TimeoutAck: m.TimeoutAck, TimeoutResult: m.TimeoutResult,
		CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt, Status: model.MessageStatus(m.Status), FlowID: m.FlowId, TransportID: m.TransportId,
		Kind: m.Kind, Error: m.Error, OriginMsg: m.OriginMsg, TransportDst: m.TransportDst, SentAtMs: m.SentAtMs, AckedAtMs: m.AckedAtMs,
	}
	for _, j := range m.Job {
		out.Job = append(out.Job, *JobFromPB(j))
	}
	for _, l := range m.Logs {
		out.Logs = append(out.Logs, model.Log{Timestamp: l.Timestamp, Message: l.Message})
	}
	for _, n := range m.Nodes {
		out.Nodes = append(out.Nodes, model.FlowNode{ID: n.Id, Depends: n.Depends, Prerequisites: n.Prerequisites, SupervisorURL: n.SupervisorUrl, NodeStatus: model.NodeStatus(n.NodeStatus)})
	}
	return out
}
