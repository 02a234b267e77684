package e2e

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// Acceptance (issue 50): the web console in a real headless Chromium (Debian's
// chromium) against the real services: sign-in as an actor (the browser signs the
// challenge with WebCrypto) and as an operator; a diamond flow's nodes change state
// live from the event stream; a job's log tails while it prints, and the job is
// stopped from the page; a failed flow retried from the page finishes; 50 flows
// cancelled in bulk by a filter; a DLQ entry requeued; a flow file submitted; a
// reader sees no action controls and the server refuses forged requests (no CSRF
// token, another session's token, another context, another site, a forged cookie, a
// revoked key); unknown ids and a foreign context answer a clear error; at 390 px no
// page scrolls sideways; Tab reaches every action. HERO_CONSOLE_SCREENSHOTS=<dir>
// keeps screenshots of the flow page and the jobs list (docs/console.md).

// browserDeadline is the safety net of every wait on the page (never a measurement).
const browserDeadline = time.Minute

type browser struct {
	t    testing.TB
	ctx  context.Context
	base string // https://host:port/ui/
}

// pageLoads numbers the page loads of every browser (each a new URL).
var pageLoads atomic.Int64

// newBrowser starts headless Chromium, or skips the test when there is none.
func newBrowser(t testing.TB, base string) (context.Context, func() *browser) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium; make deps installs it): the console's browser tests need it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors", true), chromedp.WindowSize(1280, 800), chromedp.UserDataDir(t.TempDir()))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	root, cancelRoot := chromedp.NewContext(alloc)
	t.Cleanup(cancelRoot)
	if err := chromedp.Do(root, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// Each browser is a browser context of its own: its own cookies (another user).
	return root, func() *browser {
		ctx, cancel := chromedp.NewContext(root, chromedp.WithNewBrowserContext())
		t.Cleanup(cancel)
		if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
			t.Fatalf("start chromium: %v", err)
		}
		return &browser{t: t, ctx: ctx, base: base}
	}
}

// with is the browser reporting to t (a subtest).
func (b *browser) with(t *testing.T) *browser {
	if b == nil {
		return nil
	}
	c := *b
	c.t = t
	return &c
}

func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserDeadline)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.failed(what, err)
	}
}

func (b *browser) failed(what string, err error) {
	b.t.Helper()
	page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ''`))
	b.t.Fatalf("%s: %v\npage:\n%s", what, err, page)
}

// open loads a route of the page and waits until it has started.
func (b *browser) open(route string) {
	b.t.Helper()
	// A new query string: a new page load, not a change of fragment.
	b.run("open "+route, chromedp.Navigate(fmt.Sprintf("%s?load=%d%s", b.base, pageLoads.Add(1), route)), chromedp.WaitReady(chromedp.CSS(`body[data-ready]`)))
}

// waitJS waits until a JavaScript expression is true.
func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(browserDeadline))); err != nil {
		b.failed(what, err)
	}
}

// eval evaluates an expression (awaiting a promise) into out (nil: ignored).
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[json.RawMessage](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.failed("evaluate "+expr, err)
	}
	if out != nil {
		if err := json.Unmarshal(v, out); err != nil {
			b.t.Fatalf("evaluate %s: %s: %v", expr, v, err)
		}
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.failed("text of "+sel, err)
	}
	return s
}

// loginActor signs in with the actor's key: as hex, or (pem) as heroctl keeps it.
func (b *browser) loginActor(id uint32, pem bool) {
	b.t.Helper()
	b.open("#/login")
	seed := hex.EncodeToString(harness.ActorKey(id).Seed())
	if pem {
		p, err := auth.MarshalPrivateKeyPEM(harness.ActorKey(id))
		if err != nil {
			b.t.Fatal(err)
		}
		seed = strings.ReplaceAll(string(p), "\n", " ") // typed, a newline would be Enter
	}
	b.run("sign in as an actor", chromedp.SendKeys(chromedp.CSS(`#actor-id`), fmt.Sprint(id)), chromedp.SendKeys(chromedp.CSS(`#actor-key`), seed),
		chromedp.Click(chromedp.CSS(`#actor-submit`)), chromedp.WaitVisible(chromedp.CSS(`#whoami`)))
	if got := b.text("#whoami"); !strings.Contains(got, fmt.Sprintf("actor %d", id)) {
		b.t.Fatalf("signed in as %q, want actor %d", got, id)
	}
}

