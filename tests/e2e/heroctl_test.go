package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The environments heroctl runs with: the operator, and actor 1 in context 1.
var (
	opEnv = []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}
	meEnv = []string{"HERO_ACTOR=1", "HERO_CONTEXT=1"}
)

// ctl runs heroctl against a stack.
type ctl struct {
	t *testing.T
	s *harness.Stack
}

// ok runs heroctl, fails the test unless it exits 0, and returns its stdout and stderr.
func (c ctl) ok(env []string, args ...string) (string, string) {
	c.t.Helper()
	out, errOut, code := c.s.Heroctl(c.t, env, args...)
	if code != 0 {
		c.t.Fatalf("heroctl %v: exit %d\n%s%s", args, code, out, errOut)
	}
	return out, errOut
}

// out is ok's stdout.
func (c ctl) out(env []string, args ...string) string {
	c.t.Helper()
	out, _ := c.ok(env, args...)
	return out
}

// fails runs heroctl and fails the test unless it exits with code and says want on
// stderr; it returns stdout.
func (c ctl) fails(env []string, code int, want string, args ...string) string {
	c.t.Helper()
	out, errOut, got := c.s.Heroctl(c.t, env, args...)
	if got != code || !strings.Contains(errOut, want) {
		c.t.Fatalf("heroctl %v: exit %d (want %d), stderr %q (want %q)\n%s", args, got, code, errOut, want, out)
	}
	return out
}

// heroctlStack starts a stack where actor 1 administers context 1, served by runner 1.
func heroctlStack(t *testing.T) ctl {
	redisSrv.Flush(t)
	c := ctl{t: t, s: harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{})}
	c.ok(opEnv, "actor", "create", "--id", "1")
	c.ok(opEnv, "context", "create", "1", "--admins", "1")
	c.ok(meEnv, "runner", "create", "1")
	return c
}

var startedRe = regexp.MustCompile(`flow (\d+) started`)

