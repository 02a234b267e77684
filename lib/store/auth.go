package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// What the API's authentication keeps in DB 0: the used nonces of signed requests,
// and the operator secrets that are stored (generated or created through the API) or
// revoked. docs/security.md describes the scheme.

// ActorKey returns an actor's stored pubkey; exists=false when there is no such actor.
func (s *Store) ActorKey(ctx context.Context, id uint32) (pubkey string, exists bool, err error) {
	vals, err := s.G().HMGet(ctx, keys.Actor(id), "id", "pubkey").Result()
	if err != nil {
		return "", false, fmt.Errorf("load actor %d: %w", id, err)
	}
	if vals[0] == nil {
		return "", false, nil
	}
	pk, _ := vals[1].(string)
	return pk, true, nil
}

// ActorExists reports whether actor:<id> exists.
func (s *Store) ActorExists(ctx context.Context, id uint32) (bool, error) {
	n, err := s.G().Exists(ctx, keys.Actor(id)).Result()
	if err != nil {
		return false, fmt.Errorf("load actor %d: %w", id, err)
	}
	return n == 1, nil
}

// UpdateActor replaces an actor's pubkey and/or addresses (nil: unchanged).
func (s *Store) UpdateActor(ctx context.Context, id uint32, pubkey *string, address *[]string) (*model.Actor, error) {
	cur, err := s.LoadActor(ctx, id)
	if err != nil {
		return nil, err
	}
	// the fields given, and only those, are written (the others as read here may
	// have changed since: an operator's key rotation racing the actor's address change)
	var fields []string
	if pubkey != nil {
		cur.Pubkey, fields = *pubkey, append(fields, "pubkey", *pubkey)
	}
	if address != nil {
		cur.Address, fields = *address, append(fields, "address", model.EncodeField(*address))
	}
	if err := cur.Validate(); err != nil {
		return nil, err
	}
	n, err := (&updateActorArgs{ActorKey: keys.Actor(id), UpdatedAt: time.Now().Unix(), Fields: fields}).run(ctx, s.primary)
	if err != nil {
		return nil, fmt.Errorf("update actor %d: %w", id, err)
	}
	if n == 0 {
		return nil, notFound("actor %d", id)
	}
	return s.LoadActor(ctx, id)
}

// UseNonce records an actor's nonce for ttl; fresh=false when it was used before.
func (s *Store) UseNonce(ctx context.Context, actor uint32, nonce string, ttl time.Duration) (fresh bool, err error) {
	ok, err := s.G().SetNX(ctx, keys.Nonce(actor, nonce), 1, ttl).Result()
	if err != nil {
		return false, fmt.Errorf("record nonce: %w", err)
	}
	return ok, nil
}

// Operator secret sources.
const (
	SecretGenerated  = "generated"  // made at a first start with none configured
	SecretAPI        = "api"        // made by secret.create
	SecretConfigured = "configured" // from HERO_ADMIN_SECRET or a file; stored only once revoked
)