// fetch runs a request from the page (its cookies) and returns status and body.
func (b *browser) fetch(path, method, body string, headers map[string]string) (int, string) {
	b.t.Helper()
	h := "{'Content-Type': 'application/json'"
	for k, v := range headers {
		h += fmt.Sprintf(", %q: %q", k, v)
	}
	h += "}"
	js := fmt.Sprintf(`(async () => { const r = await fetch(%q, {method: %q, headers: %s, body: %s}); return r.status + ' ' + await r.text(); })()`,
		"/ui/api/"+path, method, h, map[bool]string{true: "undefined", false: fmt.Sprintf("%q", body)}[body == ""])
	var out string
	b.eval(js, &out)
	var status int
	_, _ = fmt.Sscanf(out, "%d", &status)
	return status, out
}

func (b *browser) csrf() string {
	b.t.Helper()
	var tok string
	b.eval(`fetch('/ui/api/me').then(r => r.json()).then(d => d.csrf)`, &tok)
	return tok
}

func (b *browser) screenshot(name string) {
	dir := os.Getenv("HERO_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.failed("screenshot", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Error(err)
	}
}

// consoleStack starts the services, actor 1 (admin of context 1), actor 2 (reader of
// context 1) and context 2 (actor 1 not a member).
func consoleStack(t *testing.T) (*harness.Stack, *harness.Client, string) {
	// The open streams' periodic check far off: a revocation reaches them by its notice.
	s, c := newStack(t, harness.StackOptions{APIArgs: []string{"--auth-session-recheck", "10m"}})
	s.CreateActor(t, 2)
	op := s.Operator()
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{2}}, nil)
	op.MustCall(t, "context.create", map[string]any{"context": map[string]any{"id": 2, "admins": []int{2}}}, nil)
	return s, c, "https://" + s.API.HTTPAddr + "/ui/"
}

func TestConsoleInTheBrowser(t *testing.T) {
	s, c, base := consoleStack(t)
	_, newB := newBrowser(t, base)
	gate := filepath.Join(harness.ScratchDir(t), "gate")
	r := &consoleRun{s: s, c: c, base: base, gate: gate, newB: newB}

	t.Run("operator sign-in", r.consoleOperatorSignin)

	r.admin = newB()
	r.admin.loginActor(1, false)

	t.Run("diamond live", r.consoleDiamondLive)

	t.Run("log tails and stop", r.consoleLogTailsAndStop)

	t.Run("retry a failed flow", r.consoleRetryAFailedFlow)

	t.Run("bulk cancel 50 by filter", r.consoleBulkCancel50ByFilter)

	t.Run("requeue a DLQ entry", r.consoleRequeueADLQEntry)

	t.Run("submit a flow file", r.consoleSubmitAFlowFile)

	t.Run("jobs list filtered to failures", r.consoleJobsListFilteredToFailures)

	t.Run("runners and events", r.consoleRunnersAndEvents)

	t.Run("queues and charts", r.consoleQueuesAndCharts)

	t.Run("schedules", r.consoleSchedules)

	t.Run("one-time link from heroctl", r.consoleLinkFromHeroctl)

	r.reader = newB()
	r.reader.loginActor(2, true)

	t.Run("reader has no action controls", r.consoleReaderHasNoActionControls)

	t.Run("forged requests refused", r.consoleForgedRequestsRefused)

	t.Run("unknown ids and foreign context", r.consoleUnknownIdsAndForeignContext)

	t.Run("390 px wide", r.consoleNarrow390)

	t.Run("tab reaches every action", r.consoleTabReachesEveryAction)

	t.Run("revocations end open streams", r.consoleRevocationsEndOpenStreams)

	t.Run("revoked key ends the session", r.consoleRevokedKeyEndsTheSession)
}

// consoleRun is what the steps of TestConsoleInTheBrowser share: the stack, actor
// 1's client, the console's address, a gate file, and the signed-in browsers.
type consoleRun struct {
	s             *harness.Stack
	c             *harness.Client
	base, gate    string
	newB          func() *browser
	admin, reader *browser
}

