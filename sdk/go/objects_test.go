package hero

import (
	"encoding/json"
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
}
