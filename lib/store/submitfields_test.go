package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// splitJobFields are a new job's fields for lua/submit.lua made through its whole
// hash (model.HashFields, splitFields) and then cut down: how submit made them before
// newJobFields, which must make the same.
func splitJobFields(j *model.Job, ctxID uint32) []any {
	cmp, ini := splitFields(j, jobInitialOnly)
	ini = withoutFields(ini, submitWrites...)
	fields := append(cmp, ini...)
	out := fields[:0]
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		v, _ := fields[i+1].(string)
		def, ok := submitDefaults[name]
		switch name {
		case "caller_id":
			ok, def = true, strconv.FormatUint(uint64(j.CallerID), 10)
		case "context_id":
			ok, def = true, strconv.FormatUint(uint64(ctxID), 10)
		}
		if ok && v == def {
			continue
		}
		out = append(out, fields[i], fields[i+1])
	}
	return out
}

// fillAll sets every field of v (a struct, recursively) to a value that is not its
// zero value, each from seed.
func fillAll(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("v" + strconv.Itoa(seed))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed%100 + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed%100 + 1))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(fmt.Sprintf(` {"k": [%d, "x"]} `, seed)))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fillAll(s.Index(0), seed+1)
		fillAll(s.Index(1), seed+2)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for k := range 2 {
			key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fillAll(key, seed+10*k)
			fillAll(val, seed+10*k+1)
			m.SetMapIndex(key, val)
		}
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillAll(p.Elem(), seed)
		v.Set(p)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillAll(v.Field(i), seed+i)
			}
		}
	}
}

// submitFieldJobs are jobs of context 4 (caller 2, id 0) with defaults, every field
// set, and what submissions set: env, limits, deps, scheduled, retries.
func submitFieldJobs() map[string]*model.Job {
	every := &model.Job{}
	fillAll(reflect.ValueOf(every).Elem(), 3)
	every.ID, every.CallerID, every.ContextID, every.RunnerID, every.ScriptType = 0, 2, 4, 1, "sh"
	j := func(f func(j *model.Job)) *model.Job {
		out := &model.Job{CallerID: 2, ContextID: 4, Script: "true", ScriptType: "sh"}
		f(out)
		return out
	}
	return map[string]*model.Job{
		"defaults":    {CallerID: 2, ContextID: 4, ScriptType: "sh"},
		"every field": every,
		"plain":       j(func(*model.Job) {}),
		"env":         j(func(j *model.Job) { j.EnvVars = map[string]string{"B": "2", "A": "1 \"q\""} }),
		"limits":      j(func(j *model.Job) { j.Limits = &model.JobLimits{} }),
		"deps":        j(func(j *model.Job) { j.Dependends, j.Prerequisites = []uint32{7, 3}, []string{"x", "y"} }),
		"scheduled":   j(func(j *model.Job) { j.Status, j.RunAtMs, j.Attempt = model.JobScheduled, 5_000_000_000_000, 0 }),
		"retries":     j(func(j *model.Job) { j.Retries, j.Timeout, j.Priority = 3, 30, 9 }),
		"empty, not nil": j(func(j *model.Job) {
			j.EnvVars, j.Prerequisites, j.Dependends = map[string]string{}, []string{}, []uint32{}
		}),
		"handler": j(func(j *model.Job) {
			j.FunctionName, j.Args, j.Kwargs = "go#noop", json.RawMessage(` [1, {"a": 2}] `), json.RawMessage(`{"k": "v"}`)
		}),
		"other context": j(func(j *model.Job) { j.ContextID = 5 }),
		"caller 0":      j(func(j *model.Job) { j.CallerID = 0 }),
		"concurrency": j(func(j *model.Job) {
			j.ConcurrencyKey, j.ConcurrencyLimit, j.ConcurrencyPolicy, j.DebounceKey = "k", 2, "queue", "d"
		}),
		"awaited, traced": j(func(j *model.Job) {
			j.Awaited, j.Traceparent, j.Limited = true, "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01", true
		}),
		"bad raw json": j(func(j *model.Job) { j.Args = json.RawMessage(`{`) }),
	}
}

