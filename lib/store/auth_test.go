package store_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// An actor's key is replaced (and validated); its stored key is what ActorKey reads.
func TestUpdateActorAndActorKey(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	if _, _, err := s.CreateActor(ctx, &model.Actor{ID: 3, Pubkey: pkA}); err != nil {
		t.Fatal(err)
	}
	if pk, ok, err := s.ActorKey(ctx, 3); err != nil || !ok || pk != pkA {
		t.Fatalf("ActorKey: %q %v %v", pk, ok, err)
	}
	if _, ok, _ := s.ActorKey(ctx, 4); ok {
		t.Fatal("actor 4 exists")
	}
	bad := "pk-3"
	if _, err := s.UpdateActor(ctx, 3, &bad, nil); err == nil || !strings.Contains(err.Error(), "pubkey") {
		t.Fatalf("a malformed key: %v", err)
	}
	pk := pkB
	a, err := s.UpdateActor(ctx, 3, &pk, nil)
	if err != nil || a.Pubkey != pkB {
		t.Fatalf("update: %+v %v", a, err)
	}
	if _, err := s.UpdateActor(ctx, 99, &pk, nil); err == nil {
		t.Fatal("an unknown actor was updated")
	}
}

// A nonce is fresh once per actor; another actor's same nonce is fresh too.
func TestUseNonce(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		if fresh, err := s.UseNonce(ctx, 1, "0123456789abcdef", time.Minute); err != nil || fresh != want {
			t.Fatalf("use %d: %v %v", i, fresh, err)
		}
	}
	if fresh, _ := s.UseNonce(ctx, 2, "0123456789abcdef", time.Minute); !fresh {
		t.Fatal("actor 2's nonce was taken by actor 1")
	}
}

// Revoking keeps the record (a tombstone) and is idempotent; a configured secret
// is stored only once revoked; the deployment key is made once.
func TestOperatorSecretRecords(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	k1, err := s.OperatorSecretKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if k2, _ := s.OperatorSecretKey(ctx); string(k1) != string(k2) {
		t.Fatal("the deployment key changed")
	}
	rec := store.SecretRecord{Fingerprint: "op_1", Source: store.SecretAPI, Verifier: "v", CreatedMs: 1}
	if added, err := s.AddOperatorSecret(ctx, rec); err != nil || !added {
		t.Fatalf("add: %v %v", added, err)
	}
	if added, _ := s.AddOperatorSecret(ctx, rec); added {
		t.Fatal("added twice")
	}
	for i, want := range []bool{true, false} {
		if revoked, err := s.RevokeOperatorSecret(ctx, "op_1", "test", nil); err != nil || revoked != want {
			t.Fatalf("revoke %d: %v %v", i, revoked, err)
		}
	}
	got, _ := s.OperatorSecret(ctx, "op_1")
	if got == nil || got.RevokedMs == 0 || got.Verifier != "v" || got.Reason != "test" {
		t.Fatalf("revoked record: %+v", got)
	}
	if _, err := s.RevokeOperatorSecret(ctx, "op_2", "test", nil); err == nil {
		t.Fatal("revoked an unknown secret")
	}
	if _, err := s.RevokeOperatorSecret(ctx, "op_3", "test", &store.SecretRecord{Fingerprint: "op_3", Source: store.SecretConfigured}); err != nil {
		t.Fatal(err)
	}
	all, _ := s.OperatorSecrets(ctx)
	if len(all) != 2 {
		t.Fatalf("records: %+v", all)
	}
}

// An actor's key change and its address change at once both hold: each update writes
// the fields it is given (it wrote both from its own read: the key rotation was lost
// in ~1 of 7 races, the old key back).
func TestUpdateActorsFieldsRacing(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	for trial := range 200 {
		id := uint32(1000 + trial)
		if _, _, err := s.CreateActor(ctx, &model.Actor{ID: id, Pubkey: pkA}); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 2)
		go func() {
			pk := pkB
			_, err := s.UpdateActor(ctx, id, &pk, nil)
			done <- err
		}()
		go func() {
			addr := []string{"400:1::" + strconv.Itoa(trial+1)}
			_, err := s.UpdateActor(ctx, id, nil, &addr)
			done <- err
		}()
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		a, err := s.LoadActor(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a.Pubkey != pkB || len(a.Address) != 1 {
			t.Fatalf("trial %d: actor %d after a key change and an address change at once: key %q, addresses %v", trial, id, a.Pubkey, a.Address)
		}
	}
}

// context.update writes the fields it names and no other: an update from a copy read
// before an operator changed the admins leaves the operator's admins (it wrote back
// the copy's: a removed admin was admin again); a field named empty is removed.
func TestUpdateContextWritesTheNamedFields(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	mustCtx(t, s, 40)
	read, err := s.LoadContext(ctx, 40)
	if err != nil {
		t.Fatal(err)
	}
	fresh := *read
	fresh.Admins, fresh.Weight = []uint32{7}, 3
	if _, err := s.UpdateContext(ctx, &fresh, []string{"admins", "weight"}, "operator"); err != nil {
		t.Fatal(err)
	}
	read.RetentionSeconds = 3600
	got, err := s.UpdateContext(ctx, read, []string{"retention_seconds"}, "1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Admins, []uint32{7}) || got.Weight != 3 || got.RetentionSeconds != 3600 {
		t.Fatalf("after the operator's admins and weight and a stale copy's retention: admins %v weight %d retention %d; want [7] 3 3600",
			got.Admins, got.Weight, got.RetentionSeconds)
	}
	got.Weight = 0
	if got, err = s.UpdateContext(ctx, got, []string{"weight"}, "operator"); err != nil || got.Weight != 0 {
		t.Fatalf("weight 0: %v %v", got, err)
	}
	if _, err := s.UpdateContext(ctx, &model.Context{ID: 40}, []string{"created_at"}, "operator"); err == nil {
		t.Fatal("an update of created_at was taken")
	}
}
