package model

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestScriptTypes(t *testing.T) {
	for _, s := range []string{"osis", "sal", "v", "python", "sh", "bash", "rhai", "heroscript"} {
		st, err := ParseScriptType(s)
		if err != nil || st.QueueSuffix() != s {
			t.Errorf("%s: %v %v", s, st, err)
		}
	}
	_, err := ParseScriptType("pyhton")
	if err == nil || !strings.Contains(err.Error(), `"pyhton" is not a known script type`) {
		t.Fatalf("unknown type: %v", err)
	}
}

func TestJobValidationNamesFieldAndRule(t *testing.T) {
	base := func() Job {
		return Job{ID: 12, CallerID: 1, ContextID: 1, Script: "echo hi", ScriptType: "sh"}
	}
	cases := []struct {
		mut  func(*Job)
		want string
	}{
		{func(j *Job) { j.ScriptType = "pyhton" }, `job 12: script_type "pyhton" is not a known script type`},
		{func(j *Job) { j.ScriptType = "" }, `job 12: script_type must be set`},
		{func(j *Job) { j.ContextID = 0 }, `context_id must be at least 1`},
		{func(j *Job) { j.CallerID = 0 }, `job 12: caller_id must be set`},
		{func(j *Job) { j.Script = " " }, `job 12: script must not be empty`},
		{func(j *Job) { j.EnvVars = map[string]string{"1X": "a"} }, `job 12: env_vars name "1X" is not a valid`},
		{func(j *Job) { j.EnvVars = map[string]string{"HERO_JOB_ID": "a"} }, `reserved HERO_ prefix`},
		{func(j *Job) { j.Dependends = []uint32{3, 3} }, `job 12: dependends lists 3 twice`},
		{func(j *Job) { j.Dependends = []uint32{12} }, `job 12: dependends lists the job itself`},
	}
	for _, c := range cases {
		j := base()
		c.mut(&j)
		err := j.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
		if _, ok := AsValidation(err); !ok {
			t.Errorf("%v is not a ValidationError", err)
		}
	}
	j := base()
	if err := j.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestOtherValidation(t *testing.T) {
	if err := (&Context{ID: 0, Admins: []uint32{1}}).Validate(); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("context 0: %v", err)
	}
	if err := (&Context{ID: 2}).Validate(); err == nil || !strings.Contains(err.Error(), "admins") {
		t.Errorf("no admins: %v", err)
	}
	if err := (&Flow{ID: 3, CallerID: 1, ContextID: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "flow 3: jobs must list at least one job") {
		t.Errorf("empty flow: %v", err)
	}
	if err := (&Runner{ID: 4}).Validate(); err == nil || !strings.Contains(err.Error(), "pubkey or address") {
		t.Errorf("remote runner without address: %v", err)
	}
	m := &Message{CallerID: 1, ContextID: 1, MessageType: "fax"}
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), `message_type "fax"`) {
		t.Errorf("message type: %v", err)
	}
}

func TestHashCodecRoundTrip(t *testing.T) {
	in := Job{ID: 7, CallerID: 2, ContextID: 3, Script: "x", ScriptType: ScriptBash, Timeout: 9, Retries: 255,
		EnvVars: map[string]string{"B": "2", "A": "1"}, Prerequisites: []string{"p"}, Dependends: []uint32{1, 2},
		Status: JobStarted, ExitCode: -1, StartedAtMs: 1700000000123}
	h := HashMap(&in)
	if h["env_vars"] != `{"A":"1","B":"2"}` || h["dependends"] != "[1,2]" || h["retries"] != "255" || h["status"] != "started" || h["result"] != "{}" {
		t.Fatalf("encoding: %v", h)
	}
	if _, ok := h["error"]; ok {
		t.Fatal("omitempty field written")
	}
	var out Job
	if err := FromHash("job:2:7", h, &out); err != nil {
		t.Fatal(err)
	}
	in.Result = map[string]string{}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n%+v\n%+v", in, out)
	}
}

func TestDecodeTolerance(t *testing.T) {
	var r Runner
	if err := FromHash("runner:1", map[string]string{"local": "1", "id": "1.0"}, &r); err != nil || !r.Local || r.ID != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	var j Job
	if err := FromHash("job:1:1", map[string]string{"retries": "256"}, &j); err == nil || !strings.Contains(err.Error(), "retries") {
		t.Fatalf("overflow: %v", err)
	}
	if err := FromHash("job:1:1", map[string]string{"dependends": "", "env_vars": "null", "status": "Finished"}, &j); err != nil || j.Status != JobFinished {
		t.Fatalf("empty values: %+v %v", j, err)
	}
}

