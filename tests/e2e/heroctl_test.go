package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (core 7): the README's walk — heroctl creates actor, context and runner,
// submits examples/diamond.yaml and watches it finish.
func TestHeroctlSubmitAndWatch(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{})
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	op := []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}
	me := []string{"HERO_ACTOR=1", "HERO_CONTEXT=1"}
	run := func(env []string, args ...string) string {
		t.Helper()
		out, errOut, code := s.Heroctl(t, env, args...)
		if code != 0 {
			t.Fatalf("heroctl %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	run(op, "actor", "create", "--id", "1")
	run(op, "context", "create", "1", "--admins", "1")
	run(me, "runner", "create", "1")
	out := run(me, "flow", "submit", filepath.Join(root, "examples", "diamond.yaml"))
	m := regexp.MustCompile(`flow (\d+) started`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("submit output: %s", out)
	}
	// flow wait blocks until the flow ends and prints it.
	if waited := run(me, "flow", "wait", m[1], "--wait", "60"); !regexp.MustCompile(`status\s+finished`).MatchString(waited) {
		t.Fatalf("flow wait output:\n%s", waited)
	}
	watch := run(me, "flow", "watch", m[1])
	if !strings.Contains(watch, "finished") || !strings.Contains(watch, "4/4 jobs done") {
		t.Fatalf("watch output:\n%s", watch)
	}
	get := run(me, "flow", "get", m[1])
	if !regexp.MustCompile(`\d+\.TOTAL\s+483`).MatchString(get) || !strings.Contains(get, "A says hello") {
		t.Fatalf("flow get:\n%s", get)
	}
	jsonOut := run(me, "-o", "json", "flow", "dag", m[1])
	if strings.Count(jsonOut, `"node_status": "completed"`) != 4 {
		t.Fatalf("dag json:\n%s", jsonOut)
	}
	// job run prints the output; job logs reads it back.
	if got := run(me, "job", "run", "--type", "sh", "--script", "echo hi there"); got != "hi there\n" {
		t.Fatalf("job run: %q", got)
	}
	// A failing flow: watch exits 1 and says why.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("jobs:\n  - {name: x, type: sh, script: 'echo no >&2; exit 2'}\n  - {name: y, type: sh, script: 'true', depends: [x]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out = run(me, "flow", "submit", bad)
	m = regexp.MustCompile(`flow (\d+) started`).FindStringSubmatch(out)
	stdout, stderr, code := s.Heroctl(t, me, "flow", "watch", m[1])
	if code != 1 || !strings.Contains(stderr, "exit code 2: no") || !strings.Contains(stdout, "cancelled") {
		t.Fatalf("watch of a failing flow: exit %d\n%s\n%s", code, stdout, stderr)
	}
	stdout, stderr, code = s.Heroctl(t, me, "flow", "wait", m[1])
	if code != 1 || !strings.Contains(stderr, "flow "+m[1]+" failed") || !regexp.MustCompile(`status\s+error`).MatchString(stdout) {
		t.Fatalf("wait for a failed flow: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if _, stderr, code = s.Heroctl(t, me, "flow", "wait"); code == 0 || !strings.Contains(stderr, "flow wait ID") {
		t.Fatalf("flow wait without an id: exit %d %s", code, stderr)
	}
	// Errors are one clear line.
	_, stderr, code = s.Heroctl(t, me, "flow", "submit", filepath.Join(root, "examples", "missing.yaml"))
	if code == 0 || !strings.Contains(stderr, "missing.yaml") {
		t.Fatalf("missing file: %d %s", code, stderr)
	}
	_, stderr, code = s.Heroctl(t, []string{"HERO_ACTOR=1"}, "actor", "create", "--id", "3")
	if code != 1 || !strings.Contains(stderr, "operator secret") {
		t.Fatalf("actor create without secret: %d %s", code, stderr)
	}
	// context update changes only what is given; an unknown actor changes nothing.
	run(op, "actor", "create", "--id", "2")
	upd := run(me, "-o", "json", "context", "update", "--readers", "2", "--allowed-sources", "abababababababababababababababababababababababababababababababab,cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd")
	if !strings.Contains(upd, `"readers": [`) || !strings.Contains(upd, `"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"`) || !regexp.MustCompile(`"admins": \[\s*1\s*\]`).MatchString(upd) {
		t.Fatalf("context update:\n%s", upd)
	}
	_, stderr, code = s.Heroctl(t, me, "context", "update", "--readers", "2,99")
	if code == 0 || !strings.Contains(stderr, "actor 99 does not exist") {
		t.Fatalf("update with an unknown actor: %d %s", code, stderr)
	}
	_, stderr, code = s.Heroctl(t, me, "context", "update")
	if code == 0 || !strings.Contains(stderr, "nothing to change") {
		t.Fatalf("update of nothing: %d %s", code, stderr)
	}
	// (Read as JSON: a timestamp may well contain "99".)
	got := run(me, "-o", "json", "context", "get")
	var after struct {
		Readers []uint32 `json:"readers"`
	}
	if err := json.Unmarshal([]byte(got), &after); err != nil || !strings.Contains(got, `"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"`) ||
		len(after.Readers) != 1 || after.Readers[0] != 2 {
		t.Fatalf("context after a refused update (%v):\n%s", err, got)
	}
	if got := run(me, "-o", "json", "context", "update", "--allowed-sources", ""); strings.Contains(got, "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd") {
		t.Fatalf("clearing allowed sources:\n%s", got)
	}
}

// heroctl operates flows: cancel a running one, read its events, delete it.
func TestHeroctlCancelEventsDelete(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{})
	op := []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}
	me := []string{"HERO_ACTOR=1", "HERO_CONTEXT=1"}
	run := func(env []string, args ...string) string {
		t.Helper()
		out, errOut, code := s.Heroctl(t, env, args...)
		if code != 0 {
			t.Fatalf("heroctl %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	run(op, "actor", "create", "--id", "1")
	run(op, "context", "create", "1", "--admins", "1")
	run(me, "runner", "create", "1")
	file := filepath.Join(t.TempDir(), "long.yaml")
	if err := os.WriteFile(file, []byte("jobs:\n  - {name: slow, type: sh, script: 'sleep 30'}\n  - {name: after, type: sh, script: 'true', depends: [slow]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`flow (\d+) started`).FindStringSubmatch(run(me, "flow", "submit", file))
	if m == nil {
		t.Fatal("no flow id in the submit output")
	}
	c := s.Client(1)
	if !c.WaitEvent(t, 1, 20*time.Second, func() bool {
		out, _, _ := s.Heroctl(t, me, "-o", "json", "flow", "dag", m[1])
		return strings.Contains(out, `"node_status": "running"`)
	}) {
		t.Fatal("the slow job did not start")
	}
	if out := run(me, "flow", "cancel", m[1]); !strings.Contains(out, "error") && !strings.Contains(out, "cancel") {
		t.Fatalf("flow cancel output:\n%s", out)
	}
	get := run(me, "flow", "get", m[1])
	if !strings.Contains(get, "error") || !strings.Contains(get, "cancelled by actor 1") {
		t.Fatalf("flow after cancel:\n%s", get)
	}
	// The flow's events, in order: started, the slow job's run, the cancel.
	ev := run(me, "events", "--flow", m[1])
	for _, want := range []string{"flow.started", "job.started", "flow.cancelled"} {
		if !strings.Contains(ev, want) {
			t.Fatalf("events lack %s:\n%s", want, ev)
		}
	}
	if strings.Index(ev, "flow.started") > strings.Index(ev, "flow.cancelled") {
		t.Fatalf("events out of order:\n%s", ev)
	}
	// The flow ends once its running job is killed (cancel asks, the runner kills):
	// an ended flow can be deleted.
	if _, _, code := s.Heroctl(t, me, "flow", "wait", m[1], "--wait", "30"); code != 1 {
		t.Fatalf("flow wait of the cancelled flow: exit %d", code)
	}
	run(me, "flow", "delete", m[1])
	if _, stderr, code := s.Heroctl(t, me, "flow", "get", m[1]); code == 0 || !strings.Contains(stderr, "not found") {
		t.Fatalf("flow get after delete: exit %d %s", code, stderr)
	}
}

// heroctl's keys and secrets: key generate, actor create with a key made in the
// config directory, signing with HERO_KEY, rotation with actor update
// --generate-key (the old key is refused), api call, and operator secrets.
func TestHeroctlKeysAndSecrets(t *testing.T) {
	redisSrv.Flush(t)
	s := harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{})
	op := []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}
	run := func(env []string, args ...string) (string, string) {
		t.Helper()
		out, errOut, code := s.Heroctl(t, env, args...)
		if code != 0 {
			t.Fatalf("heroctl %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out, errOut
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k12.pem")
	pub, _ := run(nil, "key", "generate", "--out", keyFile)
	pub = strings.TrimSpace(pub)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(pub) {
		t.Fatalf("key generate printed %q", pub)
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if _, stderr, code := s.Heroctl(t, nil, "key", "generate", "--out", keyFile); code == 0 || !strings.Contains(stderr, "exists") {
		t.Fatalf("key generate over an existing key: %d %s", code, stderr)
	}
	run(op, "actor", "create", "--id", "12", "--pubkey", pub)
	k12 := []string{"HERO_ACTOR=12", "HERO_KEY=" + keyFile}
	if out, _ := run(k12, "actor", "get", "12"); !strings.Contains(out, pub) {
		t.Fatalf("actor get as 12:\n%s", out)
	}
	if out, _ := run(k12, "key", "pubkey"); strings.TrimSpace(out) != pub {
		t.Fatalf("key pubkey: %q", out)
	}
	// actor create without --pubkey keeps the key in the config directory.
	_, errOut := run(op, "actor", "create", "--id", "13")
	keyPath := filepath.Join(s.ConfigDir, "keys", "actor-13.pem")
	if !strings.Contains(errOut, keyPath) {
		t.Fatalf("actor create did not say where the key is: %s", errOut)
	}
	me := []string{"HERO_ACTOR=13"}
	run(me, "actor", "get", "13")
	old, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	oldFile := filepath.Join(dir, "old13.pem")
	if err := os.WriteFile(oldFile, old, 0o600); err != nil {
		t.Fatal(err)
	}
	// Rotation: the actor signs with its current key; the old one is refused after.
	run(me, "actor", "update", "--generate-key")
	if _, stderr, code := s.Heroctl(t, []string{"HERO_ACTOR=13", "HERO_KEY=" + oldFile}, "actor", "get", "13"); code != 1 || !strings.Contains(stderr, "authentication failed") {
		t.Fatalf("the old key after rotation: exit %d %s", code, stderr)
	}
	run(me, "actor", "get", "13")
	// No key and no secret: a clear error.
	if _, stderr, code := s.Heroctl(t, []string{"HERO_ACTOR=14"}, "actor", "get", "1"); code == 0 || !strings.Contains(stderr, "no key for actor 14") {
		t.Fatalf("no key: exit %d %s", code, stderr)
	}
	// api call: any method, signed; its errors exit 1 naming the code.
	run(op, "context", "create", "1", "--admins", "13")
	out, _ := run(me, "api", "call", "context.load", `{"id":1}`)
	var ctxOut struct {
		Admins []uint32 `json:"admins"`
	}
	if err := json.Unmarshal([]byte(out), &ctxOut); err != nil || len(ctxOut.Admins) != 1 || ctxOut.Admins[0] != 13 {
		t.Fatalf("api call context.load: %v\n%s", err, out)
	}
	if _, stderr, code := s.Heroctl(t, me, "api", "call", "job.frobnicate", `{}`); code != 1 || !strings.Contains(stderr, "-32601") {
		t.Fatalf("api call of an unknown method: %d %s", code, stderr)
	}
	// Operator secrets: list, create (shown once), use, revoke.
	list, _ := run(op, "secret", "list")
	if !strings.Contains(list, "configured") || !strings.Contains(list, "(this one)") {
		t.Fatalf("secret list:\n%s", list)
	}
	secret, errOut := run(op, "secret", "create")
	secret = strings.TrimSpace(secret)
	harness.GuardSecret(secret)
	fp := regexp.MustCompile(`op_[0-9a-f]{16}`).FindString(errOut)
	if secret == "" || fp == "" {
		t.Fatalf("secret create: %q %q", secret, errOut)
	}
	if got, _ := run([]string{"HERO_ADMIN_SECRET=" + secret}, "secret", "list"); !strings.Contains(got, fp) {
		t.Fatalf("the new secret does not work:\n%s", got)
	}
	run(op, "secret", "revoke", fp)
	if _, stderr, code := s.Heroctl(t, []string{"HERO_ADMIN_SECRET=" + secret}, "secret", "list"); code != 1 || !strings.Contains(stderr, "operator secret is not valid") {
		t.Fatalf("a revoked secret: exit %d %s", code, stderr)
	}
}
