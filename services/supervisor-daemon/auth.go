package main

import (
	"context"
	"crypto/ed25519"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// (Name is called for each submission: the operator's part is made only for an
// operator.)
func (p Principal) Name() string {
	switch {
	case p.Operator && p.Actor != 0:
		return strconv.FormatUint(uint64(p.Actor), 10) + " via " + store.ActorOperator + ":" + p.Fingerprint
	case p.Operator:
		return store.ActorOperator + ":" + p.Fingerprint
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

// Reasons an authentication fails: the "reason" of the log line. The client is told
// less (authError.Msg), and so is hero_api_auth_failures_total (metricReason).
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
	reasonSessionNoTLS = "session_without_tls"
	reasonSessionNoEKM = "session_without_exporter"
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
	session       string      // a session signature (gRPC hero-session): signed.Actor and signed.Timestamp go with it
	binding       connBinding // the connection a session signature must be bound to
	peer          string      // remote address, for the log
}

// connBinding is a call's connection as a session signature covers it.
type connBinding struct {
	tls      bool   // the call came over TLS
	exporter []byte // the connection's exporter value (auth.Exporter)
	err      error  // why the TLS connection has no exporter value
}

// authenticator checks credentials, the same way for both transports.
type authenticator struct {
	store   *store.Store
	secrets *operatorSecrets
	window  time.Duration // a signed request's timestamp may be this far from now
	devMode bool          // trust a bare X-Hero-Actor (development only)
	log     zerolog.Logger
	now     func() time.Time

	// sessions remembers the session signatures verified per connection; one is
	// verified again (timestamp, the actor's current key) after --auth-session-recheck,
	// or at once after a notice that the actor changed (revoke.go).
	sessions *sessionCache
	// streams are the streams open on this replica, checked again on a notice of a
	// credential change (revoke.go).
	streams *openStreams

	failures *prometheus.CounterVec
	refusals *refusalLog // the log of refusals, counted per source past the first
	// hero_api_auth_session_checks_total's two series, resolved once: looking a
	// series up by its label value was 2.5% of supervisor-daemon's CPU per call.
	sessionCached, sessionVerified prometheus.Counter
}

func newAuthenticator(st *store.Store, secrets *operatorSecrets, window, recheck time.Duration, devMode bool, reg prometheus.Registerer, log zerolog.Logger) *authenticator {
	f := promauto.With(reg)
	a := &authenticator{
		store: st, secrets: secrets, window: window, devMode: devMode, log: log, now: time.Now,
		sessions: newSessionCache(maxSessions, recheck),
		streams: newOpenStreams(f.NewCounter(prometheus.CounterOpts{Name: "hero_api_streams_revoked_total",
			Help: "Open streams (Watch, SubmitJobStream) ended because their caller's rights changed: a changed key, a role removed, a context deleted, an operator secret revoked."})),
		failures: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_api_auth_failures_total",
			Help: "Refused authentications by transport (jsonrpc, grpc) and reason (missing_credentials, malformed, stale_timestamp, replayed_nonce, not_verified, bad_secret, session_without_tls, session_without_exporter); not_verified is an unknown actor, an actor without a key and a bad signature alike, as the API answers them (the log tells them apart)."},
			[]string{"transport", "reason"}),
		refusals: newRefusalLog(log, refusalInterval, maxRefusalSources),
	}
	sessionChecks := f.NewCounterVec(prometheus.CounterOpts{Name: "hero_api_auth_session_checks_total",
		Help: "Calls authenticated by a session signature (gRPC hero-session), by outcome: verified (the signature checked against the actor's key) or cached (the same signature verified on the same connection less than --auth-session-recheck ago)."},
		[]string{"outcome"})
	a.sessionCached, a.sessionVerified = sessionChecks.WithLabelValues("cached"), sessionChecks.WithLabelValues("verified")
	dev := f.NewGauge(prometheus.GaugeOpts{Name: "hero_api_auth_dev_mode",
		Help: "1 when supervisor-daemon trusts a bare X-Hero-Actor header (--auth-dev-trust-actor-header): requests are not authenticated."})
	if devMode {
		dev.Set(1)
		log.Warn().Msg("DEVELOPMENT MODE: --auth-dev-trust-actor-header is on: a bare X-Hero-Actor header (gRPC hero-actor) is trusted without a signature; anyone who reaches the API can act as any actor. Never use it beyond one trusted machine.")
	}
	return a
}

