package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/services/supervisor-daemon/console"
)

// The web console (console/, docs/console.md) on the JSON-RPC port under /ui/: its
// reads and actions are calls of the same method table as JSON-RPC's, as the
// session's actor or operator, under the same per-caller rate limit.

// maxConsoleContexts bounds the contexts the console lists for one identity.
const maxConsoleContexts = 1000

type consoleBackend struct {
	s       *service
	a       *authenticator
	limits  *callerLimits
	methods map[string]method
}

func newConsole(s *service, a *authenticator, l *callerLimits, methods map[string]method, cfg *Config) (*console.Console, error) {
	b := &consoleBackend{s: s, a: a, limits: l, methods: methods}
	return console.New(console.Options{Backend: b, Key: s.consoleKey(), ReadOnly: cfg.ConsoleReadOnly,
		SessionTTL: cfg.ConsoleSessionTTL, Log: s.log.With().Str("part", "console").Logger()})
}

// consoleKey is the console's sessions' and links' MAC key: the same on every
// replica (derived from the operator secrets' HMAC key).
func (s *service) consoleKey() []byte { return s.secrets.mac("hero console session key", "") }

type consoleLinkResult struct {
	Token       string `json:"token"`
	Path        string `json:"path"` // the console's page with the token, from the API's origin
	ExpiresAtMs int64  `json:"expires_at_ms"`
}

// consoleLink makes a one-time sign-in link of the web console for the caller, as it
// signed the request (heroctl console login): an actor's session names its current
// key, an operator's its secret.
func (s *service) consoleLink(ctx context.Context, p Principal, _ struct{}) (*consoleLinkResult, error) {
	id := console.Identity{Operator: p.Operator, Fingerprint: p.Fingerprint, Actor: p.Actor}
	var pub ed25519.PublicKey
	if !p.Operator {
		pubHex, exists, err := s.store.ActorKey(ctx, p.Actor)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, &apiError{Code: codeNotFound, Msg: fmt.Sprintf("actor %d not found", p.Actor)}
		}
		if pub, err = auth.ParsePublicKeyHex(pubHex); err != nil {
			return nil, invalidParams("actor", "actor %d has no valid public key to sign in with", p.Actor)
		}
	}
	tok, exp, err := console.NewLink(s.consoleKey(), id, pub, time.Now())
	if err != nil {
		return nil, err
	}
	return &consoleLinkResult{Token: tok, Path: console.Prefix + "#/link/" + tok, ExpiresAtMs: exp.UnixMilli()}, nil
}

func principalOf(id console.Identity) Principal {
	return Principal{Operator: id.Operator, Fingerprint: id.Fingerprint, Actor: id.Actor}
}

func (b *consoleBackend) Call(ctx context.Context, id console.Identity, name string, params any) (json.RawMessage, error) {
	start := time.Now()
	m, ok := b.methods[name]
	if !ok {
		return nil, &console.APIError{Code: codeMethodNotFound, Message: "no method " + name}
	}
	p := principalOf(id)
	raw, isRaw := params.(json.RawMessage)
	if !isRaw {
		var err error
		if raw, err = json.Marshal(params); err != nil {
			return nil, err
		}
	}
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	if err := b.limits.allow(p.key(), 1); err != nil {
		return nil, b.refused(name, start, err)
	}
	out, err := m.call(ctx, p, raw)
	if err != nil {
		return nil, b.refused(name, start, err)
	}
	b.s.metrics.observe("console", name, codes.OK.String(), start)
	return json.Marshal(out)
}

func (b *consoleBackend) refused(name string, start time.Time, err error) error {
	ae := toAPIError(err)
	if ae.Code == codeInternal {
		b.s.log.Error().Err(err).Str("method", name).Msg("console call failed")
	}
	b.s.metrics.observe("console", name, grpcCode(ae.Code).String(), start)
	return &console.APIError{Code: ae.Code, Message: ae.Msg}
}

func (b *consoleBackend) ActorKey(ctx context.Context, actor uint32) (ed25519.PublicKey, error) {
	pub, _, err := b.a.actorKey(ctx, actor)
	return pub, err
}

func (b *consoleBackend) CheckSecret(ctx context.Context, secret string) (string, bool, error) {
	fp, reason, err := b.s.secrets.check(ctx, secret)
	return fp, err == nil && reason == "", err
}

func (b *consoleBackend) SecretValid(ctx context.Context, fp string) (bool, error) {
	rec, err := b.s.store.OperatorSecret(ctx, fp)
	if err != nil {
		return false, err
	}
	_, configured := b.s.secrets.configured[fp]
	known := configured || (rec != nil && rec.Verifier != "")
	return known && (rec == nil || rec.RevokedMs == 0), nil
}

func (b *consoleBackend) UseNonce(ctx context.Context, actor uint32, nonce string, ttl time.Duration) (bool, error) {
	return b.s.store.UseNonce(ctx, actor, nonce, ttl)
}

