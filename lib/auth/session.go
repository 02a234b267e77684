package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Session authentication (docs/api.md, "Session signatures"): on a TLS connection a
// gRPC client signs, instead of each request, the connection itself — its TLS
// exporter value (RFC 5705/8446 keying material, as RFC 9266's tls-exporter channel
// binding) — and sends that signature with every call. The server verifies it once
// and remembers it for the connection; a copy of it is worthless on any other
// connection, whose exporter value differs, so it carries no nonce.

// SessionScheme is the first line of a session's canonical string.
const SessionScheme = "HERO-SESSION-ED25519-V1"

// ExporterLabel and ExporterLen name the TLS keying material a session signature
// covers: ExportKeyingMaterial(ExporterLabel, nil, ExporterLen).
const (
	ExporterLabel = "EXPORTER-hero-session-v1"
	ExporterLen   = 32
)

// MetadataSession is the gRPC metadata of a session signature (beside MetadataActor
// and MetadataTimestamp).
const MetadataSession = "hero-session"

// DefaultSessionRefresh is how long a client uses one session signature before it
// signs its connection again: well inside the smallest --auth-window (10 s), so that
// the server, which checks the timestamp each time it verifies, never finds it stale.
const DefaultSessionRefresh = 5 * time.Second

// sessionCacheSize bounds the signatures a client keeps (one per connection).
const sessionCacheSize = 64

// ErrNoExporter says that a connection offers no TLS exporter: TLS 1.2 without the
// Extended Master Secret extension, or renegotiation enabled.
var ErrNoExporter = errors.New("the TLS connection has no exporter (TLS 1.2 without Extended Master Secret); sign each request instead")

// Exporter returns a TLS connection's session binding: its keying material for
// ExporterLabel.
func Exporter(cs *tls.ConnectionState) ([]byte, error) {
	if cs == nil || !cs.HandshakeComplete {
		return nil, errors.New("the TLS handshake is not complete")
	}
	ekm, err := cs.ExportKeyingMaterial(ExporterLabel, nil, ExporterLen)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoExporter, err)
	}
	return ekm, nil
}

// SessionCanonical is the string a session signature covers: four lines joined by
// "\n" (no trailing newline) — SessionScheme, the actor id, the timestamp (unix
// seconds) and the lowercase hex of the connection's exporter value.
func SessionCanonical(actor uint32, timestamp int64, exporter []byte) string {
	return strings.Join([]string{
		SessionScheme,
		strconv.FormatUint(uint64(actor), 10),
		strconv.FormatInt(timestamp, 10),
		hex.EncodeToString(exporter),
	}, "\n")
}

// SessionCredentials are the three values of a session signature.
type SessionCredentials struct {
	Actor     string // decimal actor id
	Timestamp string // unix seconds, decimal
	Signature string // hex of the 64-byte Ed25519 signature (MetadataSession)
}

// SignSession signs a connection's exporter value.
func (s *Signer) SignSession(exporter []byte) (SessionCredentials, error) {
	if s == nil || len(s.Key) != ed25519.PrivateKeySize {
		return SessionCredentials{}, errors.New("sign: no actor key")
	}
	if len(exporter) != ExporterLen {
		return SessionCredentials{}, fmt.Errorf("sign session: the exporter value is %d bytes, not %d", len(exporter), ExporterLen)
	}
	ts := s.now().Unix()
	sig := ed25519.Sign(s.Key, []byte(SessionCanonical(s.Actor, ts, exporter)))
	return SessionCredentials{
		Actor:     strconv.FormatUint(uint64(s.Actor), 10),
		Timestamp: strconv.FormatInt(ts, 10),
		Signature: hex.EncodeToString(sig),
	}, nil
}

