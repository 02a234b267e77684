package store_test

import (
	"context"
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
