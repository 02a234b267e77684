package hero

import (
	"reflect"
	"strings"
	"sync"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// Page is one page of a list, newest first; NextCursor fetches the next ("" at the end).
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// ListOptions filter and page a list.
type ListOptions struct {
	Status string // only objects in this status ("" for all)
	Limit  uint32 // page size (0: the server's default, 100)
	Cursor string // from the previous page's NextCursor
}

// Logs is a piece of a job's log from an offset.
type Logs struct {
	Logs       string `json:"logs"`
	NextOffset int64  `json:"next_offset"`
	Complete   bool   `json:"complete"` // the job has ended and the log is whole
}

// DAG is a flow with each job's place and state (flow.dag).
type DAG struct {
	Flow  *model.Flow `json:"flow"`
	Nodes []*DagNode  `json:"nodes"`
	// NextOffset (a page: FlowDAGPage, or FlowDAG of a flow over 10,000 jobs) is
	// where the next page starts; 0: none. The flow of a page comes without its jobs.
	NextOffset uint32 `json:"next_offset,omitempty"`
	// Counts (a page) are the flow's node counts.
	Counts *FlowCounts `json:"counts,omitempty"`
}

// FlowCounts are a flow's nodes by state, from counters the server keeps (O(1)).
type FlowCounts struct {
	Started   bool   `json:"started"`
	Total     uint32 `json:"total"`
	Ended     uint32 `json:"ended"`
	Completed uint32 `json:"completed"`
	Failed    uint32 `json:"failed"`
	Cancelled uint32 `json:"cancelled"`
	NotEnded  uint32 `json:"not_ended"`
}

func countsOf(c *herov1.FlowCounts) *FlowCounts {
	if c == nil {
		return nil
	}
	return &FlowCounts{Started: c.Started, Total: c.Total, Ended: c.Ended, Completed: c.Completed, Failed: c.Failed, Cancelled: c.Cancelled, NotEnded: c.NotEnded}
}

// DagNode is one job of a DAG.
type DagNode struct {
	ID         uint32           `json:"id"`
	Depends    []uint32         `json:"depends"`
	Dependents []uint32         `json:"dependents"`
	NodeStatus model.NodeStatus `json:"node_status"`
	JobStatus  model.JobStatus  `json:"job_status"`
	Attempt    uint32           `json:"attempt"`
	Error      string           `json:"error,omitempty"`
	ScriptType string           `json:"script_type"`
	// FunctionName is a handler job's executor#handler (its script type may be empty).
	FunctionName string `json:"function_name,omitempty"`
}

// Event is one entry of a context's event stream (the SDK's own type: it links no
// Redis client).
type Event struct {
	ID        string `json:"id"`
	TimeMs    int64  `json:"time_ms"`
	Type      string `json:"type"`  // object.verb: job.created, job.started, flow.finished, …
	Actor     string `json:"actor"` // acting actor id ("7", or "7 via operator:<fingerprint>"), "operator:<fingerprint>", or a service name
	ContextID uint32 `json:"context_id"`
	FlowID    uint32 `json:"flow_id,omitempty"`
	JobID     uint32 `json:"job_id,omitempty"`
	CallerID  uint32 `json:"caller_id,omitempty"`
	Status    string `json:"status,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// Events is a page of events; Next is the position to read after.
type Events struct {
	Events []Event `json:"events"`
	Next   string  `json:"next"`
}

// The objects as the JSON-RPC API gives them: the seed's lists and maps are empty,
// never null (a gRPC message cannot tell the two apart).

// jobOf sets the job's lists and maps itself, not through emptyNotNil's reflection: it
// is on every submission's answer (TestJobOfListsEmptyNotNull checks that it covers
// every field emptyNotNil would).
func jobOf(j *herov1.Job) *model.Job {
	out := protoconv.JobFromPB(j)
	if out.EnvVars == nil {
		out.EnvVars = map[string]string{}
	}
	if out.Result == nil {
		out.Result = map[string]string{}
	}
	if out.Prerequisites == nil {
		out.Prerequisites = []string{}
	}
	if out.Dependends == nil {
		out.Dependends = []uint32{}
	}
	return out
}

func flowOf(f *herov1.Flow) *model.Flow { return emptyNotNil(protoconv.FlowFromPB(f)) }
func eventOf(e *herov1.Event) Event {
	return Event{ID: e.Id, TimeMs: e.TimeMs, Type: e.Type, Actor: e.Actor, ContextID: e.ContextId, FlowID: e.FlowId, JobID: e.JobId, CallerID: e.CallerId, Status: e.Status, Detail: e.Detail}
}
func actorOf(a *herov1.Actor) *model.Actor { return emptyNotNil(protoconv.ActorFromPB(a)) }

// ContextOf converts a gRPC context into the API's object.
func ContextOf(c *herov1.Context) *model.Context { return emptyNotNil(protoconv.ContextFromPB(c)) }

// ActorOf converts a gRPC actor into the API's object.
func ActorOf(a *herov1.Actor) *model.Actor { return actorOf(a) }

// JobOf converts a gRPC job into the API's object.
func JobOf(j *herov1.Job) *model.Job { return jobOf(j) }

// FlowOf converts a gRPC flow into the API's object.
func FlowOf(f *herov1.Flow) *model.Flow { return flowOf(f) }

// RunnerOf converts a gRPC runner into the API's object.
func RunnerOf(r *herov1.Runner) *model.Runner {
	out := protoconv.RunnerFromPB(r)
	for _, p := range r.GetProcesses() {
		out.Processes = append(out.Processes, model.RunnerProcess{ID: p.Id, LastHeartbeat: p.LastHeartbeatMs})
	}
	return out
}

func dagOf(d *herov1.GetFlowDagResponse) *DAG {
	out := &DAG{Flow: flowOf(d.Flow), Nodes: []*DagNode{}, NextOffset: d.NextOffset, Counts: countsOf(d.Counts)}
	for _, n := range d.Nodes {
		out.Nodes = append(out.Nodes, &DagNode{ID: n.Id, Depends: nonNil(n.Depends), Dependents: nonNil(n.Dependents),
			NodeStatus: model.NodeStatus(n.NodeStatus), JobStatus: model.JobStatus(n.JobStatus), Attempt: n.Attempt, Error: n.Error, ScriptType: n.ScriptType, FunctionName: n.FunctionName})
	}
	return out
}

func nonNil(ids []uint32) []uint32 {
	if ids == nil {
		return []uint32{}
	}
	return ids
}

// emptyNotNil makes the nil slices and maps of a struct's fields that are always in
// its JSON (no omitempty) empty ones.
func emptyNotNil[T any](p *T) *T {
	v := reflect.ValueOf(p).Elem()
	for _, i := range listFields(v.Type()) {
		switch f := v.Field(i); {
		case f.Kind() == reflect.Slice && f.IsNil():
			f.Set(reflect.MakeSlice(f.Type(), 0, 0))
		case f.Kind() == reflect.Map && f.IsNil():
			f.Set(reflect.MakeMap(f.Type()))
		}
	}
	return p
}

// listFieldsOf caches listFields per type (reflect.Type → []int).
var listFieldsOf sync.Map

// listFields are the indexes of a struct type's list and map fields (not []byte) that
// are always in its JSON.
func listFields(t reflect.Type) []int {
	if v, ok := listFieldsOf.Load(t); ok {
		return v.([]int)
	}
	var out []int
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || strings.Contains(tag, "omitempty") {
			continue
		}
		if k := f.Type.Kind(); k == reflect.Map || k == reflect.Slice && f.Type.Elem().Kind() != reflect.Uint8 {
			out = append(out, i)
		}
	}
	listFieldsOf.Store(t, out)
	return out
}
