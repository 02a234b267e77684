package main

import (
	"context"
	"crypto/ed25519"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Principal is who is asking: an actor that signed its request, an operator (holder
// of an operator secret), or an operator acting for an actor named beside the secret.
type Principal struct {
	Operator    bool
	Fingerprint string // the operator secret's fingerprint
	Actor       uint32 // 0 for an operator who named no actor
}

// Name is how events record the principal: "7", "operator:<fingerprint>", or
// "7 via operator:<fingerprint>" when an operator acts for actor 7.
func (p Principal) Name() string {
	op := store.ActorOperator + ":" + p.Fingerprint
	switch {
	case p.Operator && p.Actor != 0:
		return strconv.FormatUint(uint64(p.Actor), 10) + " via " + op
	case p.Operator:
		return op
	}
	return strconv.FormatUint(uint64(p.Actor), 10)
}

// key names the principal for per-caller limits.
func (p Principal) key() string {
	if p.Operator {
		return "operator:" + p.Fingerprint
	}
	return "actor:" + strconv.FormatUint(uint64(p.Actor), 10)
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

// Reasons an authentication fails: the label of hero_api_auth_failures_total and the
// "reason" of the log line. The client is told less (authError.Msg).
const (
	reasonMissing      = "missing_credentials"
	reasonMalformed    = "malformed"
	reasonStale        = "stale_timestamp"
	reasonReplayed     = "replayed_nonce"
	reasonUnknownActor = "unknown_actor"
	reasonNoKey        = "no_key"
	reasonBadSignature = "bad_signature"
	reasonBadSecret    = "bad_secret"
	reasonRevoked      = "revoked_secret"
	reasonDevUnknown   = "dev_unknown_actor"
)

// msgNotVerified is the one answer for an unknown actor, an actor without a valid
// key and a signature that does not verify: the client cannot tell them apart.
const msgNotVerified = "authentication failed: the signature does not verify for this actor and request (docs/api.md, Signed requests)"

// authError is a refused authentication: the client sees Msg, the log and the metric
// see Reason.
type authError struct {
	Reason string
	Msg    string
}

func (e *authError) Error() string { return e.Msg }

// credentials are what a transport hands to authenticate.
type credentials struct {
	transport     string // jsonrpc, grpc
	target        string // auth.JSONRPCTarget or the gRPC method
	digest        [32]byte
	authorization string
	signed        auth.Credentials
	peer          string // remote address, for the log
}

// authenticator checks credentials, the same way for both transports.
type authenticator struct {
	store   *store.Store
	secrets *operatorSecrets
	window  time.Duration // a signed request's timestamp may be this far from now
	devMode bool          // trust a bare X-Hero-Actor (development only)
	log     zerolog.Logger
	now     func() time.Time

	failures *prometheus.CounterVec
}

func newAuthenticator(st *store.Store, secrets *operatorSecrets, window time.Duration, devMode bool, reg prometheus.Registerer, log zerolog.Logger) *authenticator {
	f := promauto.With(reg)
	a := &authenticator{
		store: st, secrets: secrets, window: window, devMode: devMode, log: log, now: time.Now,
		failures: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_api_auth_failures_total",
			Help: "Refused authentications by transport (jsonrpc, grpc) and reason (missing_credentials, malformed, stale_timestamp, replayed_nonce, unknown_actor, no_key, bad_signature, bad_secret, revoked_secret, dev_unknown_actor)."},
			[]string{"transport", "reason"}),
	}
	dev := f.NewGauge(prometheus.GaugeOpts{Name: "hero_api_auth_dev_mode",
		Help: "1 when supervisor-daemon trusts a bare X-Hero-Actor header (--auth-dev-trust-actor-header): requests are not authenticated."})
	if devMode {
		dev.Set(1)
		log.Warn().Msg("DEVELOPMENT MODE: --auth-dev-trust-actor-header is on: a bare X-Hero-Actor header (gRPC hero-actor) is trusted without a signature; anyone who reaches the API can act as any actor. Never use it beyond one trusted machine.")
	}
	return a
}

// authenticate turns a request's credentials into a principal. Failures are logged
// with their reason and counted; the error for the client is an *authError.
func (a *authenticator) authenticate(ctx context.Context, c credentials) (Principal, error) {
	p, actor, err := a.check(ctx, c)
	if ae, ok := err.(*authError); ok {
		a.failures.WithLabelValues(c.transport, ae.Reason).Inc()
		ev := a.log.Warn().Str("transport", c.transport).Str("target", c.target).Str("reason", ae.Reason).Str("peer", c.peer)
		if actor != 0 {
			ev = ev.Uint32("actor", actor)
		}
		ev.Msg("authentication refused")
	}
	return p, err
}

func (a *authenticator) check(ctx context.Context, c credentials) (Principal, uint32, error) {
	if c.authorization != "" {
		return a.operator(ctx, c)
	}
	if c.signed.Present() {
		return a.signedActor(ctx, c)
	}
	if a.devMode && c.signed.Actor != "" {
		id, err := strconv.ParseUint(strings.TrimSpace(c.signed.Actor), 10, 32)
		if err != nil || id == 0 {
			return Principal{}, 0, &authError{reasonMalformed, "authentication failed: " + auth.HeaderActor + " is not an actor id (a number from 1)"}
		}
		ok, err := a.store.ActorExists(ctx, uint32(id))
		if err != nil {
			return Principal{}, 0, unavailable(err)
		}
		if !ok {
			return Principal{}, uint32(id), &authError{reasonDevUnknown, "authentication failed: no such actor (development mode)"}
		}
		return Principal{Actor: uint32(id)}, uint32(id), nil
	}
	return Principal{}, 0, &authError{reasonMissing, "authentication failed: the request is not signed: send " + auth.HeaderActor + ", " + auth.HeaderTimestamp + ", " +
		auth.HeaderNonce + " and " + auth.HeaderSignature + " (gRPC metadata hero-actor, hero-timestamp, hero-nonce, hero-signature; docs/api.md), or an operator secret"}
}

// operator checks an operator secret; an actor named beside it is acted for.
func (a *authenticator) operator(ctx context.Context, c credentials) (Principal, uint32, error) {
	secret, ok := strings.CutPrefix(c.authorization, "Bearer ")
	if !ok || secret == "" {
		return Principal{}, 0, &authError{reasonMalformed, "authentication failed: authorization must be \"Bearer <operator secret>\""}
	}
	fp, reason, err := a.secrets.check(ctx, secret)
	if err != nil {
		return Principal{}, 0, unavailable(err)
	}
	if reason != "" {
		return Principal{}, 0, &authError{reason, "authentication failed: the operator secret is not valid"}
	}
	p := Principal{Operator: true, Fingerprint: fp}
	if c.signed.Actor != "" {
		id, err := strconv.ParseUint(strings.TrimSpace(c.signed.Actor), 10, 32)
		if err != nil || id == 0 {
			return Principal{}, 0, &authError{reasonMalformed, "authentication failed: " + auth.HeaderActor + " is not an actor id (a number from 1)"}
		}
		exists, err := a.store.ActorExists(ctx, uint32(id))
		if err != nil {
			return Principal{}, 0, unavailable(err)
		}
		if !exists {
			// The operator may know which actors exist: say it plainly.
			return Principal{}, 0, permissionDenied("actor %d does not exist", id)
		}
		p.Actor = uint32(id)
	}
	return p, p.Actor, nil
}

// signedActor checks a signed request: shape, timestamp window, signature against
// the actor's stored key, then the nonce (recorded only for a verified request, so
// that nobody without the key can fill the nonce store).
func (a *authenticator) signedActor(ctx context.Context, c credentials) (Principal, uint32, error) {
	req, err := auth.Parse(c.signed)
	if err != nil {
		return Principal{}, 0, &authError{reasonMalformed, "authentication failed: " + err.Error()}
	}
	if skew := req.Skew(a.now()); skew > a.window || skew < -a.window {
		return Principal{}, req.Actor, &authError{reasonStale, "authentication failed: the timestamp is " + skew.Round(time.Second).String() +
			" from the server's clock, outside the accepted window of ±" + a.window.String() + " (check the client's clock)"}
	}
	pubHex, exists, err := a.store.ActorKey(ctx, req.Actor)
	if err != nil {
		return Principal{}, req.Actor, unavailable(err)
	}
	var pub ed25519.PublicKey
	reason := reasonUnknownActor
	if exists {
		reason = reasonNoKey
		if k, err := auth.ParsePublicKeyHex(pubHex); err == nil {
			pub, reason = k, reasonBadSignature
		}
	}
	if !req.Verify(pub, c.target, c.digest) {
		return Principal{}, req.Actor, &authError{reason, msgNotVerified}
	}
	fresh, err := a.store.UseNonce(ctx, req.Actor, req.Nonce, 2*a.window+time.Minute)
	if err != nil {
		return Principal{}, req.Actor, unavailable(err)
	}
	if !fresh {
		return Principal{}, req.Actor, &authError{reasonReplayed, "authentication failed: this nonce was used already (a replayed request); sign each request with a new nonce"}
	}
	return Principal{Actor: req.Actor}, req.Actor, nil
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
