package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Lists with filters. The status filter is the API's own (an index per status, so
// "failed only" costs one page however many jobs there are); the others (script
// type, executor, time range, text) are applied to the pages the API returns, a
// bounded number of them per answer (maxScan items), which then carries the cursor
// to scan on from.

const (
	maxScan  = 5000  // items one list answer scans at most
	maxBulk  = 10000 // items one bulk action acts on at most
	scanPage = 500
)

// filter is what a list or bulk action keeps.
type filter struct {
	Kind       string `json:"kind"` // jobs, flows, dlq
	ContextID  uint32 `json:"context_id"`
	Status     string `json:"status"`
	ScriptType string `json:"script_type"`
	Executor   string `json:"executor"` // a handler job's executor (function executor#handler)
	Since      int64  `json:"since"`    // created at or after (unix seconds)
	Until      int64  `json:"until"`    // created before (unix seconds)
	Text       string `json:"text"`     // in the id, function, script type, env or result keys
}

// item is the part of a listed job, flow or DLQ entry the filters read.
type item struct {
	ID           uint32            `json:"id"`
	ScriptType   string            `json:"script_type"`
	FunctionName string            `json:"function_name"`
	CreatedAt    int64             `json:"created_at"`
	EnvVars      map[string]string `json:"env_vars"`
	Result       map[string]string `json:"result"`
}

var listMethods = map[string]string{"jobs": "job.list", "flows": "flow.list", "dlq": "dlq.list", "runners": "runner.list"}

func (f *filter) check() error {
	if _, ok := listMethods[f.Kind]; !ok {
		return fmt.Errorf("kind %q is not jobs, flows, dlq or runners", f.Kind)
	}
	if f.ContextID == 0 {
		return fmt.Errorf("context_id is required")
	}
	if f.Since < 0 || f.Until < 0 || (f.Until > 0 && f.Until <= f.Since) {
		return fmt.Errorf("the time range since %d until %d is empty or negative", f.Since, f.Until)
	}
	return nil
}

// scanning says whether the filter needs more than the API's status index.
func (f *filter) scanning() bool {
	return f.ScriptType != "" || f.Executor != "" || f.Since != 0 || f.Until != 0 || f.Text != ""
}

func (f *filter) keep(raw json.RawMessage) bool {
	if !f.scanning() {
		return true
	}
	var it item
	if json.Unmarshal(raw, &it) != nil {
		return false
	}
	switch {
	case f.ScriptType != "" && it.ScriptType != f.ScriptType:
		return false
	case f.Executor != "" && !strings.HasPrefix(it.FunctionName, f.Executor+"#"):
		return false
	case f.Since != 0 && it.CreatedAt < f.Since:
		return false
	case f.Until != 0 && it.CreatedAt >= f.Until:
		return false
	}
	return f.Text == "" || it.matches(f.Text)
}

func (it *item) matches(text string) bool {
	t := strings.ToLower(text)
	if strings.Contains(strconv.FormatUint(uint64(it.ID), 10), t) || strings.Contains(strings.ToLower(it.FunctionName), t) || strings.Contains(it.ScriptType, t) {
		return true
	}
	for _, m := range []map[string]string{it.EnvVars, it.Result} {
		for k := range m {
			if strings.Contains(strings.ToLower(k), t) {
				return true
			}
		}
	}
	return false
}

type page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor"`
}

// scan pages the API's list from cursor and keeps what the filter keeps, until want
// items are kept or max are scanned. next is where to go on ("" at the end).
func (c *Console) scan(ctx context.Context, id Identity, f *filter, cursor string, want, max int) (kept []json.RawMessage, next string, scanned int, err error) {
	limit := want
	if f.scanning() {
		limit = scanPage
	}
	kept = []json.RawMessage{}
	for {
		params := map[string]any{"context_id": f.ContextID, "limit": limit, "cursor": cursor}
		if f.Status != "" && f.Kind != "dlq" {
			params["status"] = f.Status
		}
		out, err := c.b.Call(ctx, id, listMethods[f.Kind], params)
		if err != nil {
			return nil, "", scanned, err
		}
		var p page
		if err := json.Unmarshal(out, &p); err != nil {
			return nil, "", scanned, err
		}
		scanned += len(p.Items)
		for _, raw := range p.Items {
			if f.keep(raw) {
				kept = append(kept, raw)
			}
		}
		cursor = p.NextCursor
		if cursor == "" || len(kept) >= want || scanned >= max {
			return kept, cursor, scanned, nil
		}
	}
}

