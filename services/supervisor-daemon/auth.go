package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Principal is who is asking: an operator (holder of an admin secret) or an actor.
type Principal struct {
	Operator bool
	Actor    uint32 // 0 for an operator who named no actor
}

// Name is how events record the principal.
func (p Principal) Name() string {
	if p.Actor != 0 {
		return strconv.FormatUint(uint64(p.Actor), 10)
	}
	return store.ActorOperator
}

// Role is what an actor may do in a context: each role includes the ones below it.
type Role int

const (
	RoleNone Role = iota
	RoleReader
	RoleExecutor
	RoleAdmin
)

func (r Role) String() string {
	return [...]string{"none", "reader", "executor", "admin"}[r]
}

// authenticator checks credentials: one place, so that a later signature check fits.
type authenticator struct {
	store  *store.Store
	hashes [][]byte // sha256 of the accepted operator secrets
}

// newAuthenticator loads the operator secrets: the configured ones, and the one
// generated at first start (kept hashed in DB 0). With neither, it generates one and
// logs it once.
func newAuthenticator(ctx context.Context, st *store.Store, configured []string, log zerolog.Logger) (*authenticator, error) {
	a := &authenticator{store: st}
	for _, s := range configured {
		h := sha256.Sum256([]byte(s))
		a.hashes = append(a.hashes, h[:])
	}
	stored, err := st.G().SMembers(ctx, keys.AdminSecrets).Result()
	if err != nil {
		return nil, fmt.Errorf("read operator secrets: %w", err)
	}
	if len(configured) == 0 && len(stored) == 0 {
		buf := make([]byte, 24)
		if _, err := rand.Read(buf); err != nil {
			return nil, err
		}
		secret := "hero_" + hex.EncodeToString(buf)
		h := sha256.Sum256([]byte(secret))
		added, err := st.G().Eval(ctx, `if redis.call('SCARD', KEYS[1]) == 0 then return redis.call('SADD', KEYS[1], ARGV[1]) end return 0`,
			[]string{keys.AdminSecrets}, hex.EncodeToString(h[:])).Int()
		if err != nil {
			return nil, fmt.Errorf("store operator secret: %w", err)
		}
		if added == 1 {
			log.Warn().Str("admin_secret", secret).Msg("generated an operator secret (HERO_ADMIN_SECRET was not set); it is shown only this once: keep it")
		}
		stored, _ = st.G().SMembers(ctx, keys.AdminSecrets).Result()
	}
	for _, s := range stored {
		if h, err := hex.DecodeString(s); err == nil {
			a.hashes = append(a.hashes, h)
		}
	}
	return a, nil
}

// authenticate turns the request's credentials into a principal: a bearer secret
// (Authorization: Bearer <secret>) and/or an actor id (X-Hero-Actor).
func (a *authenticator) authenticate(ctx context.Context, authorization, actor string) (Principal, error) {
	var p Principal
	if authorization != "" {
		secret, ok := strings.CutPrefix(authorization, "Bearer ")
		if !ok {
			return p, permissionDenied("authorization must be \"Bearer <operator secret>\"")
		}
		if !a.validSecret(secret) {
			return p, permissionDenied("the operator secret is not valid")
		}
		p.Operator = true
	}
	if actor != "" {
		id, err := strconv.ParseUint(strings.TrimSpace(actor), 10, 32)
		if err != nil || id == 0 {
			return p, permissionDenied("actor %q is not an actor id", actor)
		}
		if _, err := a.store.LoadActor(ctx, uint32(id)); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return p, permissionDenied("actor %d does not exist", id)
			}
			return p, err
		}
		p.Actor = uint32(id)
	}
	if !p.Operator && p.Actor == 0 {
		return p, permissionDenied("no credentials: send the X-Hero-Actor header (gRPC metadata hero-actor) or an operator secret")
	}
	return p, nil
}

func (a *authenticator) validSecret(secret string) bool {
	h := sha256.Sum256([]byte(secret))
	ok := false
	for _, want := range a.hashes {
		if subtle.ConstantTimeCompare(h[:], want) == 1 {
			ok = true
		}
	}
	return ok
}

// role returns the principal's role in a context.
func role(p Principal, c *model.Context) Role {
	if p.Operator {
		return RoleAdmin
	}
	has := func(ids []uint32) bool {
		for _, id := range ids {
			if id == p.Actor {
				return true
			}
		}
		return false
	}
	switch {
	case has(c.Admins):
		return RoleAdmin
	case has(c.Executors):
		return RoleExecutor
	case has(c.Readers):
		return RoleReader
	}
	return RoleNone
}
