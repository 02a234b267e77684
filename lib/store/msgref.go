package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// A local job message (a job request or a job result this node writes for its own
// router and scheduler) names its jobs instead of carrying them: its field job holds a
// list of jobRefs, what the message's consumers read (the router's claim script reads
// the ids at the start of the JSON; the router reads a result's end from it), and its
// field job_ref is "1". The full jobs are in their hashes: LoadMessageKey reads them
// there, so that a message loaded through the API holds full jobs as before. A job
// message that crosses nodes (sent to or received from another node, and the result
// of a job that came from one) carries its full job.
//
// A job as a message carried it was ~1.5 KB of JSON: values over 64 bytes make Redis
// keep the whole message as a hash table instead of a listpack, and Lua moved the JSON
// through its strings (docs/benchmarks.md).
const fieldJobRef = "job_ref"

// jobRef is one job of a local job message's list: its ids and, for a result, the end
// of the run the message reports.
type jobRef struct {
	ID       uint32          `json:"id"`        // first, then caller_id: claim_message.lua reads them so
	CallerID uint32          `json:"caller_id"` //
	FlowID   uint32          `json:"flow_id,omitempty"`
	Attempt  uint32          `json:"attempt,omitempty"`
	Status   model.JobStatus `json:"status,omitempty"`
	Error    string          `json:"error,omitempty"`
	Fatal    bool            `json:"fatal,omitempty"`
}

// localMessageFields are the field/value pairs of a local job message m without its
// id, job and nodes (its writer writes the job list; LoadMessageKey makes the nodes)
// and the fields named in skip, and without the fields beyond the seed's that hold
// nothing (flow_id 0, transport_id "", which no one reads of such a message): each
// field costs Redis on every write and read of the message.
//
// The status comes first: a script that decides it (a message routed at once is
// stored acknowledged; lib_state's store_message) writes its own in its place.
func localMessageFields(m *model.Message, skip ...string) []any {
	fields := model.HashFields(m)
	out := make([]any, 2, len(fields))
	out[0], out[1] = "status", string(m.Status)
	for i := 0; i+1 < len(fields); i += 2 {
		name, v := fields[i].(string), fields[i+1].(string)
		switch {
		case name == "id" || name == "job" || name == "nodes" || name == "status" || slices.Contains(skip, name):
		case name == "flow_id" && v == "0", name == "transport_id" && v == "":
		default:
			out = append(out, fields[i], fields[i+1])
		}
	}
	return out
}

// requestRef is the JSON a job request message lists for job j.
func requestRef(j *model.Job) []byte {
	b, err := json.Marshal(jobRef{ID: j.ID, CallerID: j.CallerID, FlowID: j.FlowID})
	if err != nil {
		return []byte(`{}`) // plain data; cannot happen
	}
	return b
}

// resultRef is the JSON a job result message lists for the run of j that ended so.
func resultRef(j *model.Job, st model.JobStatus, errText string, fatal bool) []byte {
	b, err := json.Marshal(jobRef{ID: j.ID, CallerID: j.CallerID, FlowID: j.FlowID, Attempt: j.Attempt, Status: st, Error: errText, Fatal: fatal})
	if err != nil {
		return []byte(`{}`) // plain data; cannot happen
	}
	return b
}

// resolveJobs replaces the jobs a local job message names (h: its hash, m: decoded from
// it) by the jobs as their hashes hold them: a request's jobs as they are now (and its
// nodes, which such a message does not store, made from them as the request would have
// listed them), a result's with the end the message reports (attempt, status, error,
// fatal) and without the script, as a result message carried them. A job gone since
// stays as the message names it.
func (d *DB) resolveJobs(ctx context.Context, m *model.Message, h map[string]string) error {
	if h[fieldJobRef] != "1" || len(m.Job) == 0 {
		return nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(m.Job))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range m.Job {
			cmds[i] = p.HGetAll(ctx, keys.Job(m.Job[i].CallerID, m.Job[i].ID))
		}
		return nil
	}); err != nil && err != redis.Nil {
		return fmt.Errorf("load the jobs of message %d of caller %d: %w", m.ID, m.CallerID, err)
	}
	request := m.Kind == model.KindJobRequest && h["nodes"] == ""
	if request {
		m.Nodes = make([]model.FlowNode, 0, len(m.Job))
	}
	for i := range m.Job {
		ref := m.Job[i]
		if m.Job[i].ContextID == 0 {
			m.Job[i].ContextID = d.ContextID
		}
		if hv := cmds[i].Val(); len(hv) > 0 {
			var full model.Job
			if err := model.FromHash(keys.Job(ref.CallerID, ref.ID), hv, &full); err != nil {
				return err
			}
			if full.ContextID == 0 {
				full.ContextID = d.ContextID
			}
			if m.Kind == model.KindJobResult {
				full.Attempt, full.Status, full.Error, full.Fatal = ref.Attempt, ref.Status, ref.Error, ref.Fatal
				full.Script = ""
			}
			m.Job[i] = full
		}
		if request {
			m.Nodes = append(m.Nodes, RequestNode(&m.Job[i]))
		}
	}
	return nil
}