// flowID is the flow id in flow submit's output.
func flowID(t *testing.T, out string) string {
	t.Helper()
	m := startedRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no flow id in the submit output: %s", out)
	}
	return m[1]
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Acceptance (core 7): the README's walk — heroctl creates actor, context and runner,
// submits examples/diamond.yaml and watches it finish.
func TestHeroctlSubmitAndWatch(t *testing.T) {
	c := heroctlStack(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	id := flowID(t, c.out(meEnv, "flow", "submit", filepath.Join(root, "examples", "diamond.yaml")))
	// flow wait blocks until the flow ends and prints it.
	if waited := c.out(meEnv, "flow", "wait", id, "--wait", "60"); !regexp.MustCompile(`status\s+finished`).MatchString(waited) {
		t.Fatalf("flow wait output:\n%s", waited)
	}
	watch := c.out(meEnv, "flow", "watch", id)
	if !strings.Contains(watch, "finished") || !strings.Contains(watch, "4/4 jobs done") || !regexp.MustCompile(`JOB\s+TYPE\s+STATE\s+JOB STATUS\s+ATTEMPT`).MatchString(watch) {
		t.Fatalf("watch output:\n%s", watch)
	}
	get := c.out(meEnv, "flow", "get", id)
	if !regexp.MustCompile(`\d+\.TOTAL\s+483`).MatchString(get) || !strings.Contains(get, "A says hello") {
		t.Fatalf("flow get:\n%s", get)
	}
	if dag := c.out(meEnv, "-o", "json", "flow", "dag", id); strings.Count(dag, `"node_status": "completed"`) != 4 {
		t.Fatalf("dag json:\n%s", dag)
	}
	// job run prints the output.
	if got := c.out(meEnv, "job", "run", "--type", "sh", "--script", "echo hi there"); got != "hi there\n" {
		t.Fatalf("job run: %q", got)
	}
}

// A failing flow: watch and wait exit 1 and say why; errors are one clear line.
func TestHeroctlFailingFlow(t *testing.T) {
	c := heroctlStack(t)
	bad := writeTemp(t, "bad.yaml", "jobs:\n  - {name: x, type: sh, script: 'echo no >&2; exit 2'}\n  - {name: y, type: sh, script: 'true', depends: [x]}\n")
	id := flowID(t, c.out(meEnv, "flow", "submit", bad))
	if out := c.fails(meEnv, 1, "exit code 2: no", "flow", "watch", id); !strings.Contains(out, "cancelled") {
		t.Fatalf("watch of a failing flow:\n%s", out)
	}
	if out := c.fails(meEnv, 1, "flow "+id+" failed", "flow", "wait", id); !regexp.MustCompile(`status\s+error`).MatchString(out) {
		t.Fatalf("wait for a failed flow:\n%s", out)
	}
	c.fails(meEnv, 2, "flow wait ID", "flow", "wait")
	c.fails(meEnv, 1, "missing.yaml", "flow", "submit", filepath.Join(t.TempDir(), "missing.yaml"))
	c.fails([]string{"HERO_ACTOR=1"}, 1, "operator secret", "actor", "create", "--id", "3")
	// A typo in a flow file: the file, the line, the field and a suggestion.
	typo := writeTemp(t, "typo.yaml", "jobs:\n  - name: a\n    type: sh\n    scirpt: echo hi\n")
	c.fails(meEnv, 1, typo+`:4: job 1: unknown field "scirpt"; did you mean "script"?`, "flow", "submit", typo)
}

// context update changes only what is given; an unknown actor changes nothing.
func TestHeroctlContextUpdate(t *testing.T) {
	c := heroctlStack(t)
	const cd = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
	c.ok(opEnv, "actor", "create", "--id", "2")
	upd := c.out(meEnv, "-o", "json", "context", "update", "--readers", "2", "--allowed-sources", "abababababababababababababababababababababababababababababababab,"+cd)
	if !strings.Contains(upd, `"readers": [`) || !strings.Contains(upd, `"`+cd+`"`) || !regexp.MustCompile(`"admins": \[\s*1\s*\]`).MatchString(upd) {
		t.Fatalf("context update:\n%s", upd)
	}
	c.fails(meEnv, 1, "actor 99 does not exist", "context", "update", "--readers", "2,99")
	c.fails(meEnv, 2, "nothing to change", "context", "update")
	// (Read as JSON: a timestamp may well contain "99".)
	got := c.out(meEnv, "-o", "json", "context", "get")
	var after struct {
		Readers []uint32 `json:"readers"`
	}
	if err := json.Unmarshal([]byte(got), &after); err != nil || !strings.Contains(got, `"`+cd+`"`) || len(after.Readers) != 1 || after.Readers[0] != 2 {
		t.Fatalf("context after a refused update (%v):\n%s", err, got)
	}
	if got := c.out(meEnv, "-o", "json", "context", "update", "--allowed-sources", ""); strings.Contains(got, cd) {
		t.Fatalf("clearing allowed sources:\n%s", got)
	}
}

// heroctl operates flows: cancel a running one, read its events, delete it.
func TestHeroctlCancelEventsDelete(t *testing.T) {
	c := heroctlStack(t)
	file := writeTemp(t, "long.yaml", "jobs:\n  - {name: slow, type: sh, script: 'sleep 30'}\n  - {name: after, type: sh, script: 'true', depends: [slow]}\n")
	id := flowID(t, c.out(meEnv, "flow", "submit", file))
	if !c.s.Client(1).WaitEvent(t, 1, time.Minute, func() bool {
		out, _, _ := c.s.Heroctl(t, meEnv, "-o", "json", "flow", "dag", id)
		return strings.Contains(out, `"node_status": "running"`)
	}) {
		t.Fatal("the slow job did not start")
	}
	if out := c.out(meEnv, "flow", "cancel", id); !strings.Contains(out, "error") && !strings.Contains(out, "cancel") {
		t.Fatalf("flow cancel output:\n%s", out)
	}
	if get := c.out(meEnv, "flow", "get", id); !strings.Contains(get, "error") || !strings.Contains(get, "cancelled by actor 1") {
		t.Fatalf("flow after cancel:\n%s", get)
	}
	// The flow's events, in order: started, the slow job's run, the cancel.
	ev := c.out(meEnv, "events", "--flow", id)
	for _, want := range []string{"flow.started", "job.started", "flow.cancelled"} {
		if !strings.Contains(ev, want) {
			t.Fatalf("events lack %s:\n%s", want, ev)
		}
	}
	if strings.Index(ev, "flow.started") > strings.Index(ev, "flow.cancelled") || !regexp.MustCompile(`^ID\s+TIME\s+TYPE\s+ACTOR`).MatchString(ev) {
		t.Fatalf("events out of order or unlabelled:\n%s", ev)
	}
	// The flow ends once its running job is killed (cancel asks, the runner kills):
	// an ended flow can be deleted.
	c.fails(meEnv, 1, "failed", "flow", "wait", id, "--wait", "30")
	c.ok(meEnv, "flow", "delete", id)
	c.fails(meEnv, 1, "not found", "flow", "get", id)
}

// flow submit --wait with a parameter (--set), then flow logs: every job's log in
// the flow's order.
func TestHeroctlSubmitWaitSetLogs(t *testing.T) {
	c := heroctlStack(t)
	file := writeTemp(t, "greet.yaml", "env: {WHO: world}\njobs:\n  - {name: a, type: sh, script: 'echo \"hello $WHO\"'}\n  - {name: b, type: sh, script: 'echo \"b after a, $WHO\"', depends: [a]}\n")
	out, errOut := c.ok(meEnv, "flow", "submit", file, "--set", "WHO=bonjour", "--wait", "--max-wait", "60")
	id := flowID(t, errOut)
	if !regexp.MustCompile(`status\s+finished`).MatchString(out) || !regexp.MustCompile(`WHO\s+bonjour`).MatchString(out) {
		t.Fatalf("flow submit --wait:\n%s", out)
	}
	logs := c.out(meEnv, "flow", "logs", id)
	re := regexp.MustCompile(`(?s)^== job \d+ \(sh\) ==\nhello bonjour\n== job \d+ \(sh\) ==\nb after a, bonjour\n$`)
	if !re.MatchString(logs) {
		t.Fatalf("flow logs:\n%s", logs)
	}
	if follow := c.out(meEnv, "flow", "logs", id, "-f"); follow != logs {
		t.Fatalf("flow logs -f of an ended flow:\n%s", follow)
	}
	bad := writeTemp(t, "bad.yaml", "jobs:\n  - {name: x, type: sh, script: 'exit 3'}\n")
	if out := c.fails(meEnv, 1, "failed", "flow", "submit", bad, "--wait"); !regexp.MustCompile(`status\s+error`).MatchString(out) {
		t.Fatalf("flow submit --wait of a failing flow:\n%s", out)
	}
	c.fails(meEnv, 2, "want KEY=VALUE", "flow", "submit", file, "--set", "novalue")
}

// job submit returns at once; --wait waits for the end; a unique key names one job;
// job wait and job logs read it.
func TestHeroctlJobSubmit(t *testing.T) {
	c := heroctlStack(t)
	out, errOut := c.ok(meEnv, "job", "submit", "--type", "sh", "--script", "echo submitted", "--wait")
	if out != "submitted\n" || !regexp.MustCompile(`^job 1:\d+ submitted`).MatchString(errOut) {
		t.Fatalf("job submit --wait: %q %q", out, errOut)
	}
	first := c.out(meEnv, "job", "submit", "--type", "sh", "--script", "echo once", "--unique-key", "k1", "--unique-ttl", "1h")
	m := regexp.MustCompile(`^job 1:(\d+) submitted`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("job submit: %q", first)
	}
	if again := c.out(meEnv, "job", "submit", "--type", "sh", "--script", "echo twice", "--unique-key", "k1"); !strings.HasPrefix(again, "job 1:"+m[1]+" exists already") {
		t.Fatalf("a second submission with the key: %q", again)
	}
	if got := c.out(meEnv, "job", "wait", m[1]); !regexp.MustCompile(`status\s+finished`).MatchString(got) {
		t.Fatalf("job wait:\n%s", got)
	}
	if logs := c.out(meEnv, "job", "logs", m[1]); logs != "once\n" {
		t.Fatalf("job logs: %q", logs)
	}
	c.fails(meEnv, 1, "error", "job", "submit", "--type", "sh", "--script", "exit 4", "--wait")
}

// -o json prints exactly what the JSON-RPC API returns for the same object.
func TestHeroctlJSONIsTheAPIs(t *testing.T) {
	c := heroctlStack(t)
	file := writeTemp(t, "two.yaml", "env: {K: v}\njobs:\n  - {name: a, type: sh, script: 'echo a; echo R=1 >> \"$HERO_RESULT_FILE\"', retries: 1}\n  - {name: b, type: sh, script: 'echo b', depends: [a]}\n")
	id := flowID(t, c.out(meEnv, "flow", "submit", file))
	c.ok(meEnv, "flow", "wait", id, "--wait", "60")
	var job []uint32
	jsonOf(t, c.out(meEnv, "-o", "json", "flow", "get", id), &struct{ Jobs *[]uint32 }{&job})
	if len(job) != 2 {
		t.Fatalf("flow jobs %v", job)
	}
	for _, tc := range []struct {
		args   []string
		method string
		params string
	}{
		{[]string{"flow", "get", id}, "flow.load", `{"context_id":1,"id":` + id + `}`},
		{[]string{"flow", "dag", id}, "flow.dag", `{"context_id":1,"id":` + id + `}`},
		{[]string{"flow", "list"}, "flow.list", `{"context_id":1}`},
		{[]string{"job", "get", jsonNum(job[0])}, "job.load", `{"context_id":1,"caller_id":1,"id":` + jsonNum(job[0]) + `}`},
		{[]string{"job", "list"}, "job.list", `{"context_id":1}`},
		{[]string{"context", "get"}, "context.load", `{"id":1}`},
		{[]string{"actor", "get", "1"}, "actor.load", `{"id":1}`},
		{[]string{"runner", "get", "1"}, "runner.load", `{"context_id":1,"id":1}`},
		{[]string{"runner", "list"}, "runner.list", `{"context_id":1}`},
		{[]string{"dlq", "list"}, "dlq.list", `{"context_id":1}`},
		{[]string{"events", "--flow", id}, "events.read", `{"context_id":1,"after":"0","flow_id":` + id + `}`},
	} {
		var fromCLI, fromAPI any
		jsonOf(t, c.out(meEnv, append([]string{"-o", "json"}, tc.args...)...), &fromCLI)
		jsonOf(t, c.out(meEnv, "api", "call", tc.method, tc.params), &fromAPI)
		dropHeartbeats(fromCLI)
		dropHeartbeats(fromAPI)
		if !reflect.DeepEqual(fromCLI, fromAPI) {
			t.Errorf("heroctl -o json %v differs from %s:\n%v\n%v", tc.args, tc.method, fromCLI, fromAPI)
		}
	}
}

// dropHeartbeats replaces the runner processes' last_heartbeat_ms (a second apart,
// the two reads of a runner may see two heartbeats) when it is a number; anything
// else stays, to differ.
func dropHeartbeats(v any) {
	switch v := v.(type) {
	case map[string]any:
		if n, ok := v["last_heartbeat_ms"].(float64); ok && n > 0 {
			v["last_heartbeat_ms"] = "a time in ms"
		}
		for _, x := range v {
			dropHeartbeats(x)
		}
	case []any:
		for _, x := range v {
			dropHeartbeats(x)
		}
	}
}

func jsonOf(t *testing.T, s string, into any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), into); err != nil {
		t.Fatalf("not JSON (%v): %s", err, s)
	}
}

