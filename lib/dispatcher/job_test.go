package dispatcher

import (
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

var iso8601 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$`)

func TestNewJobID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewJobID()
		if !uuidV4.MatchString(id) {
			t.Fatalf("%q is not a UUID v4", id)
		}
		if seen[id] {
			t.Fatalf("repeated id %s", id)
		}
		seen[id] = true
	}
}

func TestTimestamps(t *testing.T) {
	ts := time.Date(2025, 3, 4, 5, 6, 7, 891000000, time.FixedZone("x", 3600))
	if got := FormatTime(ts); got != "2025-03-04T04:06:07.891Z" || !iso8601.MatchString(got) {
		t.Fatalf("FormatTime = %q", got)
	}
	for in, want := range map[string]time.Time{
		"2025-03-04T04:06:07.891Z":         time.Date(2025, 3, 4, 4, 6, 7, 891000000, time.UTC),
		"2025-03-04T05:06:07+01:00":        time.Date(2025, 3, 4, 4, 6, 7, 0, time.UTC),
		"2025-03-04T04:06:07.123456789Z":   time.Date(2025, 3, 4, 4, 6, 7, 123456789, time.UTC),
		"2025-03-04T04:06:07":              time.Date(2025, 3, 4, 4, 6, 7, 0, time.UTC),
		"2025-03-04 04:06:07":              time.Date(2025, 3, 4, 4, 6, 7, 0, time.UTC),
		"2025-03-04T04:06:07.5+00:00":      time.Date(2025, 3, 4, 4, 6, 7, 500000000, time.UTC),
		"1741061167":                       time.Unix(1741061167, 0).UTC(),
		"1741061167891":                    time.UnixMilli(1741061167891).UTC(),
		"2025-03-04T04:06:07.891234+00:00": time.Date(2025, 3, 4, 4, 6, 7, 891234000, time.UTC),
	} {
		got, err := ParseTime(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseTime("yesterday"); err == nil {
		t.Error("ParseTime accepted yesterday")
	}
}

func TestJobHashRoundTrip(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 6000000, time.UTC)
	j := &Job{ID: "j1", CallerID: "c", WorkerID: "w", ContextID: "x", Script: "print(1)", Timeout: 30 * time.Second, Retries: 3,
		Concurrent: true, LogPath: "a/b.log", CreatedAt: now, UpdatedAt: now, Status: StatusStarted,
		EnvVars: map[string]string{"B": "2", "A": "1"}, Prerequisites: []string{"p"}, Dependents: []string{"d1", "d2"},
		Output: "out", Error: "err", Dependencies: []string{"x1"}}
	h := j.Hash()
	want := map[string]string{
		"id": "j1", "caller_id": "c", "worker_id": "w", "context_id": "x", "script": "print(1)", "timeout": "30", "retries": "3",
		"concurrent": "true", "log_path": "a/b.log", "created_at": "2025-01-02T03:04:05.006Z", "updated_at": "2025-01-02T03:04:05.006Z",
		"status": "started", "env_vars": `{"A":"1","B":"2"}`, "prerequisites": `["p"]`, "dependents": `["d1","d2"]`,
		"output": "out", "error": "err", "dependencies": `["x1"]`,
	}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("Hash =\n%v\nwant\n%v", h, want)
	}
	back, err := ParseJob("j1", h)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, j) {
		t.Fatalf("round trip:\n%+v\n%+v", back, j)
	}
	// A minimal job: optional fields are absent, dependencies is [].
	m := (&Job{ID: "m", Script: "s", Status: StatusDispatched}).Hash()
	for _, k := range []string{"log_path", "env_vars", "prerequisites", "dependents", "output", "error"} {
		if _, ok := m[k]; ok {
			t.Errorf("empty optional field %s written", k)
		}
	}
	if m["dependencies"] != "[]" || m["timeout"] != "0" || m["concurrent"] != "false" {
		t.Errorf("minimal hash %v", m)
	}
	// JSON for the APIs: the seed's names, timeout in seconds.
	b, _ := json.Marshal(j)
	var got map[string]any
	_ = json.Unmarshal(b, &got)
	if got["timeout"] != float64(30) || got["created_at"] != "2025-01-02T03:04:05.006Z" || got["caller_id"] != "c" {
		t.Errorf("JSON %s", b)
	}
}

func TestParseJobTolerant(t *testing.T) {
	j, err := ParseJob("fromkey", map[string]string{
		"script": "x", "timeout": "2.5", "retries": " 1 ", "concurrent": "True", "status": "WaitingForPrerequisites",
		"env_vars": `{"N":5,"B":false,"S":"s","Z":null}`, "dependencies": "a, b c", "prerequisites": `[1, "two"]`,
		"created_at": "2025-01-02 03:04:05", "unknown_field": "ignored",
	})
	if err != nil {
		t.Fatal(err)
	}
	if j.ID != "fromkey" || j.Timeout != 2500*time.Millisecond || j.Retries != 1 || !j.Concurrent || j.Status != StatusWaitingForPrerequisites {
		t.Errorf("%+v", j)
	}
	if !reflect.DeepEqual(j.EnvVars, map[string]string{"N": "5", "B": "false", "S": "s", "Z": ""}) {
		t.Errorf("env %v", j.EnvVars)
	}
	if !reflect.DeepEqual(j.Dependencies, []string{"a", "b", "c"}) || !reflect.DeepEqual(j.Prerequisites, []string{"1", "two"}) {
		t.Errorf("lists %v %v", j.Dependencies, j.Prerequisites)
	}
	if !reflect.DeepEqual(j.AllDependencies(), []string{"1", "two", "a", "b", "c"}) {
		t.Errorf("all deps %v", j.AllDependencies())
	}
	// Bad fields are reported by name, in the seed's order, and the rest is read.
	j, err = ParseJob("b", map[string]string{"script": "x", "timeout": "-1", "env_vars": "nope", "retries": "300", "concurrent": "maybe"})
	var de DecodeError
	if !errors.As(err, &de) || len(de) != 4 {
		t.Fatalf("err %v", err)
	}
	if de[0].Field != "timeout" || de.Field("env_vars") == nil || de.Field("retries") == nil || de.Field("concurrent") == nil {
		t.Errorf("fields %v", de)
	}
	if j.Script != "x" {
		t.Error("good fields not read")
	}
	for _, bad := range []string{`{"A":{"x":1}}`, `{"":"x"}`, `{"A=B":"x"}`, `[1]`, `{"A":"1"} x`} {
		if _, err := parseEnv(bad); err == nil {
			t.Errorf("env_vars %q accepted", bad)
		}
	}
}

func TestParseStatusCase(t *testing.T) {
	for in, want := range map[string]Status{"Finished": StatusFinished, "finished": StatusFinished, "Error": StatusError,
		"Dispatched": StatusDispatched, "ERROR": StatusError, "WaitingForPrerequisites": StatusWaitingForPrerequisites, " started ": StatusStarted, "waiting_for_prerequisites": StatusWaitingForPrerequisites} {
		if got := ParseStatus(in); got != want {
			t.Errorf("ParseStatus(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestResolveLogPath(t *testing.T) {
	dir := t.TempDir()
	real, _ := CleanLogDir(dir)
	for _, ok := range []string{"a.log", "x/y/z.log", real + "/b.log", "./c.log", "x/../d.log"} {
		if _, err := ResolveLogPath(real, ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"../a.log", "/etc/passwd", real, real + "/..", real + "x/a.log", "x/../../a.log", "a\x00b"} {
		if _, err := ResolveLogPath(real, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ResolveLogPath("", "a.log"); err == nil {
		t.Error("accepted without a log directory")
	}
}

func TestClientConfig(t *testing.T) {
	var cc ClientConfig
	fs2 := config.NewFlagSet("supervisor", "")
	cc.RegisterFlags(fs2)
	fs2.SetEnvLookup(func(k string) (string, bool) {
		return map[string]string{"DISPATCHER_PREFIX": "h2:"}[k], k == "DISPATCHER_PREFIX"
	})
	if err := fs2.Parse(nil, nil); err != nil || cc.Validate() != nil || cc.Prefix != "h2:" || cc.DB != 0 {
		t.Fatalf("%+v %v", cc, err)
	}
}
