package console

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sse opens a console stream and returns a reader of its events, each "event: <name>"
// with its data line.
func (f *fixture) sse(path, cookie string) (next func() (event, data string), done func()) {
	f.t.Helper()
	req, err := http.NewRequest("GET", f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	req.AddCookie(&http.Cookie{Name: CookieName, Value: cookie})
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		f.t.Fatalf("%s: %s", path, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	return func() (string, string) {
		f.t.Helper()
		var ev string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				return ev, strings.TrimPrefix(line, "data: ")
			}
		}
		f.t.Fatalf("%s: the stream ended (%v)", path, sc.Err())
		return "", ""
	}, func() { _ = resp.Body.Close() }
}

// An open stream ends at the notice of a revocation (Backend.Guard), not at a timer:
// the test's backend checks it again only when told.
func TestConsoleStreamEndsAtARevocationNotice(t *testing.T) {
	f := newFixture(t, false)
	_, _, cookie := f.do("POST", "/ui/api/login", `{"secret":"`+secret+`"}`, "", nil)
	next, done := f.sse("/ui/api/events?context_id=1", cookie)
	defer done()
	f.b.events <- Event{ID: "1-1", JobID: 3, Data: map[string]any{"type": "job.started"}}
	if ev, data := next(); ev != "ev" || !strings.Contains(data, "job.started") {
		t.Fatalf("first event %s %s", ev, data)
	}
	f.b.notice() // nothing changed: the stream goes on
	f.b.events <- Event{ID: "1-2", JobID: 3, Data: map[string]any{"type": "job.finished"}}
	if ev, data := next(); ev != "ev" || !strings.Contains(data, "job.finished") {
		t.Fatalf("second event %s %s", ev, data)
	}
	f.b.mu.Lock()
	f.b.revoked = true
	f.b.mu.Unlock()
	f.b.notice()
	if ev, data := next(); ev != "end" || !strings.Contains(data, "revoked") {
		t.Fatalf("after the revocation: %s %s", ev, data)
	}
}

// A job's log is read on when an append is told (LogAppends) and when an event of the
// job arrives (its end), and the tail marks the log as tailed.
func TestConsoleLogTailsOnAppendsAndEnds(t *testing.T) {
	f := newFixture(t, false)
	_, _, cookie := f.do("POST", "/ui/api/login", `{"secret":"`+secret+`"}`, "", nil)
	f.b.mu.Lock()
	f.b.log = "line 1\n"
	f.b.mu.Unlock()
	next, done := f.sse("/ui/api/log?context_id=1&caller_id=1&id=5", cookie)
	defer done()
	if ev, data := next(); ev != "log" || !strings.Contains(data, "line 1") || strings.Contains(data, `"complete":true`) {
		t.Fatalf("first chunk %s %s", ev, data)
	}
	f.b.mu.Lock()
	f.b.log += "line 2\n"
	marked := f.b.marked
	f.b.mu.Unlock()
	if marked != 1 {
		t.Errorf("MarkLog called %d times, want 1", marked)
	}
	f.b.appends <- struct{}{}
	if ev, data := next(); ev != "log" || !strings.Contains(data, "line 2") || strings.Contains(data, "line 1") {
		t.Fatalf("after an append: %s %s", ev, data)
	}
	f.b.mu.Lock()
	f.b.log += "last\n"
	f.b.ended = true
	f.b.mu.Unlock()
	f.b.events <- Event{ID: "1-3", JobID: 5, Data: map[string]any{"type": "job.finished"}}
	if ev, data := next(); ev != "log" || !strings.Contains(data, "last") || !strings.Contains(data, `"complete":true`) {
		t.Fatalf("after the job's end: %s %s", ev, data)
	}
}

// The charts' minutes: starts, ends, failures, the median hop (dispatch to start) and
// the waiting depth walked back from now's.
func TestStatsSeries(t *testing.T) {
	from := time.Unix(1_800_000_000, 0).Truncate(time.Minute)
	ms := func(min, sec int) int64 {
		return from.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second).UnixMilli()
	}
	evs := []StatEvent{
		{ms(0, 1), "job.dispatched", 1, 1}, {ms(0, 2), "job.dispatched", 1, 2}, {ms(0, 3), "job.dispatched", 1, 3},
		{ms(0, 4), "job.started", 1, 1}, {ms(0, 30), "job.finished", 1, 1},
		{ms(1, 0), "job.started", 1, 2}, {ms(1, 5), "job.failed", 1, 2},
		{ms(1, 10), "job.started", 1, 3},
	}
	got := series(evs, from, from.Add(2*time.Minute), 4)
	if len(got) != 3 {
		t.Fatalf("%d buckets, want 3", len(got))
	}
	want := []struct {
		started, finished, failed int
		hop, depth                int64
	}{{1, 1, 0, 3000, 6}, {2, 0, 1, 67000, 4}, {0, 0, 0, -1, 4}}
	for i, w := range want {
		b := got[i]
		if b.Started != w.started || b.Finished != w.finished || b.Failed != w.failed || b.HopMs != w.hop || b.Depth != w.depth {
			t.Errorf("minute %d: %+v, want %+v", i, b, w)
		}
	}
}

func TestConsoleStats(t *testing.T) {
	f := newFixture(t, false)
	_, _, cookie := f.do("POST", "/ui/api/login", `{"secret":"`+secret+`"}`, "", nil)
	st, body, _ := f.do("GET", "/ui/api/stats?context_id=1", "", cookie, nil)
	if st != 200 || !strings.Contains(body, `"waiting":3`) || !strings.Contains(body, `"running":2`) || !strings.Contains(body, `"queue_actions":false`) {
		t.Fatalf("stats: %d %s", st, body)
	}
	if st, body, _ := f.do("GET", "/ui/api/stats", "", cookie, nil); st != 400 || !strings.Contains(body, "context_id is required") {
		t.Errorf("no context: %d %s", st, body)
	}
}