// SecretRecord is an operator secret as DB 0 keeps it (coord:operator_secrets): never
// the secret, only its verifier (an HMAC under the deployment's key).
type SecretRecord struct {
	Fingerprint string `json:"fingerprint"`
	Source      string `json:"source"`
	Verifier    string `json:"verifier,omitempty"`
	CreatedMs   int64  `json:"created_ms,omitempty"`
	RevokedMs   int64  `json:"revoked_ms,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// OperatorSecretKey returns the deployment's HMAC key for operator secrets kept in
// Redis, made at the first start (every replica then reads the same one): the way of
// a supervisor-daemon without --operator-secret-key-file, which keeps it in a file
// instead (OperatorSecretKeyRecord).
func (s *Store) OperatorSecretKey(ctx context.Context) ([]byte, error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return nil, err
	}
	if err := s.G().SetNX(ctx, keys.OperatorSecretKey, hex.EncodeToString(buf), 0).Err(); err != nil {
		return nil, fmt.Errorf("operator secret key: %w", err)
	}
	v, err := s.G().Get(ctx, keys.OperatorSecretKey).Result()
	if err != nil {
		return nil, fmt.Errorf("operator secret key: %w", err)
	}
	key, err := hex.DecodeString(v)
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("operator secret key: %s is not hex of at least 16 bytes", keys.OperatorSecretKey)
	}
	return key, nil
}

// OperatorSecretKeyRecord returns what coord:operator_secret_key holds ("" when
// nothing): the HMAC key itself (hex) where a deployment keeps it in Redis, or the
// mark of a key kept in a file (supervisor-daemon, operatorkey.go).
func (s *Store) OperatorSecretKeyRecord(ctx context.Context) (string, error) {
	v, err := s.G().Get(ctx, keys.OperatorSecretKey).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("operator secret key: %w", err)
	}
	return v, nil
}

// SetOperatorSecretKeyRecord replaces what coord:operator_secret_key holds.
func (s *Store) SetOperatorSecretKeyRecord(ctx context.Context, v string) error {
	if err := s.G().Set(ctx, keys.OperatorSecretKey, v, 0).Err(); err != nil {
		return fmt.Errorf("operator secret key: %w", err)
	}
	return nil
}

// OperatorSecretCount is the number of stored records (coord:operator_secrets).
func (s *Store) OperatorSecretCount(ctx context.Context) (int64, error) {
	n, err := s.G().HLen(ctx, keys.OperatorSecrets).Result()
	if err != nil {
		return 0, fmt.Errorf("count operator secrets: %w", err)
	}
	return n, nil
}

// OperatorSecret loads one record (nil when there is none).
func (s *Store) OperatorSecret(ctx context.Context, fingerprint string) (*SecretRecord, error) {
	v, err := s.G().HGet(ctx, keys.OperatorSecrets, fingerprint).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load operator secret: %w", err)
	}
	var r SecretRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return nil, fmt.Errorf("operator secret %s: %v", fingerprint, err)
	}
	return &r, nil
}

// OperatorSecrets loads every record.
func (s *Store) OperatorSecrets(ctx context.Context) ([]SecretRecord, error) {
	m, err := s.G().HGetAll(ctx, keys.OperatorSecrets).Result()
	if err != nil {
		return nil, fmt.Errorf("list operator secrets: %w", err)
	}
	out := make([]SecretRecord, 0, len(m))
	for fp, v := range m {
		var r SecretRecord
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, fmt.Errorf("operator secret %s: %v", fp, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// AddOperatorSecret stores a record unless its fingerprint has one (added=false).
func (s *Store) AddOperatorSecret(ctx context.Context, r SecretRecord) (added bool, err error) {
	b, _ := json.Marshal(r)
	added, err = s.G().HSetNX(ctx, keys.OperatorSecrets, r.Fingerprint, b).Result()
	if err != nil {
		return false, fmt.Errorf("store operator secret: %w", err)
	}
	return added, nil
}

// RevokeOperatorSecret revokes a secret by fingerprint. ifAbsent is the record stored
// when none exists (a configured secret); nil: only an existing record is revoked.
func (s *Store) RevokeOperatorSecret(ctx context.Context, fingerprint, reason string, ifAbsent *SecretRecord) (revoked bool, err error) {
	now := time.Now().UnixMilli()
	if ifAbsent == nil {
		r, err := s.OperatorSecret(ctx, fingerprint)
		if err != nil {
			return false, err
		}
		if r == nil {
			return false, notFound("operator secret %s", fingerprint)
		}
		ifAbsent = r
	}
	rec := *ifAbsent
	rec.RevokedMs, rec.Reason = now, reason
	b, _ := json.Marshal(rec)
	n, err := (&revokeSecretArgs{SecretsKey: keys.OperatorSecrets, Fingerprint: fingerprint, Record: b, RevokedMs: now, Reason: reason}).run(ctx, s.primary)
	if err != nil {
		return false, fmt.Errorf("revoke operator secret %s: %w", fingerprint, err)
	}
	return n == 1, nil
}

// RetireLegacySecrets deletes the unsalted secret hashes of earlier versions.
func (s *Store) RetireLegacySecrets(ctx context.Context) (int64, error) {
	n, err := s.G().SCard(ctx, keys.AdminSecrets).Result()
	if err != nil || n == 0 {
		return 0, err
	}
	return n, s.G().Del(ctx, keys.AdminSecrets).Err()
}
