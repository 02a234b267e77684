package main

import (
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// metricReason is the label of hero_api_auth_failures_total for a refusal's reason.
// The metric is on the admin port, which asks for no credentials: its labels must not
// undo the one answer the API gives to an unknown actor, an actor without a key and a
// signature that does not verify (one bad request per candidate id would tell which
// actors exist). Those are one label, not_verified; a revoked and an unknown operator
// secret are one, bad_secret. The log keeps the exact reason.
func metricReason(reason string) string {
	switch reason {
	case reasonUnknownActor, reasonNoKey, reasonBadSignature, reasonDevUnknown:
		return "not_verified"
	case reasonRevoked:
		return reasonBadSecret
	}
	return reason
}

// refusalInterval is the period over which one source's refused authentications are
// logged as one line of their own and one line with the count of the others.
const refusalInterval = 10 * time.Second

// maxRefusalSources bounds the sources counted at once; beyond it, refusals from new
// sources are counted together (as source "other").
const maxRefusalSources = 1024

// refusalLog logs refused authentications without letting a client flood the log:
// per source address, the first refusal of an interval is a line of its own (its
// reason, target, actor, peer); the others are counted by reason, and when the
// interval ends one line per source says how many there were. A source is the
// client's IP address (not its port: one client, many connections).
type refusalLog struct {
	log      zerolog.Logger
	interval time.Duration
	max      int

	mu      sync.Mutex
	sources map[string]*refused
	flushes *time.Timer // the pending end of the interval; nil: none
}

// refused counts a source's refusals after the first of an interval.
type refused struct {
	since   time.Time
	more    int
	reasons map[string]int
}

func newRefusalLog(log zerolog.Logger, interval time.Duration, max int) *refusalLog {
	return &refusalLog{log: log, interval: interval, max: max, sources: map[string]*refused{}}
}

// refusal records one refused authentication: a line of its own when it is its
// source's first of the interval (ev, which the caller filled), else a count.
func (l *refusalLog) refusal(peer, reason string, ev func(*zerolog.Event) *zerolog.Event) {
	src := sourceOf(peer)
	l.mu.Lock()
	r := l.sources[src]
	if r == nil && len(l.sources) >= l.max {
		src = "other"
		r = l.sources[src]
	}
	first := r == nil
	if first {
		l.sources[src] = &refused{since: time.Now(), reasons: map[string]int{}}
	} else {
		r.more++
		r.reasons[reason]++
	}
	if l.flushes == nil {
		l.flushes = time.AfterFunc(l.interval, l.flush)
	}
	l.mu.Unlock()
	if first {
		ev(l.log.Warn()).Str("reason", reason).Msg("authentication refused")
	}
}

// flush ends the interval: one line per source with refusals beyond its first, and
// every source starts afresh.
func (l *refusalLog) flush() {
	l.mu.Lock()
	sources := l.sources
	l.sources, l.flushes = map[string]*refused{}, nil
	l.mu.Unlock()
	for src, r := range sources {
		if r.more == 0 {
			continue
		}
		reasons := zerolog.Dict()
		for reason, n := range r.reasons {
			reasons = reasons.Int(reason, n)
		}
		l.log.Warn().Str("source", src).Int("refused", r.more).Dict("reasons", reasons).Time("since", r.since).
			Msg("authentication refused: more from this source (counted, not logged one by one)")
	}
}

// sourceOf is a peer address's host ("" stays "").
func sourceOf(peer string) string {
	if host, _, err := net.SplitHostPort(peer); err == nil {
		return host
	}
	return peer
}
