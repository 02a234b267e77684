package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

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

// A standalone job's request message routed to a runner of this node at its submission
// (lua/submit.lua: acknowledged at once) and its result message when its successful end
// is applied at its finish (lua/finish_jobs.lua: processed at once) are no one's to
// read but through the API: no router or scheduler claims them. They are stored short,
// one field whose value holds what is their own — req "<created_at_ms> <job id>",
// res "<created_at_ms> <entry>" (the run's resultRef) — and a read makes the message
// they stood for (expandShort), the same fields as those the scripts wrote before
// (each was a listpack of ~13 fields, ~27k Redis instructions a message to write:
// docs/benchmarks.md).
//
// The result message of a flow's runs whose successful ends a finish applies together
// (lua/finish_jobs.lua, grouped: processed at once) is stored short too: gres
// "<created_at_ms> <flow id> <runs of the finish call> <the job list>" (the list a JSON
// array of the runs' resultRefs), from which a read makes the message of ~10 fields
// and the list in parts that the script wrote before (~10k Redis instructions a run).
const (
	fieldShortRequest      = "req"
	fieldShortResult       = "res"
	fieldShortGroupResults = "gres"
)

// expandShort returns the message hash h of key as it reads: a short message
// (fieldShortRequest, fieldShortResult) made into the hash it stands for, any other
// h itself.
func (d *DB) expandShort(key string, h map[string]string) map[string]string {
	if len(h) != 1 {
		return h
	}
	v, request := h[fieldShortRequest]
	group := false
	if !request {
		var ok bool
		if v, ok = h[fieldShortResult]; !ok {
			if v, group = h[fieldShortGroupResults]; !group {
				return h
			}
		}
	}
	caller, id, err := keys.ParseMessageKey(key)
	msStr, rest, ok := strings.Cut(v, " ")
	ms, errMs := strconv.ParseInt(msStr, 10, 64)
	if err != nil || !ok || errMs != nil {
		return h
	}
	ctxS, callerS := strconv.FormatUint(uint64(d.ContextID), 10), strconv.FormatUint(uint64(caller), 10)
	out := map[string]string{
		"id": strconv.FormatUint(uint64(id), 10), "caller_id": callerS, "context_id": ctxS,
		"updated_at": strconv.FormatInt(ms/1000, 10), "created_at_ms": msStr, fieldJobRef: "1",
	}
	if request {
		jobID, err := strconv.ParseUint(rest, 10, 32)
		if err != nil {
			return h
		}
		ref := model.JobRef{ContextID: d.ContextID, CallerID: caller, ID: uint32(jobID)}
		out["status"], out["kind"] = string(model.MessageAcknowledged), model.KindJobRequest
		out["message"] = "job " + ref.String()
		out["job"] = `[{"id":` + rest + `,"caller_id":` + callerS + `}]`
		return out
	}
	if group {
		return expandGroupResults(out, rest, h)
	}
	var r resultJobRef
	if err := json.Unmarshal([]byte(rest), &r); err != nil {
		return h
	}
	out["status"], out["kind"] = string(model.MessageProcessed), model.KindJobResult
	out["message"] = "result of job " + model.JobRef{ContextID: d.ContextID, CallerID: caller, ID: r.ID}.String()
	out["job"] = "[" + rest + "]"
	return out
}

// expandGroupResults completes out, the fields every short message makes, with those
// of a flow's grouped result message from rest, gres' value after its time
// ("<flow id> <runs> <job list>"); h (as stored) when rest is not that.
func expandGroupResults(out map[string]string, rest string, h map[string]string) map[string]string {
	flow, rest, ok1 := strings.Cut(rest, " ")
	runs, list, ok2 := strings.Cut(rest, " ")
	_, errF := strconv.ParseUint(flow, 10, 32)
	_, errN := strconv.ParseUint(runs, 10, 32)
	if !ok1 || !ok2 || errF != nil || errN != nil || !strings.HasPrefix(list, "[") {
		return h
	}
	out["status"], out["kind"] = string(model.MessageProcessed), model.KindJobResult
	out["message"] = "results of " + runs + " jobs of flow " + flow
	out["flow_id"] = flow
	out["job"] = list
	return out
}

