package hero

import (
	"encoding/json"
	"reflect"
	"testing"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// A job from a gRPC answer encodes as the JSON-RPC API's: the seed's lists and maps
// empty, never null; the fields that are left out when empty still left out. Twice:
// the second conversion uses the cached field list.
func TestJobOfListsEmptyNotNull(t *testing.T) {
	for range 2 {
		b, err := json.Marshal(jobOf(&herov1.Job{Id: 1}))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{"env_vars": "{}", "result": "{}", "prerequisites": "[]", "dependends": "[]"} {
			if string(m[field]) != want {
				t.Errorf("%s = %s, want %s", field, m[field], want)
			}
		}
		if _, ok := m["args"]; ok {
			t.Errorf("args (omitempty) is in %s", b)
		}
	}
	// jobOf sets the lists and maps itself: every one emptyNotNil would set (a list
	// field added to model.Job and not to jobOf fails here)
	j := jobOf(&herov1.Job{Id: 1})
	v := reflect.ValueOf(j).Elem()
	for _, i := range listFields(v.Type()) {
		if v.Field(i).IsNil() {
			t.Errorf("jobOf leaves %s nil", v.Type().Field(i).Name)
		}
	}
}

// An event from a gRPC answer carries every field of the message into the SDK's own
// Event (a field added to one and not the other fails here).
func TestEventOfEveryField(t *testing.T) {
	pb := &herov1.Event{Id: "1-0", TimeMs: 2, Type: "job.started", Actor: "7", ContextId: 3, FlowId: 4, JobId: 5, CallerId: 6, Status: "started", Detail: "d"}
	b, err := json.Marshal(eventOf(pb))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"1-0","time_ms":2,"type":"job.started","actor":"7","context_id":3,"flow_id":4,"job_id":5,"caller_id":6,"status":"started","detail":"d"}`
	if string(b) != want {
		t.Errorf("eventOf = %s, want %s", b, want)
	}
	if got, n := reflect.TypeOf(Event{}).NumField(), pb.ProtoReflect().Descriptor().Fields().Len(); got != n {
		t.Errorf("Event has %d fields, hero.v1.Event %d", got, n)
	}
}