func (r *consoleRun) consoleOperatorSignin(t *testing.T) {
	newB := r.newB
	b := newB().with(t)
	b.open("#/login")
	b.run("sign in as operator", chromedp.SendKeys(chromedp.CSS(`#operator-secret`), harness.AdminSecret),
		chromedp.Click(chromedp.CSS(`#operator-submit`)), chromedp.WaitVisible(chromedp.CSS(`#contexts`)))
	if got := b.text("#whoami"); !strings.Contains(got, "operator op_") {
		t.Fatalf("whoami %q", got)
	}
	if got := b.text("#contexts"); !strings.Contains(got, "Context 1") || !strings.Contains(got, "Context 2") {
		t.Fatalf("the operator's contexts: %q", got)
	}
	b = newB().with(t)
	b.open("#/login")
	b.run("a wrong secret", chromedp.SendKeys(chromedp.CSS(`#operator-secret`), "not-the-operator-secret-at-all"),
		chromedp.Click(chromedp.CSS(`#operator-submit`)))
	b.waitJS("the refusal shown", `document.querySelector('#login-error').textContent.includes('not valid')`)
}

func (r *consoleRun) consoleDiamondLive(t *testing.T) {
	admin, c := r.admin.with(t), r.c
	createFlow(t, c, 10, map[string]string{"GREETING": "hi"},
		jobSpec{id: 101, typ: "sh", script: "echo a"},
		jobSpec{id: 102, typ: "sh", script: "echo b", deps: []uint32{101}},
		jobSpec{id: 103, typ: "sh", script: "echo c", deps: []uint32{101}},
		jobSpec{id: 104, typ: "sh", script: "echo d", deps: []uint32{102, 103}})
	admin.open("#/c/1/flow/10")
	admin.waitJS("the DAG drawn, pending", `['101','102','103','104'].every(j => document.querySelector('#n-j' + j)?.dataset.status === 'pending')`)
	// Record every state each node shows, and mark the page: a reload would lose both.
	admin.eval(`(() => { window.seen = {}; window.marker = 'kept';
		for (const g of document.querySelectorAll('#dag g.node')) {
			window.seen[g.id] = [g.dataset.status];
			new MutationObserver(() => window.seen[g.id].push(g.dataset.status)).observe(g, {attributes: true, attributeFilter: ['data-status']});
		} return true; })()`, nil)
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 10}, nil)
	admin.waitJS("the flow finished on the page", `document.querySelector('#flow-status')?.dataset.status === 'finished'`)
	admin.waitJS("every node completed", `['101','102','103','104'].every(j => document.querySelector('#n-j' + j).dataset.status === 'completed')`)
	var seen map[string][]string
	admin.eval(`window.marker === 'kept' ? window.seen : null`, &seen)
	if seen == nil {
		t.Fatal("the page was reloaded: the updates were not live")
	}
	for _, j := range []string{"n-j101", "n-j102", "n-j103", "n-j104"} {
		if got := strings.Join(seen[j], ","); !strings.Contains(got, "running") || !strings.HasSuffix(got, "completed") {
			t.Errorf("%s went through %s, want running then completed", j, got)
		}
	}
	admin.screenshot("console-flow.png")
}

func (r *consoleRun) consoleLogTailsAndStop(t *testing.T) {
	admin, c, gate := r.admin.with(t), r.c, r.gate
	script := fmt.Sprintf(`echo line 1; while [ ! -e %s ]; do sleep 0.05; done; echo line 2; while :; do sleep 0.05; done`, gate)
	c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 200, "script_type": "sh", "script": script, "timeout": 120}}, nil)
	admin.open("#/c/1/job/1/200")
	admin.waitJS("line 1 in the log", `document.querySelector('#job-log')?.textContent.includes('line 1')`)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	admin.waitJS("line 2 in the log while the job runs", `document.querySelector('#job-log').textContent.includes('line 2')`)
	if j := loadJob(t, c, 200); j.Status != "started" {
		t.Fatalf("the job is %s; the tail was to be seen while it runs", j.Status)
	}
	admin.open("#/c/1/job/1/200") // its buttons as of now
	admin.run("stop the job", chromedp.WaitVisible(chromedp.CSS(`#job-stop`)), chromedp.Click(chromedp.CSS(`#job-stop`)))
	admin.waitJS("the log ends", `document.querySelector('#job-log').dataset.complete === '1'`)
	if j := loadJob(t, c, 200); j.Status != "error" {
		t.Fatalf("stopped job: %+v", j)
	}
}