// asWritten are items as go-redis writes them: a *string (newJobFields hands it the
// job's own strings) as its value.
func asWritten(items []any) []any {
	out := make([]any, len(items))
	for i, v := range items {
		if p, ok := v.(*string); ok {
			v = *p
		}
		out[i] = v
	}
	return out
}

// newJobFields makes the fields the whole-hash way made (splitJobFields), for every
// field of a job: one added to model.Job and not to newJobFields fails "every field".
func TestNewJobFieldsMatchSplit(t *testing.T) {
	now := time.UnixMilli(1_765_000_000_123)
	for name, j := range submitFieldJobs() {
		for _, state := range []string{"as given", "submitted"} {
			if state == "submitted" {
				submittedState(j, time.UnixMilli(j.RunAtMs), now)
			}
			want := splitJobFields(j, 4)
			_, got := newJobFields([]any{"x", "y"}, j, 4)
			if got = asWritten(got); !reflect.DeepEqual(got, want) {
				t.Errorf("%s, %s:\n got %q\nwant %q", name, state, got, want)
			}
		}
	}
}

// The jobs of one call share one array for their fields (newJobFields' buf, grown as
// it fills): each job's are its own still.
func TestNewJobFieldsShareAnArray(t *testing.T) {
	var buf []any
	var names []string
	var got [][]any
	for name, j := range submitFieldJobs() {
		var f []any
		buf, f = newJobFields(buf, j, 4)
		names, got = append(names, name), append(got, f)
	}
	for i, name := range names {
		if want := splitJobFields(submitFieldJobs()[name], 4); !reflect.DeepEqual(asWritten(got[i]), want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got[i], want)
		}
	}
}

// requestTemplate is what localMessageFields makes of the request message.
func TestRequestTemplateMatchesMessage(t *testing.T) {
	for _, ctxID := range []uint32{0, 1, 4, 4294967295} {
		for _, now := range []time.Time{time.UnixMilli(1_765_000_000_123), time.UnixMilli(1_765_000_000_000), time.UnixMilli(999),
			time.Unix(0, 0), time.UnixMilli(-1500), time.Now()} {
			m := requestMessage(ctxID, 0, now, 0)
			want := append(localMessageFields(&m, "caller_id", "message"), fieldJobRef, "1")
			if got := requestTemplate(ctxID, now); !reflect.DeepEqual(got, want) {
				t.Errorf("context %d at %v:\n got %q\nwant %q", ctxID, now, got, want)
			}
		}
	}
}