func TestJobRef(t *testing.T) {
	r := JobRef{1, 2, 3}
	p, err := ParseJobRef(r.String())
	if err != nil || p != r || r.String() != "1:2:3" {
		t.Fatal(p, err)
	}
	if s := (JobRef{4294967295, 0, 70}).String(); s != "4294967295:0:70" {
		t.Fatal(s)
	}
	for _, bad := range []string{"1:2", "a:b:c", "1:2:99999999999"} {
		if _, err := ParseJobRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The decoder's shortcuts (raw JSON, empty objects and lists) give what json.Unmarshal
// gives, and refuse what it refuses: every field stored as JSON of every model type
// read from a hash.
func TestDecodeShortcutsAgreeWithJSON(t *testing.T) {
	inputs := []string{"{}", "[]", " [1, 2] ", `{"a":"b"}`, "{ }", "[ ]", "{", "[", `"s"`, "1", "true", "nul", `{"a":1}`, "[1,", " {} ",
		`["a","b"]`, `[{"id":"x"}]`, `{"a":{"b":"c"}}`, `{"cpu_ms":5}`}
	n := 0
	for _, obj := range []any{&Job{}, &Flow{}, &Context{}, &Runner{}, &Message{}, &Schedule{}} {
		typ := reflect.TypeOf(obj).Elem()
		for _, f := range fieldsOf(typ) {
			switch typ.Field(f.index).Type.Kind() {
			case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				continue // not JSON
			}
			n++
			for _, in := range inputs {
				got := reflect.New(typ)
				gotErr := FromHash("k", map[string]string{f.name: in}, got.Interface())
				want := reflect.New(typ)
				wantErr := json.Unmarshal([]byte(in), want.Elem().Field(f.index).Addr().Interface())
				if (gotErr != nil) != (wantErr != nil) {
					t.Errorf("%s.%s = %q: decoder error %v, json.Unmarshal error %v", typ.Name(), f.name, in, gotErr, wantErr)
					continue
				}
				decoded(want.Interface()) // as a decode completes an object (a job's absent lists and maps)
				if gotErr == nil && !reflect.DeepEqual(got.Interface(), want.Interface()) {
					t.Errorf("%s.%s = %q: decoded %+v, json.Unmarshal %+v", typ.Name(), f.name, in, got.Elem().Field(f.index), want.Elem().Field(f.index))
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d JSON fields checked", n)
	}
}

// A list decoded from "[]" is empty and not nil, and appending to it does not write
// into another object's list decoded the same way.
func TestDecodedEmptyListsAreNotShared(t *testing.T) {
	var a, b Job
	for _, j := range []*Job{&a, &b} {
		if err := FromHash("job:1:1", map[string]string{"prerequisites": "[]", "dependends": "[]"}, j); err != nil {
			t.Fatal(err)
		}
	}
	if a.Prerequisites == nil || len(a.Prerequisites) != 0 || a.Dependends == nil || len(a.Dependends) != 0 {
		t.Fatalf("%#v %#v", a.Prerequisites, a.Dependends)
	}
	a.Prerequisites = append(a.Prerequisites, "x")
	a.Dependends = append(a.Dependends, 7)
	if len(b.Prerequisites) != 0 || len(b.Dependends) != 0 {
		t.Fatalf("b's lists changed: %v %v", b.Prerequisites, b.Dependends)
	}
}

// Reading a started job's hash allocates only what its value needs: the two empty
// maps (env_vars, result), not a header per empty list.
func TestJobFromHashAllocs(t *testing.T) {
	j := &Job{ID: 1, CallerID: 2, ContextID: 1, FunctionName: "go#noop", ScriptType: "go", Status: JobStatus("started"), Attempt: 1, Worker: "runner-vm-1"}
	h := HashMap(j)
	var out Job
	if n := testing.AllocsPerRun(100, func() {
		out = Job{}
		if err := FromHash("job:2:1", h, &out); err != nil {
			t.Fatal(err)
		}
	}); n > 2 {
		t.Errorf("%v allocations per FromHash, want at most 2", n)
	}
}