func (r *consoleRun) consoleRetryAFailedFlow(t *testing.T) {
	admin, c := r.admin.with(t), r.c
	flag := filepath.Join(harness.ScratchDir(t), "fixed")
	createFlow(t, c, 11, nil,
		jobSpec{id: 111, typ: "sh", script: "echo ok"},
		jobSpec{id: 112, typ: "sh", script: "test -f " + flag, deps: []uint32{111}})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 11}, nil)
	if f := c.WaitFlow(t, ctx1, 11, time.Minute); f.Status != "error" {
		t.Fatalf("flow 11: %+v", f)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	admin.open("#/c/1/flow/11")
	admin.waitJS("failed node shown", `document.querySelector('#n-j112')?.dataset.status === 'failed'`)
	admin.run("retry", chromedp.Click(chromedp.CSS(`#flow-retry`)))
	admin.waitJS("the retried flow finished on the page", `document.querySelector('#flow-status')?.dataset.status === 'finished' && document.querySelector('#n-j112').dataset.status === 'completed'`)
	if f := c.WaitFlow(t, ctx1, 11, time.Minute); f.Status != "finished" {
		t.Fatalf("flow 11 after retry: %+v", f)
	}
}

func (r *consoleRun) consoleBulkCancel50ByFilter(t *testing.T) {
	admin, c, gate := r.admin.with(t), r.c, r.gate
	since := time.Now().Add(-time.Second).Truncate(time.Second)
	for i := uint32(0); i < 50; i++ {
		createFlow(t, c, 300+i, nil, jobSpec{id: 3000 + i, typ: "sh", script: "while [ ! -e " + gate + ".never ]; do sleep 1; done"})
		c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 300 + i}, nil)
	}
	admin.open("#/c/1/flows?status=started&since=" + since.Local().Format("2006-01-02T15:04:05"))
	admin.waitJS("the filtered list", `document.querySelectorAll('#flows-table tbody tr').length >= 50`)
	admin.screenshot("console-flows.png")
	admin.run("count", chromedp.Click(chromedp.CSS(`#bulk-flow-cancel`)))
	admin.waitJS("50 matched", `document.querySelector('#bulk-flow-cancel').textContent.includes('50')`)
	admin.run("confirm", chromedp.Click(chromedp.CSS(`#bulk-flow-cancel`)))
	admin.waitJS("50 cancelled", `document.querySelector('#bulk-result')?.textContent === 'flow.cancel: 50 of 50 done'`)
	for i := uint32(0); i < 50; i++ {
		if f := c.WaitFlow(t, ctx1, 300+i, time.Minute); f.Status != "error" {
			t.Fatalf("flow %d after the bulk cancel: %+v", 300+i, f)
		}
	}
}

func (r *consoleRun) consoleRequeueADLQEntry(t *testing.T) {
	admin, c := r.admin.with(t), r.c
	flag := filepath.Join(harness.ScratchDir(t), "dlqfixed")
	var j harness.Job
	c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 400, "script_type": "sh", "script": "test -f " + flag}}, &j)
	if j.Status != "error" || !dlqHas(t, c, 400) {
		t.Fatalf("job 400: %+v", j)
	}
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	admin.open("#/c/1/dlq")
	admin.run("requeue", chromedp.Click(chromedp.CSS(`#dlq-table tr[data-id="400"] button`)))
	if !c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, c, 400).Status == "finished" }) {
		t.Fatalf("requeued job: %+v", loadJob(t, c, 400))
	}
	if dlqHas(t, c, 400) {
		t.Error("the requeued job is still in the DLQ")
	}
}

func (r *consoleRun) consoleSubmitAFlowFile(t *testing.T) {
	admin := r.admin.with(t)
	admin.open("#/c/1/submit")
	file := "name: pasted\nenv:\n  WHO: console\njobs:\n  - name: a\n    type: sh\n    script: echo A=$WHO > \"$HERO_RESULT_FILE\"\n  - name: b\n    type: sh\n    depends: [a]\n    script: echo got $HERO_DEP_A_A\n"
	admin.run("paste and submit", chromedp.SetValue(chromedp.CSS(`#flow-file`), file), chromedp.Click(chromedp.CSS(`#submit-flow`)),
		chromedp.WaitVisible(chromedp.CSS(`#submitted-flow`)), chromedp.Click(chromedp.CSS(`#submitted-flow`)))
	admin.waitJS("the submitted flow finished", `document.querySelector('#flow-status')?.dataset.status === 'finished'`)
	admin.open("#/c/1/submit")
	admin.run("a bad file", chromedp.SetValue(chromedp.CSS(`#flow-file`), "jobs:\n  - name: a\n    type: sh\n    script: x\n    depends: [zz]\n"),
		chromedp.Click(chromedp.CSS(`#submit-flow`)))
	admin.waitJS("the refusal named", `document.querySelector('#submit-result').textContent.includes('depends on "zz"')`)
}

