package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Issue 49: a job created holding the seed's defaults stores none of them, nor
// created_at; it reads (and shows in JSON) as before: "" and 0, {} and [], never null,
// created_at from created_at_ms. A re-creation of its id with other content still names
// the field that differs, defaults included.
func TestCreatedJobStoresNoDefaults(t *testing.T) {
	s := open(t)
	db := mustCtx(t, s, 49)
	ctx := context.Background()
	rc := srv.Client(t, 49)
	j, created, err := s.CreateJob(ctx, &model.Job{ID: 7, CallerID: 1, ContextID: 49, FunctionName: "go#noop"}, "1")
	if err != nil || !created {
		t.Fatal(created, err)
	}
	h := rc.HGetAll(ctx, keys.Job(1, 7)).Val()
	for _, f := range []string{"script", "timeout", "retries", "env_vars", "result", "prerequisites", "dependends", "created_at"} {
		if v, ok := h[f]; ok {
			t.Errorf("the job's hash holds %s = %q", f, v)
		}
	}
	got, err := db.LoadJob(ctx, 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got.EnvVars == nil || got.Result == nil || got.Prerequisites == nil || got.Dependends == nil {
		t.Fatalf("a nil list or map read: %+v", got)
	}
	if got.CreatedAt == 0 || got.CreatedAt != got.CreatedAtMs/1000 || got.CreatedAt != j.CreatedAt {
		t.Fatalf("created_at %d (created_at_ms %d, created %d)", got.CreatedAt, got.CreatedAtMs, j.CreatedAt)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if js := string(b); !strings.Contains(js, `"env_vars":{}`) || !strings.Contains(js, `"dependends":[]`) || !strings.Contains(js, `"result":{}`) {
		t.Fatalf("the job's JSON: %s", js)
	}
	// the same again: the job; a default against a stored value: a conflict naming it
	if _, created, err := s.CreateJob(ctx, &model.Job{ID: 7, CallerID: 1, ContextID: 49, FunctionName: "go#noop"}, "1"); err != nil || created {
		t.Fatalf("the same job again: %v, %v", created, err)
	}
	if _, _, err := s.CreateJob(ctx, &model.Job{ID: 8, CallerID: 1, ContextID: 49, FunctionName: "go#noop", Timeout: 30}, "1"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.CreateJob(ctx, &model.Job{ID: 8, CallerID: 1, ContextID: 49, FunctionName: "go#noop"}, "1")
	var ee *store.ExistsError
	if !errors.As(err, &ee) || ee.Field != "timeout" {
		t.Fatalf("a default against a stored timeout: %v, want an ExistsError naming timeout", err)
	}
}
