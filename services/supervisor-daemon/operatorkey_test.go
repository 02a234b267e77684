package main

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/redisacl"
)

const configuredSecret = "a-configured-operator-secret"

// apiSecret loads the operator secrets as an earlier start did and creates a secret
// through the API (a stored verifier): it returns the secret.
func apiSecret(t *testing.T, o *operatorSecrets) string {
	t.Helper()
	secret, _, err := o.generate(context.Background(), "api")
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// accepted: the secret verifies.
func accepted(t *testing.T, o *operatorSecrets, secret string) bool {
	t.Helper()
	_, reason, err := o.check(context.Background(), secret)
	if err != nil {
		t.Fatal(err)
	}
	return reason == ""
}

// A deployment whose key is in Redis (an earlier version) has it moved into the file
// at the first start with --operator-secret-key-file: the file holds it, Redis only its
// mark, the secrets stored under it still verify, and a supervisor-daemon that reads
// the key from Redis (an earlier version) now refuses to start.
func TestOperatorKeyMovesOutOfRedis(t *testing.T) {
	_, st := submitStore(t)
	ctx := context.Background()
	log := zerolog.Nop()
	old, err := loadOperatorSecrets(ctx, st, []string{configuredSecret}, "", "", log) // an earlier start: the key in Redis
	if err != nil {
		t.Fatal(err)
	}
	secret := apiSecret(t, old)
	legacy, _ := st.OperatorSecretKeyRecord(ctx)
	file := filepath.Join(t.TempDir(), redisacl.OperatorKeyFile)
	o, err := loadOperatorSecrets(ctx, st, []string{configuredSecret}, "", file, log)
	if err != nil {
		t.Fatal(err)
	}
	if !accepted(t, o, secret) || !accepted(t, o, configuredSecret) {
		t.Fatal("a secret stored under the key in Redis is refused once the key is in the file")
	}
	if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != legacy {
		t.Fatalf("the file holds %q, not Redis's key", b)
	}
	rec, _ := st.OperatorSecretKeyRecord(ctx)
	if !strings.HasPrefix(rec, keyMarkPrefix) || strings.Contains(legacy, strings.TrimPrefix(rec, keyMarkPrefix)) {
		t.Fatalf("%s holds %q after the move", keys.OperatorSecretKey, rec)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file's mode is %v", fi.Mode())
	}
	if _, err := st.OperatorSecretKey(ctx); err == nil {
		t.Fatal("a version that keeps the key in Redis would start with a key of its own")
	}
	if _, err := loadOperatorSecrets(ctx, st, []string{configuredSecret}, "", "", log); err == nil || !strings.Contains(err.Error(), "--operator-secret-key-file") {
		t.Fatalf("a start without the file after the move: %v", err)
	}
	again, err := loadOperatorSecrets(ctx, st, []string{configuredSecret}, "", file, log)
	if err != nil || !accepted(t, again, secret) {
		t.Fatalf("a second start with the file: %v", err)
	}
}

// heroctl pki init made a key file before the upgrade: Redis's key, which made the
// stored secrets, replaces it (the file's was never used); with nothing stored, the
// file's key is taken and Redis's dropped.
func TestOperatorKeyFileOfPkiInitMeetsRedisKey(t *testing.T) {
	ctx := context.Background()
	log := zerolog.Nop()
	for _, withStored := range []bool{true, false} {
		_, st := submitStore(t)
		old, err := loadOperatorSecrets(ctx, st, []string{configuredSecret}, "", "", log)
		if err != nil {
			t.Fatal(err)
		}
		var secret string
		if withStored {
			secret = apiSecret(t, old)
		}
		legacy, _ := st.OperatorSecretKeyRecord(ctx)
		dir := t.TempDir()
		if _, err := redisacl.InitOperatorKey(dir); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, redisacl.OperatorKeyFile)
		made, _ := os.ReadFile(file)
		o, err := loadOperatorSecrets(ctx, st, []string{configuredSecret}, "", file, log)
		if err != nil {
			t.Fatal(err)
		}
		now, _ := os.ReadFile(file)
		switch {
		case withStored && (strings.TrimSpace(string(now)) != legacy || !accepted(t, o, secret)):
			t.Fatalf("with stored secrets: the file holds %q (Redis's key %q)", now, legacy)
		case !withStored && string(now) != string(made):
			t.Fatalf("with nothing stored: the file changed to %q", now)
		}
		if !accepted(t, o, configuredSecret) {
			t.Fatal("the configured secret is refused")
		}
	}
}

// Refused with a clear error: a file with another key than the one that made the
// stored secrets, a missing file while they depend on it, a file that is no key.
func TestOperatorKeyFileRefusals(t *testing.T) {
	_, st := submitStore(t)
	ctx := context.Background()
	log := zerolog.Nop()
	file := filepath.Join(t.TempDir(), redisacl.OperatorKeyFile)
	o, err := loadOperatorSecrets(ctx, st, []string{configuredSecret}, "", file, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("no key file made: %v", err)
	}
	secret := apiSecret(t, o)
	if err := os.Rename(file, file+".kept"); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOperatorSecrets(ctx, st, nil, "", file, log); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("without the file: %v", err)
	}
	if err := os.WriteFile(file, []byte(hex.EncodeToString(make([]byte, 32))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOperatorSecrets(ctx, st, nil, "", file, log); err == nil || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("with another key in the file: %v", err)
	}
	if err := os.WriteFile(file, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOperatorSecrets(ctx, st, nil, "", file, log); err == nil || !strings.Contains(err.Error(), "hex of at least 16 bytes") {
		t.Fatalf("with no key in the file: %v", err)
	}
	if err := os.Rename(file+".kept", file); err != nil {
		t.Fatal(err)
	}
	o, err = loadOperatorSecrets(ctx, st, nil, "", file, log)
	if err != nil || !accepted(t, o, secret) {
		t.Fatalf("with the file restored: %v", err)
	}
}