func (r *consoleRun) consoleJobsListFilteredToFailures(t *testing.T) {
	admin := r.admin.with(t)
	admin.open("#/c/1/jobs?status=error")
	admin.waitJS("failed jobs only", `(() => { const rows = [...document.querySelectorAll('#jobs-table tbody tr')];
		return rows.length > 0 && rows.every(r => r.querySelector('.badge').textContent === 'error'); })()`)
	admin.screenshot("console-jobs.png")
}

func (r *consoleRun) consoleReaderHasNoActionControls(t *testing.T) {
	reader := r.reader.with(t)
	for route, ready := range map[string]string{"#/c/1/flows": "#count", "#/c/1/flow/11": "#flow-status", "#/c/1/dlq": "#count", "#/c/1/jobs": "#count",
		"#/c/1/schedules": "#schedules-table tbody", "#/c/1/queues": "#queues-summary"} {
		reader.open(route)
		reader.waitJS("page shown "+route, fmt.Sprintf(`document.querySelector(%q)?.textContent.length > 0`, ready))
		var n int
		reader.eval(`document.querySelectorAll('#main button:not(#f-apply):not(#more)').length`, &n)
		if n != 0 {
			var names []string
			reader.eval(`[...document.querySelectorAll('#main button:not(#f-apply):not(#more)')].map(b => b.textContent)`, &names)
			t.Errorf("%s: the reader sees action controls %v", route, names)
		}
	}
}