func filterOf(r *http.Request) (*filter, error) {
	q := r.URL.Query()
	f := &filter{Kind: q.Get("kind"), Status: q.Get("status"), ScriptType: q.Get("script_type"), Executor: q.Get("executor"), Text: q.Get("text")}
	var err error
	if f.ContextID, err = queryUint(r, "context_id", true); err != nil {
		return nil, err
	}
	for _, t := range []struct {
		name string
		to   *int64
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := q.Get(t.name); v != "" {
			if *t.to, err = strconv.ParseInt(v, 10, 64); err != nil {
				return nil, fmt.Errorf("%s %q is not unix seconds", t.name, v)
			}
		}
	}
	return f, f.check()
}

// list answers one page of a filtered list.
func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	f, err := filterOf(r)
	if err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	limit := 50
	if v := r.URL.Query().Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 500 {
			fail(w, http.StatusBadRequest, fmt.Sprintf("limit %q is not between 1 and 500", v))
			return
		}
	}
	items, next, scanned, err := c.scan(r.Context(), sessionOf(r).identity(), f, r.URL.Query().Get("cursor"), limit, maxScan)
	if err != nil {
		failAPI(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "next_cursor": next, "scanned": scanned})
}

type bulkRequest struct {
	filter
	Action string   `json:"action"`
	IDs    []uint32 `json:"ids"`     // these (flows) instead of a filter
	Refs   []ref    `json:"refs"`    // these (jobs, DLQ entries) instead of a filter
	DryRun bool     `json:"dry_run"` // count what the filter matches, act on nothing
}

type ref struct {
	CallerID uint32 `json:"caller_id"`
	ID       uint32 `json:"id"`
}

// bulkActions: the API method of each action and the list it acts over.
var bulkActions = map[string]string{"flow.cancel": "flows", "flow.retry": "flows", "flow.delete": "flows", "job.stop": "jobs",
	"dlq.requeue": "dlq", "dlq.purge": "dlq"}

type bulkFailure struct {
	ID    uint32 `json:"id"`
	Error string `json:"error"`
}

// bulk acts on every item a filter matches (at most maxBulk), or on the ids given,
// one API call each: each is checked as the API checks it.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request) {
	var in bulkRequest
	if !decodeBody(w, r, &in) {
		return
	}
	kind, ok := bulkActions[in.Action]
	if !ok {
		fail(w, http.StatusBadRequest, fmt.Sprintf("action %q is not one of flow.cancel, flow.retry, flow.delete, job.stop, dlq.requeue, dlq.purge", in.Action))
		return
	}
	in.Kind = kind
	if err := in.check(); err != nil {
		fail(w, http.StatusBadRequest, err.Error())
		return
	}
	id := sessionOf(r).identity()
	refs := in.Refs
	for _, i := range in.IDs {
		refs = append(refs, ref{ID: i})
	}
	if len(refs) == 0 {
		items, _, _, err := c.scan(r.Context(), id, &in.filter, "", maxBulk, maxBulk)
		if err != nil {
			failAPI(w, err)
			return
		}
		for _, raw := range items {
			var rf ref
			if json.Unmarshal(raw, &rf) == nil {
				refs = append(refs, rf)
			}
		}
	}
	if len(refs) > maxBulk {
		fail(w, http.StatusBadRequest, fmt.Sprintf("%d items is more than the %d one bulk action takes", len(refs), maxBulk))
		return
	}
	if in.DryRun {
		writeJSON(w, http.StatusOK, map[string]any{"matched": len(refs), "done": 0, "failed": []bulkFailure{}})
		return
	}
	done, failed := 0, []bulkFailure{}
	for _, rf := range refs {
		params := map[string]any{"context_id": in.ContextID, "id": rf.ID}
		if kind != "flows" {
			params["caller_id"] = rf.CallerID
		}
		if _, err := c.b.Call(r.Context(), id, in.Action, params); err != nil {
			if len(failed) < 50 {
				failed = append(failed, bulkFailure{ID: rf.ID, Error: err.Error()})
			}
			continue
		}
		done++
	}
	c.log.Info().Str("action", in.Action).Uint32("context_id", in.ContextID).Int("matched", len(refs)).Int("done", done).Msg("console bulk action")
	writeJSON(w, http.StatusOK, map[string]any{"matched": len(refs), "done": done, "failed": failed})
}