// localMessageFields are the field/value pairs of a local job message m without its
// id, job and nodes (its writer writes the job list; LoadMessageKey makes the nodes)
// and the fields named in skip, and without the fields beyond the seed's that hold
// nothing (flow_id 0, transport_id "", which no one reads of such a message), nor the
// seed's that hold their default (timeout, timeout_ack and timeout_result 0, logs [],
// message_type job, message_format_type text) or that a read derives (created_at,
// from created_at_ms): MessageFromHash fills them back. Each field costs Redis on
// every write and read of the message, and memory (issue 49: ~110 B of each of a big
// flow's group messages, ~14 B a finished job).
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
		case name == "flow_id" && v == "0", name == "transport_id" && v == "", localDefault(m, name, v):
		default:
			out = append(out, fields[i], fields[i+1])
		}
	}
	return out
}

// localDefault says whether a local job message's field name holds v, its default or
// what a read derives (localMessageFields leaves it out, fillLocalDefaults gives it
// back).
func localDefault(m *model.Message, name, v string) bool {
	switch name {
	case "timeout", "timeout_ack", "timeout_result":
		return v == "0"
	case "logs":
		return v == "[]"
	case "message_type":
		return v == string(model.MessageTypeJob)
	case "message_format_type":
		return v == string(model.FormatText)
	case "created_at":
		return m.CreatedAtMs != 0 && v == strconv.FormatInt(m.CreatedAtMs/1000, 10)
	}
	return false
}

// fillLocalDefaults gives a local job message read from its hash the fields its
// writer left out (localDefault); a message stored with them reads the same.
func fillLocalDefaults(m *model.Message) {
	if m.MessageType == "" {
		m.MessageType = model.MessageTypeJob
	}
	if m.MessageFormatType == "" {
		m.MessageFormatType = model.FormatText
	}
	if m.Logs == nil {
		m.Logs = []model.Log{}
	}
	if m.CreatedAt == 0 && m.CreatedAtMs != 0 {
		m.CreatedAt = m.CreatedAtMs / 1000
	}
}

// partFields are the fields of a local job message that its scripts store in parts of
// at most 64 bytes (lib_state.lua's part_fields: <name>, <name>.n, <name>.2, …), so
// that Redis keeps the message as a listpack (issue 49).
var partFields = []string{"job", "job_ids"}

// joinParts returns the message hash h with the fields stored in parts joined (h
// itself when it has none) and, for a local job request that lists its jobs by their
// ids alone (job_ids, without job), its job list made from them with the message's
// caller and flow, as such a message stored it before: every reader of a message hash
// (MessageFromHash) gets the fields whole.
func joinParts(h map[string]string) map[string]string {
	parted := false
	for _, f := range partFields {
		parted = parted || h[f+".n"] != ""
	}
	derive := h[fieldJobRef] == "1" && h["job"] == "" && h["job_ids"] != ""
	if !parted && !derive {
		return h
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[k] = v
	}
	for _, f := range partFields {
		n, _ := strconv.Atoi(h[f+".n"])
		if n < 2 {
			continue
		}
		var b strings.Builder
		b.WriteString(h[f])
		for k := 2; k <= n; k++ {
			b.WriteString(h[f+"."+strconv.Itoa(k)])
			delete(out, f+"."+strconv.Itoa(k))
		}
		delete(out, f+".n")
		out[f] = b.String()
	}
	if derive {
		caller, _ := strconv.ParseUint(out["caller_id"], 10, 32)
		flow, _ := strconv.ParseUint(out["flow_id"], 10, 32)
		var list []byte
		for _, f := range strings.Fields(out["job_ids"]) {
			id, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				continue
			}
			ref, _ := json.Marshal(jobRef{ID: uint32(id), CallerID: uint32(caller), FlowID: uint32(flow)})
			list = append(append(list, listSep(list)), ref...)
		}
		if list != nil {
			out["job"] = string(append(list, ']'))
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

// resultJobRef is a job of a local job result message's list: its id and the end of
// its run. Its caller and flow are the message's (caller_id, flow_id), which a read
// gives each job of the list (MessageFromHash; the router's quick path reads them
// beside the list): ~26 B a job less of a group's message (issue 49).
type resultJobRef struct {
	ID      uint32          `json:"id"`
	Attempt uint32          `json:"attempt,omitempty"`
	Status  model.JobStatus `json:"status,omitempty"`
	Error   string          `json:"error,omitempty"`
	Fatal   bool            `json:"fatal,omitempty"`
}

// resultRef is the JSON a job result message lists for the run of j that ended so.
func resultRef(j *model.Job, st model.JobStatus, errText string, fatal bool) []byte {
	b, err := json.Marshal(resultJobRef{ID: j.ID, Attempt: j.Attempt, Status: st, Error: errText, Fatal: fatal})
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