func (r *consoleRun) consoleForgedRequestsRefused(t *testing.T) {
	admin, reader, c, base := r.admin.with(t), r.reader.with(t), r.c, r.base
	cancel := `{"method":"flow.cancel","params":{"context_id":1,"id":10}}`
	tok := reader.csrf()
	if st, body := reader.fetch("call", "POST", cancel, map[string]string{"X-CSRF-Token": tok}); st != 403 || !strings.Contains(body, "needs executor") {
		t.Errorf("a reader's cancel: %s", body)
	}
	if st, body := admin.fetch("call", "POST", cancel, nil); st != 403 || !strings.Contains(body, "CSRF") {
		t.Errorf("no CSRF token: %s", body)
	}
	if st, body := admin.fetch("call", "POST", cancel, map[string]string{"X-CSRF-Token": tok}); st != 403 || !strings.Contains(body, "CSRF") {
		t.Errorf("another session's CSRF token: %s", body)
	}
	adminTok := admin.csrf()
	if st, body := admin.fetch("call", "POST", `{"method":"flow.list","params":{"context_id":2}}`, map[string]string{"X-CSRF-Token": adminTok}); st != 403 || !strings.Contains(body, "not a member") {
		t.Errorf("another context: %s", body)
	}
	if st, body := admin.fetch("list?kind=flows&context_id=2", "GET", "", nil); st != 403 {
		t.Errorf("another context's list: %s", body)
	}
	if st, body := admin.fetch("call", "POST", `{"method":"flow.load","params":{"context_id":1,"id":99999}}`, map[string]string{"X-CSRF-Token": adminTok}); st != 404 {
		t.Errorf("an unknown flow: %s", body)
	}
	if st, body := admin.fetch("call", "POST", `{"method":"actor.create","params":{}}`, map[string]string{"X-CSRF-Token": adminTok}); st != 400 {
		t.Errorf("a method the console does not call: %s", body)
	}
	if f := loadFlowStatus(t, c, 10); f != "finished" {
		t.Errorf("flow 10 is %s after the refused requests", f)
	}
	// Another site's page: the browser's Origin and Sec-Fetch-Site say so.
	cookie := consoleCookie(t, admin)
	req, _ := http.NewRequest("POST", base+"api/call", strings.NewReader(cancel))
	req.Header.Set("Cookie", "hero_console="+cookie)
	req.Header.Set("X-CSRF-Token", adminTok)
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if resp, err := harness.HTTPClient().Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("a cross-site request: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	// A forged cookie: another payload (actor 3, far expiry) under the real cookie's MAC.
	parts := strings.Split(cookie, ".")
	req, _ = http.NewRequest("GET", base+"api/me", nil)
	req.Header.Set("Cookie", "hero_console=v1.eyJrIjoiYWN0b3IiLCJhIjozLCJjIjoieCIsImUiOjk5OTk5OTk5OTksInMiOiJ4In0."+parts[2])
	if resp, err := harness.HTTPClient().Do(req); err != nil || resp.StatusCode != 401 {
		t.Errorf("a forged session: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
}

func (r *consoleRun) consoleUnknownIdsAndForeignContext(t *testing.T) {
	admin := r.admin.with(t)
	admin.open("#/c/1/flow/99999")
	admin.waitJS("not found", `document.querySelector('#page-error')?.textContent.includes('not found')`)
	admin.open("#/c/2/flows")
	admin.waitJS("not a member", `document.querySelector('#page-error')?.textContent.includes('not a member of context 2')`)
}

func (r *consoleRun) consoleNarrow390(t *testing.T) {
	admin := r.admin.with(t)
	admin.run("narrow", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	for _, route := range []string{"#/", "#/c/1/flows", "#/c/1/jobs", "#/c/1/flow/10", "#/c/1/dlq", "#/c/1/submit", "#/c/1/events", "#/c/1/job/1/200", "#/c/1/runners", "#/c/1/queues", "#/c/1/schedules"} {
		admin.open(route)
		admin.waitJS("page shown "+route, `document.querySelector('h1') !== null`)
		var over int
		admin.eval(`document.documentElement.scrollWidth - document.documentElement.clientWidth`, &over)
		if over > 0 {
			t.Errorf("%s scrolls sideways by %d px at 390 px", route, over)
		}
	}
	admin.run("wide again", chromedp.ResetViewport())
}

func (r *consoleRun) consoleTabReachesEveryAction(t *testing.T) {
	admin, c := r.admin.with(t), r.c
	createFlow(t, c, 12, nil, jobSpec{id: 121, typ: "sh", script: "exit 3"})
	c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": 12}, nil)
	c.WaitFlow(t, ctx1, 12, time.Minute)
	for _, route := range []string{"#/c/1/flows", "#/c/1/flow/12", "#/c/1/dlq", "#/c/1/submit", "#/c/1/schedules", "#/c/1/queues"} {
		admin.open(route)
		admin.waitJS("controls shown "+route, `document.querySelectorAll('#main button').length > 0 && (document.querySelector('#count')?.textContent.length > 0 || document.querySelector('#flow-status')?.dataset.status || document.querySelector('#flow-file') || document.body.dataset.schedules > 0 || document.querySelector('#queues-table button'))`)
		var total int
		admin.eval(`(() => { document.activeElement?.blur(); window.reached = new Set();
			document.addEventListener('focusin', e => window.reached.add(e.target));
			return document.querySelectorAll('button, a[href], input, select, textarea, [tabindex="0"]').length; })()`, &total)
		missedJS := `[...document.querySelectorAll('#main button, #main g.node')].filter(b => b.getClientRects().length > 0 && !window.reached.has(b)).map(b => b.id || b.textContent)`
		var missed []string
		// Tab on until every action was focused, or twice round the page.
		for i := 0; i < 2*total+20; i++ {
			admin.run("tab", chromedp.KeyEvent(kb.Tab))
			if admin.eval(missedJS, &missed); len(missed) == 0 {
				break
			}
		}
		if len(missed) > 0 {
			t.Errorf("%s: Tab does not reach %v", route, missed)
		}
	}
}

func (r *consoleRun) consoleRevokedKeyEndsTheSession(t *testing.T) {
	reader, s := r.reader.with(t), r.s
	s.Operator().MustCall(t, "actor.update", map[string]any{"id": 2, "pubkey": harness.ActorPubkey(99)}, nil)
	if st, body := reader.fetch("me", "GET", "", nil); st != 401 || !strings.Contains(body, "revoked") {
		t.Errorf("the reader's session after a new key: %s", body)
	}
	reader.open("#/c/1/flows")
	reader.waitJS("back to sign-in", `document.querySelector('#actor-login') !== null`)
}

func (r *consoleRun) consoleRunnersAndEvents(t *testing.T) {
	admin := r.admin.with(t)
	admin.open("#/c/1/runners")
	// Its script types in any order: runner.create's, or the order the runner process
	// announces them in (sorted), whichever wrote last.
	admin.waitJS("runner 1 with its script types", `[...(document.querySelector('#runners-table tr[data-id="1"]')?.cells ?? [])].some(c => c.textContent.trim().split(', ').sort().join(',') === 'bash,python,sh')`)
	admin.open("#/c/1/events")
	admin.waitJS("the feed open", `document.querySelector('#events-feed') !== null && window.heroFeed === true`)
	var j harness.Job
	r.c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 500, "script_type": "sh", "script": "true"}}, &j)
	admin.waitJS("the job's events in the feed", `document.querySelector('#events-feed').textContent.includes('job.finished job 500')`)
}

func (r *consoleRun) consoleQueuesAndCharts(t *testing.T) {
	admin := r.admin.with(t)
	admin.open("#/c/1/queues")
	admin.waitJS("the queues and the four charts", `document.querySelector('#queues-table tr[data-queue="queue:sh"]') !== null &&
		['throughput', 'failures', 'depth', 'hop'].every(c => document.querySelector('#chart-' + c + ' title'))`)
	// The earlier steps' jobs are in the last hour's charts.
	admin.waitJS("finished and failed jobs counted", `!document.querySelector('#chart-throughput-summary').textContent.startsWith('0 ') &&
		!document.querySelector('#chart-failures-summary').textContent.startsWith('0 ') && document.querySelector('#chart-hop path') !== null`)
	var before int
	admin.eval(`window.heroStats`, &before)
	r.c.MustCall(t, "job.run", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 510, "script_type": "sh", "script": "true"}}, nil)
	admin.waitJS("read again on the job's events", fmt.Sprintf(`window.heroStats > %d`, before))

	// Pause the sh queue from the page: a job submitted meanwhile starts only after
	// Resume (its start is after the click), and both states show on the page and in
	// queue.list.
	row := `#queues-table tr[data-queue="queue:sh"]`
	paused := func() bool {
		var l struct {
			Items []struct {
				Queue  string `json:"queue"`
				Paused bool   `json:"paused"`
			} `json:"items"`
		}
		r.c.MustCall(t, "queue.list", map[string]any{"context_id": ctx1}, &l)
		for _, q := range l.Items {
			if q.Queue == "queue:sh" {
				return q.Paused
			}
		}
		return false
	}
	admin.run("pause the queue", chromedp.Click(chromedp.CSS(row+` button`)))
	admin.waitJS("paused on the page", fmt.Sprintf(`document.querySelector('%s .paused')?.textContent === 'paused'`, row))
	if !paused() {
		t.Fatal("queue:sh is not paused after Pause")
	}
	r.c.MustCall(t, "job.submit", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 511, "script_type": "sh", "script": "true"}}, nil)
	resumed := time.Now().UnixMilli()
	admin.run("resume the queue", chromedp.Click(chromedp.CSS(row+` button`)))
	admin.waitJS("resumed on the page", fmt.Sprintf(`document.querySelector('%s .paused')?.textContent === 'no'`, row))
	if paused() {
		t.Fatal("queue:sh is still paused after Resume")
	}
	if !r.c.WaitEvent(t, ctx1, time.Minute, func() bool { return loadJob(t, r.c, 511).Status == "finished" }) {
		t.Fatalf("job 511 after Resume: %+v", loadJob(t, r.c, 511))
	}
	if j := loadJob(t, r.c, 511); j.StartedAtMs < resumed {
		t.Errorf("job 511 started at %d, before the queue was resumed (%d)", j.StartedAtMs, resumed)
	}
}

