package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

// A service's Redis user may not run CONFIG (it is @dangerous), so the server's
// databases setting is found otherwise: a context id beyond it is refused by name
// and range, as with CONFIG, instead of reaching Redis ("ERR DB index is out of
// range") — and nothing is written.
func TestContextBeyondTheDatabasesWithoutConfig(t *testing.T) {
	r := redistest.Start(t, redistest.Options{Databases: 12, ExtraArgs: []string{"--user", "svc", "on", ">svc-password-0123", "~*", "&*", "+@all", "-@dangerous"}})
	url := strings.Replace(r.URL, "redis://", "redis://svc:svc-password-0123@", 1)
	s, err := store.Open(context.Background(), store.Options{URL: url, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, id := range []uint32{12, 99, 4_000_000_000} {
		_, err := s.Ctx(id)
		var ve *model.ValidationError
		if !errors.As(err, &ve) || ve.Field != "context_id" || !strings.Contains(err.Error(), "contexts 1-11") {
			t.Errorf("context %d: %v, want a context_id error naming contexts 1-11", id, err)
		}
		if _, err := s.LoadContext(ctx, id); err == nil || strings.Contains(err.Error(), "DB index is out of range") {
			t.Errorf("context %d: load: %v", id, err)
		}
	}
	if _, _, err := s.CreateContext(ctx, &model.Context{ID: 12, Admins: []uint32{1}}, "operator"); err == nil || !strings.Contains(err.Error(), "contexts 1-11") {
		t.Fatalf("create context 12: %v", err)
	}
	if n := r.Client(t, 0).Exists(ctx, "coord:contexts").Val(); n != 0 {
		t.Fatal("the refused context was registered")
	}
	if _, err := s.Ctx(11); err != nil {
		t.Fatalf("context 11 (the last database): %v", err)
	}
}