// authenticate turns a request's credentials into a principal. Failures are counted
// (metricReason) and logged with their reason (refusalLog: a source's first of an
// interval on a line of its own, the others counted); the error for the client is an
// *authError.
func (a *authenticator) authenticate(ctx context.Context, c credentials) (Principal, error) {
	p, actor, err := a.check(ctx, c)
	if ae, ok := err.(*authError); ok {
		a.failures.WithLabelValues(c.transport, metricReason(ae.Reason)).Inc()
		a.refusals.refusal(c.peer, ae.Reason, func(ev *zerolog.Event) *zerolog.Event {
			ev = ev.Str("transport", c.transport).Str("target", c.target).Str("peer", c.peer)
			if actor != 0 {
				ev = ev.Uint32("actor", actor)
			}
			return ev
		})
	}
	return p, err
}

func (a *authenticator) check(ctx context.Context, c credentials) (Principal, uint32, error) {
	if c.authorization != "" {
		return a.operator(ctx, c)
	}
	if c.session != "" {
		return a.sessionActor(ctx, c)
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
		auth.HeaderNonce + " and " + auth.HeaderSignature + " (gRPC metadata hero-actor, hero-timestamp, hero-nonce, hero-signature, or over TLS a session: hero-actor, hero-timestamp, hero-session; docs/api.md), or an operator secret"}
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
	pub, reason, err := a.actorKey(ctx, req.Actor)
	if err != nil {
		return Principal{}, req.Actor, unavailable(err)
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

// actorKey is an actor's public key, nil with the reason its signature would fail
// (unknown_actor, no_key); with a key the reason is bad_signature.
func (a *authenticator) actorKey(ctx context.Context, actor uint32) (ed25519.PublicKey, string, error) {
	pubHex, exists, err := a.store.ActorKey(ctx, actor)
	if err != nil {
		return nil, "", err
	}
	if !exists {
		return nil, reasonUnknownActor, nil
	}
	k, err := auth.ParsePublicKeyHex(pubHex)
	if err != nil {
		return nil, reasonNoKey, nil
	}
	return k, reasonBadSignature, nil
}

// sessionActor checks a session signature (gRPC hero-session): it covers the TLS
// exporter value of the connection the call came on, so it is worthless on any other
// connection and carries no nonce. A signature verified on this connection less than
// recheck ago is taken without Redis or a verification; otherwise the timestamp
// window and the signature against the actor's current key are checked, which makes
// a changed key or a removed actor take effect within recheck.
func (a *authenticator) sessionActor(ctx context.Context, c credentials) (Principal, uint32, error) {
	if c.signed.Nonce != "" || c.signed.Signature != "" {
		return Principal{}, 0, &authError{reasonMalformed, "authentication failed: send either a session signature (" + auth.MetadataSession + ") or a signed request (" +
			auth.MetadataNonce + ", " + auth.MetadataSignature + "), not both"}
	}
	if !c.binding.tls {
		return Principal{}, 0, &authError{reasonSessionNoTLS, "authentication failed: a session signature (" + auth.MetadataSession + ") authenticates a TLS connection and this one is not TLS: sign each request instead (" +
			auth.MetadataNonce + ", " + auth.MetadataSignature + "; docs/api.md, Signed requests)"}
	}
	if c.binding.err != nil || len(c.binding.exporter) != auth.ExporterLen {
		return Principal{}, 0, &authError{reasonSessionNoEKM, "authentication failed: this TLS connection offers no exporter value for a session signature (" + auth.MetadataSession +
			"; TLS 1.2 without Extended Master Secret): use TLS 1.3, or sign each request instead (" + auth.MetadataNonce + ", " + auth.MetadataSignature + "; docs/api.md, Signed requests)"}
	}
	s, err := auth.ParseSession(auth.SessionCredentials{Actor: c.signed.Actor, Timestamp: c.signed.Timestamp, Signature: c.session})
	if err != nil {
		return Principal{}, 0, &authError{reasonMalformed, "authentication failed: " + err.Error()}
	}
	now := a.now()
	epoch := a.sessions.epoch.Load() // a drop from now on keeps this verification out of the cache
	if a.sessions.fresh(c.binding.exporter, s.Actor, c.session, now) {
		a.sessionCached.Inc()
		return Principal{Actor: s.Actor}, s.Actor, nil
	}
	if skew := s.Skew(now); skew > a.window || skew < -a.window {
		return Principal{}, s.Actor, &authError{reasonStale, "authentication failed: the session's timestamp is " + skew.Round(time.Second).String() +
			" from the server's clock, outside the accepted window of ±" + a.window.String() + " (check the client's clock; a client signs its session again every few seconds)"}
	}
	pub, reason, err := a.actorKey(ctx, s.Actor)
	if err != nil {
		return Principal{}, s.Actor, unavailable(err)
	}
	if !s.Verify(pub, c.binding.exporter) {
		a.sessions.drop(c.binding.exporter)
		return Principal{}, s.Actor, &authError{reason, msgNotVerified}
	}
	a.sessions.put(c.binding.exporter, s.Actor, c.session, now, epoch)
	a.sessionVerified.Inc()
	return Principal{Actor: s.Actor}, s.Actor, nil
}

// maxSessions bounds the connections whose session signature is remembered: past it,
// expired entries go first, then any (that connection's next call verifies again).
const maxSessions = 16384

// sessionCache maps a connection's exporter value to the session signature verified
// on it, and when.
type sessionCache struct {
	mu      sync.Mutex
	max     int
	recheck time.Duration
	entries map[[auth.ExporterLen]byte]sessionEntry
	// epoch counts the drops of an actor's or every entry: a verification that began
	// before one (it may have read a key since replaced) is not kept.
	epoch atomic.Uint64
}

type sessionEntry struct {
	actor     uint32
	signature string
	at        time.Time
}

func newSessionCache(max int, recheck time.Duration) *sessionCache {
	return &sessionCache{max: max, recheck: recheck, entries: map[[auth.ExporterLen]byte]sessionEntry{}}
}

// fresh reports whether this signature of this actor was verified on this connection
// less than recheck before now.
func (c *sessionCache) fresh(ekm []byte, actor uint32, signature string, now time.Time) bool {
	k := [auth.ExporterLen]byte(ekm)
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	return ok && e.actor == actor && e.signature == signature && !now.Before(e.at) && now.Sub(e.at) < c.recheck
}

// put remembers a verification that began at epoch (unless an entry was dropped since).
func (c *sessionCache) put(ekm []byte, actor uint32, signature string, now time.Time, epoch uint64) {
	k := [auth.ExporterLen]byte(ekm)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch.Load() != epoch {
		return
	}
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.max {
		c.evict(now)
	}
	c.entries[k] = sessionEntry{actor: actor, signature: signature, at: now}
}

// evict makes room: the entries due for a new check (their connections have signed
// again, or gone), then any until one place is free.
func (c *sessionCache) evict(now time.Time) {
	for k, e := range c.entries {
		if now.Sub(e.at) >= c.recheck {
			delete(c.entries, k)
		}
	}
	for k := range c.entries {
		if len(c.entries) < c.max {
			return
		}
		delete(c.entries, k)
	}
}

func (c *sessionCache) drop(ekm []byte) {
	k := [auth.ExporterLen]byte(ekm)
	c.mu.Lock()
	delete(c.entries, k)
	c.mu.Unlock()
}

// dropActor forgets every session of an actor (its key changed): each is verified
// again at its connection's next call.
func (c *sessionCache) dropActor(actor uint32) {
	c.mu.Lock()
	c.epoch.Add(1)
	for k, e := range c.entries {
		if e.actor == actor {
			delete(c.entries, k)
		}
	}
	c.mu.Unlock()
}

// dropAll forgets every session (credential changes may have been missed).
func (c *sessionCache) dropAll() {
	c.mu.Lock()
	c.epoch.Add(1)
	clear(c.entries)
	c.mu.Unlock()
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