// A job submitted stores the same hash, field for field in the same order, as it did
// with its fields made the whole-hash way (splitJobFields) and the request message
// made by reflection; its message too.
func TestSubmittedHashesAsBefore(t *testing.T) {
	r := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{URL: r.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, _, err := s.CreateContext(ctx, &model.Context{ID: 4, Admins: []uint32{1}}, "operator"); err != nil {
		t.Fatal(err)
	}
	d, err := s.Ctx(4)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateRunner(ctx, 4, &model.Runner{ID: 1, Local: true, ScriptTypes: []model.ScriptType{"sh"}}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := d.AnnounceExecutors(ctx, 1, []string{"go"}); err != nil {
		t.Fatal(err)
	}
	rdb := r.Client(t, 4)
	now := time.Now().Add(-time.Hour)
	for name, j := range submitFieldJobs() {
		runAt := time.UnixMilli(j.RunAtMs)
		submittedState(j, runAt, now)
		old := *j
		newKey, newMsg := submitOne(t, rdb, name, func() {
			if _, err := d.submit(ctx, []Submission{{Job: j, RunAt: runAt, Actor: "1"}}, nil, now); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}, j)
		oldKey, oldMsg := submitOne(t, rdb, name, func() {
			m := requestMessage(4, 0, now, 0)
			a := &submitArgs{JobsKeys: []string{keys.Job(old.CallerID, 0), ""}, Ctx: 4, NowS: now.Unix(), NowMs: now.UnixMilli(),
				Msg:  append(localMessageFields(&m, "caller_id", "message"), fieldJobRef, "1"),
				Jobs: []submitJob{{Caller: int64(old.CallerID), Actor: "1", RunAt: old.RunAtMs, Fields: splitJobFields(&old, 4)}}}
			res, err := a.run(ctx, d)
			if err == nil && res.Status != "ok" {
				err = fmt.Errorf("%+v", res)
			}
			if err != nil {
				t.Fatalf("%s, the old way: %v", name, err)
			}
			_, id, _ := strings.Cut(res.Members, ":") // its one job
			old.ID = parseU32(id)
		}, &old)
		for _, k := range [][2]string{{newKey, oldKey}, {newMsg, oldMsg}} {
			if k[0] == "" && k[1] == "" {
				continue
			}
			got, want := withoutIDs(orderedHash(t, rdb, k[0]), j.ID), withoutIDs(orderedHash(t, rdb, k[1]), old.ID)
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s\n got %q\n%s\nwant %q", name, k[0], got, k[1], want)
			}
		}
	}
}

// submitOne runs fn, a submission of job j, and returns its job's key and its
// request message's key ("" when it has none).
func submitOne(t *testing.T, rdb *redis.Client, name string, fn func(), j *model.Job) (string, string) {
	t.Helper()
	before := rdb.Keys(context.Background(), "message:*").Val()
	fn()
	msg := ""
	for _, k := range rdb.Keys(context.Background(), "message:*").Val() {
		if !slices.Contains(before, k) {
			msg = k
		}
	}
	if j.ID == 0 {
		t.Fatalf("%s: no id", name)
	}
	return keys.Job(j.CallerID, j.ID), msg
}

// orderedHash is HGETALL of key as its field/value items, in the hash's order.
func orderedHash(t *testing.T, rdb *redis.Client, key string) []string {
	t.Helper()
	v, err := rdb.Eval(context.Background(), "return redis.call('HGETALL', KEYS[1])", []string{key}).StringSlice() // a list, in order (RESP3 answers HGETALL with a map)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// withoutIDs is a job's or its request message's hash h (orderedHash) with the ids
// that differ between two jobs submitted alike (the job's, jobID, and its message's)
// written "*".
func withoutIDs(h []string, jobID uint32) []string {
	id := strconv.FormatUint(uint64(jobID), 10)
	for i := 0; i+1 < len(h); i += 2 {
		switch h[i] {
		case "id", "msgs":
			h[i+1] = "*"
		case "message":
			h[i+1] = strings.TrimSuffix(h[i+1], ":"+id) + ":*"
		case "job":
			h[i+1] = strings.Replace(h[i+1], `"id":`+id+`,`, `"id":*,`, 1)
		case fieldShortRequest: // "<created_at_ms> <job id>"
			h[i+1] = strings.TrimSuffix(h[i+1], " "+id) + " *"
		}
	}
	return h
}

// submitDefaults (jobDefaults but result, which submit.lua's state leaves out too:
// submitWrites) are the seed's fields a job whose id lua/submit.lua reserves is sent
// without when they hold their default — newJobFields' rule, made here the old way
// for splitJobFields: its hash leaves them out, as job.create's do, and a read gives
// them their default (model's decode); caller_id and context_id are left out of what
// is sent too when they are the job's caller and the call's context, which the script
// writes.
var submitDefaults = defaultsBut("result")

// defaultsBut is jobDefaults without the fields named.
func defaultsBut(names ...string) map[string]string {
	out := maps.Clone(jobDefaults)
	for _, n := range names {
		delete(out, n)
	}
	return out
}

// A new job's string fields go to the call as pointers to the job's own strings: a
// handler job's and a script's make no allocation of their own (a string put in an
// interface was one each).
func TestNewJobFieldsNoAllocationPerString(t *testing.T) {
	buf := make([]any, 0, 64)
	for _, j := range []*model.Job{
		{CallerID: 2, FunctionName: "go#noop", ConcurrencyKey: "k", TraceID: "t"},
		{CallerID: 2, Script: "true", ScriptType: "sh", DebounceKey: "d"},
	} {
		if n := testing.AllocsPerRun(50, func() { _, _ = newJobFields(buf[:0], j, 4) }); n != 0 {
			t.Errorf("%+v: %.0f allocations, want none", j, n)
		}
	}
}