func (s *Signer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// ParsedSession is a session signature checked for shape.
type ParsedSession struct {
	Actor     uint32
	Timestamp int64
	Signature []byte
}

// ParseSession checks the shape of a session's credentials (not the signature), in
// their canonical forms as Parse does; its error names the metadata key that is wrong.
func ParseSession(c SessionCredentials) (ParsedSession, error) {
	var p ParsedSession
	id, ts, err := actorAndTime([][2]string{{MetadataActor, c.Actor}, {MetadataTimestamp, c.Timestamp}, {MetadataSession, c.Signature}})
	if err != nil {
		return p, err
	}
	sig, err := signatureHex(MetadataSession, c.Signature)
	if err != nil {
		return p, err
	}
	return ParsedSession{Actor: id, Timestamp: ts, Signature: sig}, nil
}

// Skew is how far the session's timestamp is from now (positive: in the future).
func (p ParsedSession) Skew(now time.Time) time.Duration {
	return time.Unix(p.Timestamp, 0).Sub(now.Truncate(time.Second))
}

// Verify checks the signature against pub for the connection's exporter value (nil
// pub: an actor with no valid key, which never verifies but takes as long).
func (p ParsedSession) Verify(pub ed25519.PublicKey, exporter []byte) bool {
	msg := []byte(SessionCanonical(p.Actor, p.Timestamp, exporter))
	if len(pub) != ed25519.PublicKeySize {
		_ = ed25519.Verify(decoyKey, msg, p.Signature)
		return false
	}
	return ed25519.Verify(pub, msg, p.Signature)
}

// SessionAuth is the gRPC per-call credential of session authentication: each call
// carries the signature of its connection's exporter value, made once per connection
// and again every Refresh. It needs TLS (RequireTransportSecurity).
type SessionAuth struct {
	signer  *Signer
	refresh time.Duration

	mu    sync.Mutex
	cache map[string]signedSession // exporter value → its signature
}

type signedSession struct {
	creds SessionCredentials
	at    time.Time
}

// NewSessionAuth returns session credentials signed by s, signed again after refresh
// (0: DefaultSessionRefresh).
func NewSessionAuth(s *Signer, refresh time.Duration) *SessionAuth {
	if refresh <= 0 {
		refresh = DefaultSessionRefresh
	}
	return &SessionAuth{signer: s, refresh: refresh, cache: map[string]signedSession{}}
}

// SessionDialOptions make a client connection use the TLS credentials tc and every
// call on it carry s's session signature. The credentials are wrapped
// (ExportingTLS) so that a connection's exporter value is derived once, not per call.
func SessionDialOptions(s *Signer, tc credentials.TransportCredentials) []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(ExportingTLS(tc)), grpc.WithPerRPCCredentials(NewSessionAuth(s, 0))}
}

// RequireTransportSecurity is true: a session is a TLS connection's.
func (a *SessionAuth) RequireTransportSecurity() bool { return true }

// GetRequestMetadata returns the call's metadata: the actor, the timestamp and the
// signature of the connection the call goes on.
func (a *SessionAuth) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	ri, ok := credentials.RequestInfoFromContext(ctx)
	if !ok {
		return nil, errors.New("session auth: no connection information for this call")
	}
	ekm, isTLS, err := ConnExporter(ri.AuthInfo)
	if !isTLS {
		return nil, errors.New("session auth: the connection is not TLS; sign each request instead")
	}
	if err != nil {
		return nil, fmt.Errorf("session auth: %w", err)
	}
	c, err := a.credentials(ekm)
	if err != nil {
		return nil, err
	}
	return map[string]string{MetadataActor: c.Actor, MetadataTimestamp: c.Timestamp, MetadataSession: c.Signature}, nil
}

// credentials returns the connection's signature, signing it when there is none or
// it is older than refresh. The cache holds at most sessionCacheSize connections.
func (a *SessionAuth) credentials(ekm []byte) (SessionCredentials, error) {
	now := a.signer.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.cache[string(ekm)]; ok && now.Sub(e.at) < a.refresh && !now.Before(e.at) {
		return e.creds, nil
	}
	c, err := a.signer.SignSession(ekm)
	if err != nil {
		return SessionCredentials{}, err
	}
	if len(a.cache) >= sessionCacheSize {
		for k, e := range a.cache {
			if now.Sub(e.at) >= a.refresh {
				delete(a.cache, k)
			}
		}
		for k := range a.cache {
			if len(a.cache) < sessionCacheSize {
				break
			}
			delete(a.cache, k)
		}
	}
	a.cache[string(ekm)] = signedSession{creds: c, at: now}
	return c, nil
}

// cached is how many connections' signatures are kept (tests).
func (a *SessionAuth) cached() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.cache)
}
