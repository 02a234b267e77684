package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/tick"
)

// Revocation reaches open streams (docs/security.md, Rotation). A stream (Watch,
// SubmitJobStream) is authenticated by its opening message and may stay open for
// hours; the changes that take rights away publish a notice on coord:authchanged in
// the step that makes them (an actor's update, a context's update or deletion, an
// operator secret's revocation), and every replica checks again, at once, the streams
// the notice concerns: their credentials as they were opened (against the actor's
// key and the secrets as they are now) and, for a stream that follows a context, the
// caller's role there. A stream that fails ends with the refusal's status; a
// SubmitJobStream answers what it was storing first. The notice also drops the actor's
// remembered session signatures, so that its next call on any connection is verified
// against its key as it is now.

// openStream is a stream open on this replica, with what it was opened with.
type openStream struct {
	p      Principal
	creds  credentials
	check  func(context.Context) error // the credentials' check when not reauth's (a console session)
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	ctxID  uint32 // the context it follows (bind); 0: none
	need   Role
	method string
}

// bound returns the context the stream follows, the role that takes and the method's
// name (ctxID 0: none).
func (s *openStream) bound() (ctxID uint32, need Role, method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctxID, s.need, s.method
}

type openStreamKey struct{}

// bindStream records that the stream of ctx follows context ctxID, which needs the
// role need: a change of the context's roles checks it again. Bind before the
// authorization reads the context, so that no change falls between the two.
func bindStream(ctx context.Context, ctxID uint32, need Role, method string) {
	s, _ := ctx.Value(openStreamKey{}).(*openStream)
	if s == nil {
		return
	}
	s.mu.Lock()
	s.ctxID, s.need, s.method = ctxID, need, method
	s.mu.Unlock()
}

// revokedError is why a stream was ended: its caller lost the rights it was opened
// with. It wraps the refusal (an *authError, a permission or not-found error) that
// the client is answered with.
type revokedError struct{ err error }

func (e *revokedError) Error() string { return e.err.Error() }
func (e *revokedError) Unwrap() error { return e.err }

// streamRevoked returns the refusal a stream's context was ended with, nil when it was
// not ended by a revocation (the client went away, the server stops).
func streamRevoked(ctx context.Context) error {
	if ctx.Err() == nil { // the common case, without Cause's walk of the context
		return nil
	}
	var r *revokedError
	if errors.As(context.Cause(ctx), &r) {
		return r
	}
	return nil
}

// msgStreamRevoked is the answer to a stream whose credentials no longer verify.
const msgStreamRevoked = "authentication failed: the credentials this stream was opened with are no longer valid (the actor's key changed, or the operator secret was revoked); open it again"

// openStreams are the streams open on this replica.
type openStreams struct {
	mu      sync.Mutex
	next    uint64
	streams map[uint64]*openStream
	// changes counts the notices handled: a stream whose authentication began before
	// one and that registered after it is checked again (it may have been missed).
	changes atomic.Uint64
	revoked prometheus.Counter
}

func newOpenStreams(revoked prometheus.Counter) *openStreams {
	return &openStreams{streams: map[uint64]*openStream{}, revoked: revoked}
}

// add registers a stream authenticated as p with c; its context is ended (with a
// revokedError) when a check fails. remove unregisters it.
func (o *openStreams) add(ctx context.Context, p Principal, c credentials) (sctx context.Context, s *openStream, remove func()) {
	return o.addChecked(ctx, p, c, nil)
}

// addChecked is add for a stream whose credentials check is check (nil: reauth of c).
func (o *openStreams) addChecked(ctx context.Context, p Principal, c credentials, check func(context.Context) error) (sctx context.Context, s *openStream, remove func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s = &openStream{p: p, creds: c, check: check, cancel: cancel}
	o.mu.Lock()
	o.next++
	id := o.next
	o.streams[id] = s
	o.mu.Unlock()
	return context.WithValue(ctx, openStreamKey{}, s), s, func() {
		o.mu.Lock()
		delete(o.streams, id)
		o.mu.Unlock()
		cancel(nil)
	}
}

