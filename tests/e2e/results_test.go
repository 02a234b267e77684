package e2e

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Acceptance (issue 21, executors 3): a handler's JSON result is kept as JSON
// (result_json) beside the string map; a dependent handler receives it as objects in
// hero_deps, a dependent sh job reads a nested value as JSON text.
func TestHandlerResultJSONReachesDependents(t *testing.T) {
	_, c := executorStack(t)
	value := map[string]any{"a": map[string]any{"b": []any{1, 2}}, "n": 3}
	createHandler(t, c, handlerSpec{id: 1, function: "go#value", kwargs: map[string]any{"value": value}})
	createHandler(t, c, handlerSpec{id: 2, function: "go#echo", deps: []uint32{1}})
	c.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": map[string]any{"id": 3, "script_type": "sh", "depends": []int{1},
		"script": `printf 'A=%s\nN=%s\n' "$HERO_DEP_1_a" "$HERO_DEP_1_n" > "$HERO_RESULT_FILE"`}}, nil)
	f := runFlow(t, c, 100, 1, 2, 3)
	if f.Status != "finished" {
		t.Fatalf("flow: %+v", f)
	}

	var j1 struct {
		Result     map[string]string `json:"result"`
		ResultJSON json.RawMessage   `json:"result_json"`
	}
	c.MustCall(t, "job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 1}, &j1)
	var got any
	if err := json.Unmarshal(j1.ResultJSON, &got); err != nil {
		t.Fatalf("job 1 result_json %q: %v", j1.ResultJSON, err)
	}
	want := map[string]any{"a": map[string]any{"b": []any{float64(1), float64(2)}}, "n": float64(3)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("job 1 result_json = %s, want %v", j1.ResultJSON, want)
	}
	// The seed's string map stays as it was.
	if j1.Result["a"] != `{"b":[1,2]}` || j1.Result["n"] != "3" {
		t.Errorf("job 1 result map: %v", j1.Result)
	}

	// go#echo returns its kwargs: hero_deps["1"] is the object, not JSON text.
	var j2 struct {
		ResultJSON json.RawMessage `json:"result_json"`
	}
	c.MustCall(t, "job.load", map[string]any{"context_id": ctx1, "caller_id": 1, "id": 2}, &j2)
	var echo struct {
		Kwargs struct {
			HeroDeps map[string]any `json:"hero_deps"`
		} `json:"kwargs"`
	}
	if err := json.Unmarshal(j2.ResultJSON, &echo); err != nil {
		t.Fatalf("job 2 result_json %q: %v", j2.ResultJSON, err)
	}
	if !reflect.DeepEqual(echo.Kwargs.HeroDeps["1"], want) {
		t.Errorf("hero_deps[1] of the dependent handler = %#v, want %v", echo.Kwargs.HeroDeps["1"], want)
	}

	// The sh job reads the nested value as JSON text, the number as its text.
	var a any
	if err := json.Unmarshal([]byte(f.Result["3.A"]), &a); err != nil || !reflect.DeepEqual(a, want["a"]) {
		t.Errorf("HERO_DEP_1_a = %q (%v), want JSON text of %v", f.Result["3.A"], err, want["a"])
	}
	if f.Result["3.N"] != "3" {
		t.Errorf("HERO_DEP_1_n = %q", f.Result["3.N"])
	}
}
