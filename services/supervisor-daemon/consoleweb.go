package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

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
	return console.New(console.Options{Backend: b, Key: s.secrets.mac("hero console session key", ""), ReadOnly: cfg.ConsoleReadOnly,
		SessionTTL: cfg.ConsoleSessionTTL, Recheck: cfg.AuthSessionRecheck, Log: s.log.With().Str("part", "console").Logger()})
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