// matching returns the open streams for which match holds.
func (o *openStreams) matching(match func(*openStream) bool) []*openStream {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*openStream
	for _, s := range o.streams {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// recheckTimeout bounds the checks one notice starts.
const recheckTimeout = 10 * time.Second

// authChanged handles a notice of coord:authchanged: "actor:<id>" (its key changed),
// "context:<id>" (its roles changed, or it was deleted) or "secret:<fingerprint>" (it
// was revoked). The streams it concerns are checked again; a malformed notice is
// logged and checks every stream.
func (a *authenticator) authChanged(payload string) {
	a.streams.changes.Add(1)
	kind, id, _ := strings.Cut(payload, ":")
	n, err := strconv.ParseUint(id, 10, 32)
	var match func(*openStream) bool
	switch {
	case kind == "actor" && err == nil:
		a.sessions.dropActor(uint32(n))
		match = func(s *openStream) bool { return s.p.Actor == uint32(n) }
	case kind == "context" && err == nil:
		match = func(s *openStream) bool { c, _, _ := s.bound(); return c == uint32(n) }
	case kind == "secret" && id != "":
		match = func(s *openStream) bool { return s.p.Operator && s.p.Fingerprint == id }
	default:
		a.log.Warn().Str("payload", payload).Msg("unreadable credential change notice: checking every open stream")
		a.sessions.dropAll()
		match = func(*openStream) bool { return true }
	}
	a.recheck(payload, a.streams.matching(match))
}

// authNoticesMissed handles a subscription to coord:authchanged made again: notices
// of the meantime are lost, so every remembered session is verified again at its next
// call and every open stream is checked now.
func (a *authenticator) authNoticesMissed() {
	a.streams.changes.Add(1)
	a.sessions.dropAll()
	a.recheck("subscription renewed", a.streams.matching(func(*openStream) bool { return true }))
}

// recheck checks the streams again, one after the other, in the background (a notice
// does not hold back the next), and ends those that fail.
func (a *authenticator) recheck(why string, streams []*openStream) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), recheckTimeout)
		defer cancel()
		ended := 0
		for _, s := range streams {
			if err := a.streamAllowed(ctx, s); err != nil {
				s.cancel(&revokedError{err})
				a.streams.revoked.Inc()
				ended++
				a.log.Info().Str("method", s.creds.target).Str("principal", s.p.Name()).Str("peer", s.creds.peer).Str("reason", err.Error()).
					Msg("stream ended: its caller's rights changed")
			}
		}
		if why != periodic || ended > 0 {
			a.log.Info().Str("change", why).Int("streams_checked", len(streams)).Int("streams_ended", ended).Msg("credential change applied")
		}
	}()
}

// periodic is the recheck of streamSweep.
const periodic = "periodic check"

// streamSweep checks every open stream again every interval until ctx ends: the
// safety net for a change that no notice tells (an actor's hash deleted in Redis by
// hand; there is no actor.delete), with the bound a session connection's calls have
// (--auth-session-recheck). It costs nothing without open streams.
func (a *authenticator) streamSweep(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, func() {
		if open := a.streams.matching(func(*openStream) bool { return true }); len(open) > 0 {
			a.recheck(periodic, open)
		}
	})
}

// streamAllowed checks a stream again as things are now: its credentials (reauth) and,
// when it follows a context, the caller's role there. A Redis fault fails the check
// too: the stream ends with it, and its client opens it again.
func (a *authenticator) streamAllowed(ctx context.Context, s *openStream) error {
	check := s.check
	if check == nil {
		check = func(ctx context.Context) error { return a.reauth(ctx, s.creds) }
	}
	if err := check(ctx); err != nil {
		return err
	}
	ctxID, need, method := s.bound()
	if ctxID == 0 {
		return nil
	}
	c, err := a.store.LoadContext(ctx, ctxID)
	if err != nil {
		return err
	}
	return checkRole(s.p, c, need, method)
}

// reauth checks again the credentials a stream was opened with, against the keys and
// secrets as they are now: an operator secret not revoked (and the actor it acts for
// still there), the actor's current key verifying the opening signature or the
// session signature. Neither the timestamp nor the nonce: they guard the opening,
// which passed.
func (a *authenticator) reauth(ctx context.Context, c credentials) error {
	switch {
	case c.authorization != "":
		_, _, err := a.operator(ctx, c)
		return err
	case c.session != "":
		s, err := auth.ParseSession(auth.SessionCredentials{Actor: c.signed.Actor, Timestamp: c.signed.Timestamp, Signature: c.session})
		if err != nil {
			return &authError{reasonMalformed, "authentication failed: " + err.Error()}
		}
		pub, reason, err := a.actorKey(ctx, s.Actor)
		if err != nil {
			return unavailable(err)
		}
		if !s.Verify(pub, c.binding.exporter) {
			return &authError{reason, msgStreamRevoked}
		}
		return nil
	case c.signed.Present():
		req, err := auth.Parse(c.signed)
		if err != nil {
			return &authError{reasonMalformed, "authentication failed: " + err.Error()}
		}
		pub, reason, err := a.actorKey(ctx, req.Actor)
		if err != nil {
			return unavailable(err)
		}
		if !req.Verify(pub, c.target, c.digest) {
			return &authError{reason, msgStreamRevoked}
		}
		return nil
	}
	_, _, err := a.check(ctx, c) // development mode: the actor must still exist
	return err
}
