package store

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// wire is an ARGV item as go-redis writes it (a bulk string): the generated calls
// hand it strings, integers and bools as pointers, which it writes as their values (a
// bool as 1 or 0).
func wire(t *testing.T, v any) string {
	t.Helper()
	switch x := v.(type) {
	case string:
		return x
	case *string:
		return *x
	case []byte:
		return string(x)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case *int64:
		return strconv.FormatInt(*x, 10)
	case *bool:
		if *x {
			return "1"
		}
		return "0"
	}
	t.Fatalf("an ARGV item of type %T", v)
	return ""
}

// The generated calls give a script the ARGV items its header declares, in order, as
// they did when each was a value of its own (a bool "1" or "0", an integer in decimal,
// JSON as its text, a list's length before its items, a record's fields in order), in
// a slice made at its size; and, but for the slices and JSON, without an allocation
// per item (a finish of 12 runs made ~80 of them, its slice grown four times).
func TestGeneratedCallArgs(t *testing.T) {
	a := &finishJobsArgs{ProcKey: "p", LeasesKey: "l", MsgOutKey: "m", EventsKey: "e",
		NowS: 1700000000, NowMs: 1700000000123, Ctx: 7, Caller: 300, Logmax: 4096, Grouped: true, NowUs: 1700000000123456, Apply: false,
		Request: []any{"kind", "job_request"}, Result: []any{"a", "b", "c", "d"}, Glist: "",
		Take: 2, Tworker: "w", Texp: 99999, Tnonce: "abc", Tqueues: []string{"q1", "q2"}, Twakes: []string{"w1", "w2"}, Tclears: []string{"x"}}
	for i := range 12 {
		a.Runs = append(a.Runs, finishJobsRun{JobKey: fmt.Sprintf("job:1:%d", 1000+i), Member: "mem", Claim: "c", ID: int64(1000 + i), Flow: 0,
			Status: "finished", Result: "{}", Entry: []byte(`{"id":1}`), Extra: []any{"started", "12345"}})
	}
	a.Runs[3].Extra = nil
	want := []string{"1700000000", "1700000000123", "7", "300", "4096", "1", "1700000000123456", "0",
		"2", "kind", "job_request", "4", "a", "b", "c", "d", "", "12"}
	for _, r := range a.Runs {
		want = append(want, r.JobKey, "mem", "c", strconv.FormatInt(r.ID, 10), "0", "finished", "{}", `{"id":1}`, strconv.Itoa(len(r.Extra)))
		for _, x := range r.Extra {
			want = append(want, x.(string))
		}
	}
	want = append(want, "2", "w", "99999", "abc", "2", "q1", "q2", "2", "w1", "w2", "1", "x")
	c := a.call()
	got := make([]string, len(c.Args))
	for i, v := range c.Args {
		got[i] = wire(t, v)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ARGV\n%q\nwant\n%q", got, want)
	}
	if len(c.Args) != cap(c.Args) {
		t.Fatalf("ARGV of %d items in a slice made for %d", len(c.Args), cap(c.Args))
	}
	if n := testing.AllocsPerRun(20, func() { _ = a.call() }); n > 2 {
		t.Fatalf("a finish call of 12 runs made %.0f allocations, want 2 (KEYS and ARGV)", n)
	}
	j := &announceArgs{RunnerKey: "r", CountsKey: "c", Names: json.RawMessage(`["go"]`), NowS: 5, Field: "executors", Prefix: "queue:exec:", RunnerID: 1}
	if got := wire(t, j.call().Args[0]); got != `["go"]` {
		t.Fatalf("a JSON argument written as %q", got)
	}
}

// fcall queues the command go-redis's FCall would (the same items on the wire), with
// its arguments in one slice: FCall boxes the function's name and each key, ~18
// allocations of a submission of 16 jobs.
func TestFcallAsGoRedis(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: the commands are only queued
	defer rdb.Close()
	n := int64(1700000000123)
	keys := make([]string, 0, 32)
	for i := range 16 {
		keys = append(keys, fmt.Sprintf("job:%d:0", 300+i), "")
	}
	c := Call{Script: submitScript, Keys: keys, Args: []any{&n, "x", 3, []byte("raw")}}
	p := rdb.Pipeline()
	got, want := fcall(ctx, p, c).Args(), p.FCall(ctx, c.Script.fn, c.Keys, c.Args...).Args()
	if len(got) != len(want) {
		t.Fatalf("%d items, FCall's %d", len(got), len(want))
	}
	for i := range want {
		if g, w := wire(t, got[i]), wire(t, want[i]); g != w {
			t.Fatalf("item %d: %q, FCall's %q", i, g, w)
		}
	}
	allocs := func(f func(p redis.Pipeliner)) float64 {
		return testing.AllocsPerRun(20, func() {
			p := rdb.Pipeline()
			f(p)
		}) - testing.AllocsPerRun(20, func() { _ = rdb.Pipeline() })
	}
	mine := allocs(func(p redis.Pipeliner) { fcall(ctx, p, c) })
	theirs := allocs(func(p redis.Pipeliner) { p.FCall(ctx, c.Script.fn, c.Keys, c.Args...) })
	if mine > 3 || theirs-mine < 17 {
		t.Fatalf("fcall made %.0f allocations (FCall %.0f), want at most 3: its arguments' slice, the command, the pipeline's list", mine, theirs)
	}
}

// submit's reply holds the jobs found after members, none when none was (an empty
// table of them in every reply was ~4-6k instructions a call).
func TestSubmitReplyFoundAfterMembers(t *testing.T) {
	out, err := decodeSubmitReply([]any{"ok", int64(0), "", "1:5 1:6"})
	if err != nil || out.Status != "ok" || out.Members != "1:5 1:6" || len(out.Found) != 0 {
		t.Fatalf("none found: %+v %v", out, err)
	}
	out, err = decodeSubmitReply([]any{"ok", int64(0), "", "1:5 1:6", []any{int64(2), "id", "6", "status", "started"}})
	if err != nil || out.Members != "1:5 1:6" || len(out.Found) != 1 || out.Found[0].Index != 2 ||
		len(out.Found[0].Hash) != 4 || out.Found[0].Hash[1] != "6" {
		t.Fatalf("one found: %+v %v", out, err)
	}
}