func (b *consoleBackend) Contexts(ctx context.Context, id console.Identity) ([]console.ContextRole, error) {
	ids, err := b.s.store.ContextIDs(ctx)
	if err != nil {
		return nil, err
	}
	p := principalOf(id)
	var out []console.ContextRole
	for _, cid := range ids {
		if len(out) == maxConsoleContexts {
			break
		}
		c, err := b.s.store.LoadContext(ctx, cid)
		if err != nil {
			continue // deleted meanwhile
		}
		if r := role(p, c); r >= RoleReader {
			out = append(out, console.ContextRole{ID: cid, Role: r.String()})
		}
	}
	return out, nil
}

func (b *consoleBackend) Follow(ctx context.Context, id console.Identity, ctxID uint32, after string, send func([]console.Event) error) error {
	_, db, err := b.s.authorize(ctx, principalOf(id), ctxID, RoleReader, "events.read")
	if err != nil {
		return err
	}
	if after == "" {
		if after, err = db.LastEventID(ctx); err != nil {
			return err
		}
	} else if err := db.CheckEventPosition(ctx, after); err != nil {
		return err
	}
	batches := make(chan eventBatch)
	go followEvents(ctx, db, after, batches)
	for {
		var bt eventBatch
		select {
		case <-ctx.Done():
			return nil
		case bt = <-batches:
		}
		if bt.err != nil {
			return bt.err
		}
		evs := make([]console.Event, len(bt.events))
		for i := range bt.events {
			e := bt.events[i]
			evs[i] = console.Event{ID: e.ID, FlowID: e.FlowID, JobID: e.JobID, Data: e}
		}
		if err := send(evs); err != nil {
			return err
		}
	}
}

// Guard registers a console stream among the open streams (revoke.go): a notice of
// coord:authchanged about its actor, secret or context checks it again at once. The
// check right after registering covers a change between the session's check at the
// request's start and the registration.
func (b *consoleBackend) Guard(ctx context.Context, id console.Identity, ctxID uint32, method, peer string, check func(context.Context) error) (context.Context, func()) {
	sctx, st, remove := b.a.streams.addChecked(ctx, principalOf(id), credentials{target: "console " + method, peer: peer}, check)
	if ctxID != 0 {
		bindStream(sctx, ctxID, RoleReader, method)
	}
	if err := b.a.streamAllowed(sctx, st); err != nil {
		st.cancel(&revokedError{err})
	}
	return sctx, remove
}

func (b *consoleBackend) MarkLog(ctx context.Context, id console.Identity, ctxID, callerID, jobID uint32, ttl time.Duration) error {
	_, db, err := b.s.authorize(ctx, principalOf(id), ctxID, RoleReader, "job.logs")
	if err != nil {
		return b.refused("job.logs", time.Now(), err)
	}
	return db.WatchLog(ctx, callerID, jobID, ttl)
}

func (b *consoleBackend) LogAppends(ctxID, callerID, jobID uint32) (<-chan struct{}, func()) {
	k := jobKey(model.JobRef{ContextID: ctxID, CallerID: callerID, ID: jobID})
	wt := b.s.logs.watch(k)
	return wt.C, func() { b.s.logs.unwatch(k, wt) }
}

func (b *consoleBackend) Queues(ctx context.Context, id console.Identity, ctxID uint32) ([]console.QueueDepth, int64, error) {
	start := time.Now()
	_, db, err := b.s.authorize(ctx, principalOf(id), ctxID, RoleReader, "the queues page")
	if err != nil {
		return nil, 0, b.refused("console.queues", start, err)
	}
	st, err := db.CheckBusy(ctx, false)
	if err != nil {
		return nil, 0, err
	}
	depth := map[string]int64{keys.MsgOut: 0, keys.MsgIn: 0}
	for _, t := range model.ScriptTypes() {
		depth[keys.Queue(string(t))] = 0
	}
	maps.Copy(depth, st.Lists) // and the pinned and executor queues that have items
	out := make([]console.QueueDepth, 0, len(depth))
	for q, n := range depth {
		out = append(out, console.QueueDepth{Queue: q, Depth: n})
	}
	return out, st.Leases, nil
}

func (b *consoleBackend) EventsSince(ctx context.Context, id console.Identity, ctxID uint32, since time.Time, max int) ([]console.StatEvent, error) {
	start := time.Now()
	_, db, err := b.s.authorize(ctx, principalOf(id), ctxID, RoleReader, "events.read")
	if err != nil {
		return nil, b.refused("events.read", start, err)
	}
	evs, err := db.NewestEvents(ctx, since, int64(max))
	if err != nil {
		return nil, err
	}
	out := make([]console.StatEvent, len(evs))
	for i, e := range evs {
		out[i] = console.StatEvent{TimeMs: e.TimeMs, Type: e.Type, CallerID: e.CallerID, JobID: e.JobID}
	}
	return out, nil
}

func (b *consoleBackend) Has(method string) bool {
	_, ok := b.methods[method]
	return ok
}

// withConsole serves /ui/ by the console and the rest by next.
func withConsole(next http.Handler, c *console.Console) http.Handler {
	if c == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, console.Prefix) {
			c.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
