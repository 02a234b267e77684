package store

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/hero-coordinator/hero/lib/model"
)

// A creation's answer is the job as its hash decodes (createdJob decodes the fields it
// wrote without the hash): for jobs with no optional field, every field set, and JSON
// written with spaces.
func TestCreatedJobAsStored(t *testing.T) {
	d := &DB{ContextID: 5}
	full := &model.Job{CallerID: 2, ContextID: 5, Script: "echo", ScriptType: "sh", Timeout: 9, Retries: 3,
		EnvVars: map[string]string{"A": "b"}, Prerequisites: []string{"x"}, Dependends: []uint32{4, 5},
		FunctionName: "go#noop", Args: json.RawMessage(` [1, {"a": 2}] `), Kwargs: json.RawMessage(`{"k": "v"}`),
		RunnerID: 7, Traceparent: "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
		Limits: &model.JobLimits{}, DepResults: map[string]map[string]string{"1": {"a": "b"}}}
	for name, j := range map[string]*model.Job{
		"plain":           {CallerID: 2, ContextID: 5, Script: "true", ScriptType: "sh"},
		"every field":     full,
		"no context id":   {CallerID: 2, Script: "true", ScriptType: "sh"},
		"empty, not nil":  {CallerID: 2, ContextID: 5, ScriptType: "sh", EnvVars: map[string]string{}, Prerequisites: []string{}, Dependends: []uint32{}},
		"an enum spelled": {CallerID: 2, ContextID: 5, ScriptType: "Python"},
	} {
		j.Status, j.CreatedAt, j.UpdatedAt, j.CreatedAtMs = model.JobDispatched, 100, 100, 100000
		cmp, ini := splitFields(j, jobInitialOnly)
		c := createSpec{compare: cmp, initial: ini}
		got, err := d.createdJob(2, 11, c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := d.JobFromHash(2, 11, createdHash(c, 11))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
		if got.ID != 11 || got.ContextID != 5 || strconv.Itoa(int(got.CallerID)) != "2" {
			t.Errorf("%s: ids %d/%d/%d", name, got.ContextID, got.CallerID, got.ID)
		}
	}
}

// createdHash is the hash the create script stores for c under id (what createdJob
// decodes without it).
func createdHash(c createSpec, id uint32) map[string]string {
	h := make(map[string]string, (len(c.compare)+len(c.initial))/2+1)
	h["id"] = strconv.FormatUint(uint64(id), 10)
	for _, kv := range [][]any{c.compare, c.initial} {
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			v, ok := kv[i+1].(string)
			if !ok {
				v = fmt.Sprint(kv[i+1])
			}
			h[k] = v
		}
	}
	return h
}

// A dispatch script's reply is read job by job (a message key and its attempt, or ""
// and why); one of another length, or an attempt that is no number, is an error, not
// jobs silently left undispatched.
func TestDispatchedOfRefusesAMalformedReply(t *testing.T) {
	jobs := []*model.Job{{ID: 7}, {ID: 8}}
	got, err := dispatchedOf(jobs, []dispatchDispatched{{Msg: "message:1:3", Attempt: "2"}, {Msg: "", Attempt: "not due"}})
	if err != nil || len(got) != 2 || got[0] != (Dispatched{JobID: 7, MsgKey: "message:1:3", Attempt: 2}) || got[1] != (Dispatched{JobID: 8, Why: "not due"}) {
		t.Fatalf("a good reply: %+v, %v", got, err)
	}
	for _, bad := range [][]flowStartDispatchDispatched{
		{{Msg: "message:1:3", Attempt: "1"}},                                     // one job short
		{{Msg: "message:1:3", Attempt: "1"}, {Msg: "message:1:3", Attempt: "x"}}, // no number
		{{Msg: "message:1:3", Attempt: "0"}, {Msg: "", Attempt: "held"}},         // no attempt 0
	} {
		if got, err := dispatchedOf(jobs, bad); err == nil {
			t.Errorf("reply %+v: %+v, want an error", bad, got)
		}
	}
}