func (r *consoleRun) consoleSchedules(t *testing.T) {
	admin, c := r.admin.with(t), r.c
	c.MustCall(t, "schedule.create", map[string]any{"context_id": ctx1, "id": "nightly", "spec": map[string]any{"every": "24h"},
		"job": map[string]any{"script_type": "sh", "script": "echo from the schedule"}}, nil)
	admin.open("#/c/1/schedules")
	row := `#schedules-table tr[data-id="nightly"]`
	admin.waitJS("the schedule listed", fmt.Sprintf(`document.querySelector('%s .state')?.textContent.includes('active')`, row))
	state := func() bool {
		var sc struct {
			Paused bool `json:"paused"`
		}
		c.MustCall(t, "schedule.load", map[string]any{"context_id": ctx1, "id": "nightly"}, &sc)
		return sc.Paused
	}
	admin.run("pause", chromedp.Click(chromedp.CSS(row+` button`)))
	admin.waitJS("paused on the page", fmt.Sprintf(`document.querySelector('%s .state').textContent.includes('paused')`, row))
	if !state() {
		t.Error("the schedule is not paused after Pause")
	}
	admin.run("resume", chromedp.Click(chromedp.CSS(row+` button`)))
	admin.waitJS("active again", fmt.Sprintf(`document.querySelector('%s .state').textContent.includes('active')`, row))
	if state() {
		t.Error("the schedule is still paused after Resume")
	}
	admin.run("trigger", chromedp.Click(chromedp.CSS(row+` button:nth-of-type(2)`)))
	admin.waitJS("the run named", `document.querySelector('#triggered-job') !== null`)
	admin.run("open the run", chromedp.Click(chromedp.CSS(`#triggered-job`)))
	admin.waitJS("the run's log", `document.querySelector('#job-log')?.textContent.includes('from the schedule')`)
}

