package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// A context id beyond the Redis server's databases, with supervisor-daemon logged in
// as a service user that may not run CONFIG (as the stacks' ACL users): the answer is
// -32602 naming context_id and the range of contexts, not -32603 with Redis's
// "DB index is out of range"; nothing is stored.
func TestContextIDBeyondTheDatabases(t *testing.T) {
	const pass = "svc-password-e2e-4c1f9a"
	harness.GuardSecret(pass)
	rs := redistest.Start(t, redistest.Options{Databases: 12, ExtraArgs: []string{"--user", "svc", "on", ">" + pass, "~*", "&*", "+@all", "-@dangerous"}})
	pw := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pw, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(rs.URL, "redis://", "redis://svc@", 1)
	api := harness.Start(t, binDir, "supervisor-daemon", url, harness.Options{Args: []string{"--redis-password-file", pw, "--scheduler-addr", "127.0.0.1:1"},
		Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}})
	op := &harness.Client{URL: harness.APIURL(api), GRPCAddr: api.GRPCAddr, Secret: harness.AdminSecret}
	op.MustCall(t, "actor.create", map[string]any{"actor": map[string]any{"id": 1, "pubkey": harness.ActorPubkey(1)}}, nil)
	for _, call := range []struct {
		method string
		params map[string]any
	}{
		{"context.create", map[string]any{"context": map[string]any{"id": 99, "admins": []int{1}}}},
		{"context.load", map[string]any{"id": 12}},
		{"job.load", map[string]any{"context_id": 99, "caller_id": 1, "id": 1}},
		{"job.submit", map[string]any{"context_id": 4000000000, "job": map[string]any{"script_type": "sh", "script": "true"}}},
		{"events.read", map[string]any{"context_id": 12}},
	} {
		err := op.Call(call.method, call.params, nil)
		re, ok := err.(*harness.RPCError)
		if !ok || re.Code != -32602 || re.Data["field"] != "context_id" || !strings.Contains(re.Message, "contexts 1-11") || strings.Contains(re.Message, "DB index") {
			t.Errorf("%s %v: %v, want -32602 on context_id naming contexts 1-11", call.method, call.params, err)
		}
	}
	if keys := rs.Keys(t, 0); strings.Contains(strings.Join(keys, " "), "coord:contexts") {
		t.Errorf("a refused context was registered: %v", keys)
	}
	if err := op.Call("context.create", map[string]any{"context": map[string]any{"id": 11, "admins": []int{1}}}, nil); err != nil {
		t.Fatalf("context 11, the last database: %v", err)
	}
}