func jsonNum(n uint32) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// heroctl's keys: key generate, actor create with a key made in the config
// directory, signing with HERO_KEY, rotation with actor update --generate-key (the
// old key is refused).
func TestHeroctlKeys(t *testing.T) {
	redisSrv.Flush(t)
	c := ctl{t: t, s: harness.StartStack(t, binDir, redisSrv.URL, harness.StackOptions{})}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k12.pem")
	pub := strings.TrimSpace(c.out(nil, "key", "generate", "--out", keyFile))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(pub) {
		t.Fatalf("key generate printed %q", pub)
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	c.fails(nil, 1, "exists", "key", "generate", "--out", keyFile)
	c.ok(opEnv, "actor", "create", "--id", "12", "--pubkey", pub)
	k12 := []string{"HERO_ACTOR=12", "HERO_KEY=" + keyFile}
	if out := c.out(k12, "actor", "get", "12"); !strings.Contains(out, pub) {
		t.Fatalf("actor get as 12:\n%s", out)
	}
	if out := c.out(k12, "key", "pubkey"); strings.TrimSpace(out) != pub {
		t.Fatalf("key pubkey: %q", out)
	}
	// actor create without --pubkey keeps the key in the config directory.
	_, errOut := c.ok(opEnv, "actor", "create", "--id", "13")
	keyPath := filepath.Join(c.s.ConfigDir, "keys", "actor-13.pem")
	if !strings.Contains(errOut, keyPath) {
		t.Fatalf("actor create did not say where the key is: %s", errOut)
	}
	me := []string{"HERO_ACTOR=13"}
	c.ok(me, "actor", "get", "13")
	old, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	oldFile := writeTemp(t, "old13.pem", string(old))
	// Rotation: the actor signs with its current key; the old one is refused after.
	c.ok(me, "actor", "update", "--generate-key")
	c.fails([]string{"HERO_ACTOR=13", "HERO_KEY=" + oldFile}, 1, "authentication failed", "actor", "get", "13")
	c.ok(me, "actor", "get", "13")
	// No key and no secret: a clear error.
	c.fails([]string{"HERO_ACTOR=14"}, 1, "no key for actor 14", "actor", "get", "1")
}

// api call (any method, signed) and the operator secrets: list, create (shown
// once), use, revoke.
func TestHeroctlAPICallAndSecrets(t *testing.T) {
	c := heroctlStack(t)
	var ctxOut struct {
		Admins []uint32 `json:"admins"`
	}
	if jsonOf(t, c.out(meEnv, "api", "call", "context.load", `{"id":1}`), &ctxOut); len(ctxOut.Admins) != 1 || ctxOut.Admins[0] != 1 {
		t.Fatalf("api call context.load: %v", ctxOut)
	}
	c.fails(meEnv, 1, "-32601", "api", "call", "job.frobnicate", `{}`)
	if list := c.out(opEnv, "secret", "list"); !regexp.MustCompile(`configured\s+-\s+-\s+yes`).MatchString(list) {
		t.Fatalf("secret list:\n%s", list)
	}
	secret, errOut := c.ok(opEnv, "secret", "create")
	secret = strings.TrimSpace(secret)
	harness.GuardSecret(secret)
	fp := regexp.MustCompile(`op_[0-9a-f]{16}`).FindString(errOut)
	if secret == "" || fp == "" {
		t.Fatalf("secret create: %q %q", secret, errOut)
	}
	if got := c.out([]string{"HERO_ADMIN_SECRET=" + secret}, "secret", "list"); !strings.Contains(got, fp) {
		t.Fatalf("the new secret does not work:\n%s", got)
	}
	c.ok(opEnv, "secret", "revoke", fp)
	c.fails([]string{"HERO_ADMIN_SECRET=" + secret}, 1, "operator secret is not valid", "secret", "list")
}

// flow logs -f follows a running flow: it prints the first job's header at once,
// waits for that job (blocked until the test lets it go) and the next, and exits
// when the last one has ended, with every job's log in the flow's order.
func TestHeroctlFlowLogsFollow(t *testing.T) {
	c := heroctlStack(t)
	gate := filepath.Join(harness.ScratchDir(t), "go")
	file := writeTemp(t, "gated.yaml", "jobs:\n  - {name: a, type: sh, script: 'while [ ! -e "+gate+" ]; do sleep 0.05; done; echo one'}\n  - {name: b, type: sh, script: 'echo two', depends: [a]}\n")
	id := flowID(t, c.out(meEnv, "flow", "submit", file))
	p, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.s.BinDir, "heroctl"), "flow", "logs", id, "-f")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HERO_ADDR=" + c.s.API.GRPCAddr, "HERO_CONFIG_DIR=" + c.s.ConfigDir,
		"HERO_TLS_CA=" + p.Files("api").CA}, meEnv...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	first, err := r.ReadString('\n')
	if err != nil || !regexp.MustCompile(`^== job \d+ \(sh\) ==\n$`).MatchString(first) {
		t.Fatalf("flow logs -f: first line %q %v; %s", first, err, stderr.String())
	}
	// It follows job a, which has not ended: the flow is still running.
	if got := c.out(meEnv, "-o", "json", "flow", "get", id); !strings.Contains(got, `"status": "started"`) {
		t.Fatalf("the flow is not running while its logs are followed:\n%s", got)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flow logs -f: %v; %s", err, stderr.String())
	}
	if !regexp.MustCompile(`(?s)^one\n== job \d+ \(sh\) ==\ntwo\n$`).MatchString(string(rest)) {
		t.Fatalf("flow logs -f after the first header:\n%s", rest)
	}
}