func (r *consoleRun) consoleLinkFromHeroctl(t *testing.T) {
	out, errOut, code := r.s.Heroctl(t, []string{"HERO_ACTOR=1", "HERO_CONTEXT=1"}, "console", "login")
	if code != 0 {
		t.Fatalf("heroctl console login: exit %d: %s", code, errOut)
	}
	link, _, _ := strings.Cut(out, "\n")
	if !strings.Contains(link, "/ui/#/link/l1.") {
		t.Fatalf("heroctl console login printed %q", out)
	}
	for i, want := range []string{"signed in", "used already"} {
		b := r.newB().with(t)
		b.run("open the link", chromedp.Navigate(link), chromedp.WaitReady(chromedp.CSS(`body[data-ready]`)))
		if i == 0 {
			b.waitJS("signed in as actor 1 by the link", `document.querySelector('#whoami')?.textContent === 'actor 1' && !location.hash.includes('link')`)
			continue
		}
		b.waitJS("the link refused the second time", `document.querySelector('#login-error')?.textContent.includes('`+want+`')`)
	}
}

// A reader removed from the context, then a new key: each ends the reader's open
// event stream by its notice (the stack's periodic check is 10 minutes off).
func (r *consoleRun) consoleRevocationsEndOpenStreams(t *testing.T) {
	reader, op := r.reader.with(t), r.s.Operator()
	reader.open("#/c/1/events")
	reader.waitJS("the feed open", `window.heroFeed === true`)
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{}}, nil)
	reader.waitJS("the stream ended: no longer a member", `(document.body.dataset.liveEnded || '').includes('not a member')`)
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{2}}, nil)
	reader.open("#/c/1/job/1/200") // a log view is a stream too (the job ended: it ends by itself)
	reader.waitJS("the log read", `document.querySelector('#job-log')?.dataset.complete === '1'`)
	reader.open("#/c/1/events")
	reader.waitJS("the feed open again", `window.heroFeed === true && !document.body.dataset.liveEnded`)
	op.MustCall(t, "actor.update", map[string]any{"id": 2, "pubkey": harness.ActorPubkey(98)}, nil)
	reader.waitJS("the stream ended: a new key", `(document.body.dataset.liveEnded || '').includes('revoked')`)
}

func loadFlowStatus(t *testing.T, c *harness.Client, id uint32) string {
	var f harness.Flow
	c.MustCall(t, "flow.load", map[string]any{"context_id": ctx1, "id": id}, &f)
	return f.Status
}

// consoleCookie is the session cookie of a browser (HttpOnly: read through DevTools).
func consoleCookie(t *testing.T, b *browser) string {
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range res.Cookies {
		if ck.Name == "hero_console" {
			if !ck.HTTPOnly || !ck.Secure || ck.SameSite != network.CookieSameSiteStrict {
				t.Errorf("the session cookie is HttpOnly %v, Secure %v, SameSite %s", ck.HTTPOnly, ck.Secure, ck.SameSite)
			}
			return ck.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}
