package e2e

import (
	"context"
	"sort"
	"strings"
	"testing"

	rkeys "github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// snapshot is every key of DB 0 and DB 1 with its length-ish fingerprint; the used
// nonces of signed requests (coord:nonce:*) are the authentication's, and the sweep
// lock (coord:sweeplock, taken and left to expire by the replicas' lease sweep) the
// services', not stored state.
func snapshot(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, db := range []int{0, 1, 2, 9} {
		c := redisSrv.Client(t, db)
		for _, k := range redisSrv.Keys(t, db) {
			if strings.HasPrefix(k, "coord:nonce:") || k == rkeys.SweepLock {
				continue
			}
			typ := c.Type(context.Background(), k).Val()
			fp := typ
			switch typ {
			case "hash":
				m := c.HGetAll(context.Background(), k).Val()
				delete(m, "updated_at")
				keys := make([]string, 0, len(m))
				for f, v := range m {
					keys = append(keys, f+"="+v)
				}
				sort.Strings(keys)
				fp += strings.Join(keys, ";")
			case "list":
				fp += strings.Join(c.LRange(context.Background(), k, 0, -1).Val(), ",")
			case "stream":
				fp += string(rune('0' + c.XLen(context.Background(), k).Val()))
			}
			out[string(rune('0'+db))+"/"+k] = fp
		}
	}
	return out
}

func diff(a, b map[string]string) []string {
	var d []string
	for k, v := range b {
		if a[k] != v {
			d = append(d, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			d = append(d, "-"+k)
		}
	}
	return d
}

// Acceptance (core 5): bad input, each with a clear error, nothing stored or started.
func TestBadInput(t *testing.T) {
	s, c := newStack(t, harness.StackOptions{})
	op := s.Operator()
	s.CreateActor(t, 2)
	// A flow with a cycle and one with an unknown dependency (jobs exist; start refuses).
	createFlow(t, c, 40, nil, jobSpec{id: 1, typ: "sh", script: "true", deps: []uint32{2}}, jobSpec{id: 2, typ: "sh", script: "true", deps: []uint32{1}})
	createFlow(t, c, 41, nil, jobSpec{id: 3, typ: "sh", script: "true", deps: []uint32{99}})
	outsider := s.Client(2)
	noCreds := s.Client(0)
	wrongSecret := &harness.Client{URL: c.URL, Secret: "not-the-secret-at-all"}
	job := func(extra map[string]any) map[string]any {
		j := map[string]any{"id": 50, "script": "true", "script_type": "sh"}
		for k, v := range extra {
			j[k] = v
		}
		return j
	}
	type call struct {
		name   string
		client *harness.Client
		method string
		params any
		raw    string
		code   int
		msg    string
	}
	cases := []call{
		{"cycle", c, "flow.start", map[string]any{"context_id": 1, "id": 40}, "", -32602, "flow 40 has a dependency cycle: 1 → 2 → 1"},
		{"unknown dependency", c, "flow.start", map[string]any{"context_id": 1, "id": 41}, "", -32602, "job 3 depends on job 99, which is not in flow 41"},
		{"unknown context", c, "job.create", map[string]any{"context_id": 9, "job": job(nil)}, "", -32004, "context 9 not found"},
		{"context 0", c, "job.create", map[string]any{"context_id": 0, "job": job(nil)}, "", -32602, "context_id must be at least 1"},
		{"unknown script type", c, "job.create", map[string]any{"context_id": 1, "job": job(map[string]any{"script_type": "pyhton"})}, "", -32602, `job 50: script_type "pyhton" is not a known script type`},
		{"outsider", outsider, "job.create", map[string]any{"context_id": 1, "job": job(nil)}, "", -32003, "actor 2 is not a member in context 1"},
		{"outsider reads", outsider, "flow.load", map[string]any{"context_id": 1, "id": 40}, "", -32003, "permission denied"},
		{"caller not requester", c, "job.create", map[string]any{"context_id": 1, "job": job(map[string]any{"caller_id": 2})}, "", -32003, "job.caller_id 2 is not the requesting actor 1"},
		{"no admin secret", c, "actor.create", map[string]any{"actor": map[string]any{"id": 5}}, "", -32003, "actor.create needs the operator secret"},
		{"no credentials", noCreds, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, "", -32001, "the request is not signed"},
		{"wrong admin secret", wrongSecret, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{1}}}, "", -32001, "operator secret is not valid"},
		{"malformed JSON", c, "", nil, `{"jsonrpc":"2.0","id":1,"method":"job.create","params":{`, -32700, "parse error"},
		{"wrong version", c, "", nil, `{"jsonrpc":"1.0","id":1,"method":"job.create","params":{"context_id":1,"job":{"id":50,"script":"true","script_type":"sh"}}}`, -32600, `jsonrpc must be "2.0"`},
		{"params wrong type", c, "job.create", map[string]any{"context_id": 1, "job": job(map[string]any{"timeout": "soon"})}, "", -32602, "job.timeout"},
		{"params not an object", c, "", nil, `{"jsonrpc":"2.0","id":1,"method":"job.create","params":[1,{"id":50}]}`, -32602, "params must be one object"},
		{"unknown field", c, "job.create", map[string]any{"context_id": 1, "job": job(map[string]any{"scipt": "x"})}, "", -32602, `unknown field "scipt"`},
		{"retries too large", c, "job.create", map[string]any{"context_id": 1, "job": job(map[string]any{"retries": 300})}, "", -32602, "job.retries"},
		{"unknown method", c, "job.frobnicate", map[string]any{}, "", -32601, "method not found"},
		{"context beyond databases", op, "context.create", map[string]any{"context": map[string]any{"id": 64, "admins": []int{1}}}, "", -32602, "beyond the databases"},
		{"context admin unknown", op, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{7}}}, "", -32602, "actor 7 does not exist"},
		{"flow of another caller's job", c, "flow.create", map[string]any{"context_id": 1, "flow": map[string]any{"id": 42, "jobs": []int{1, 12345}}}, "", -32602, "jobs"},
	}
	for _, cs := range cases {
		before := snapshot(t)
		var code int
		var msg string
		var data map[string]any
		if cs.raw != "" {
			resp, err := cs.client.Raw(cs.raw)
			if err != nil {
				t.Fatalf("%s: %v", cs.name, err)
			}
			e, _ := resp["error"].(map[string]any)
			if e == nil {
				t.Errorf("%s: no error in %v", cs.name, resp)
				continue
			}
			code, msg = int(e["code"].(float64)), e["message"].(string)
		} else {
			err := cs.client.Call(cs.method, cs.params, nil)
			re, ok := err.(*harness.RPCError)
			if !ok {
				t.Errorf("%s: want an error, got %v", cs.name, err)
				continue
			}
			code, msg, data = re.Code, re.Message, re.Data
		}
		if code != cs.code || !strings.Contains(msg, cs.msg) {
			t.Errorf("%s: got %d %q, want %d containing %q", cs.name, code, msg, cs.code, cs.msg)
		}
		if code == -32602 && cs.raw == "" && (data == nil || data["field"] == nil) {
			t.Errorf("%s: invalid params without data.field: %v", cs.name, data)
		}
		if d := diff(before, snapshot(t)); len(d) > 0 {
			t.Errorf("%s: changed stored state: %v", cs.name, d)
		}
	}
	// The refused flows never started.
	for _, id := range []uint32{40, 41} {
		var f harness.Flow
		c.MustCall(t, "flow.load", map[string]any{"context_id": 1, "id": id}, &f)
		if f.Status != "dispatched" {
			t.Errorf("flow %d: %s", id, f.Status)
		}
	}
}
