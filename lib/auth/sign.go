// Package auth is the signed-request scheme of the public API (docs/api.md, "Signed
// requests"; docs/security.md): actor keys (Ed25519, PKCS#8 PEM files), the canonical
// string a request's signature covers, signing for clients (heroctl, the SDKs, the
// tests) and the checks the server makes; and session signatures, which sign a gRPC
// client's TLS connection once instead of each call (session.go). It holds no state: the nonces and the
// actors' keys live in Redis, behind supervisor-daemon.
package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scheme is the first line of every canonical string: a version, so that a later
// scheme can never be confused with this one.
const Scheme = "HERO-ED25519-V1"

// JSONRPCTarget is the target of every JSON-RPC request: the HTTP method and path
// (the JSON-RPC method names are inside the signed body).
const JSONRPCTarget = "POST /"

// The credentials of a signed request: HTTP headers (JSON-RPC) and gRPC metadata.
const (
	HeaderActor     = "X-Hero-Actor"
	HeaderTimestamp = "X-Hero-Timestamp"
	HeaderNonce     = "X-Hero-Nonce"
	HeaderSignature = "X-Hero-Signature"

	MetadataActor     = "hero-actor"
	MetadataTimestamp = "hero-timestamp"
	MetadataNonce     = "hero-nonce"
	MetadataSignature = "hero-signature"
)

// Nonce limits: 16 to 64 characters of [A-Za-z0-9_-] (hex and base64url fit).
const (
	MinNonceLen = 16
	MaxNonceLen = 64
)

// Credentials are the four values a signed request carries.
type Credentials struct {
	Actor     string // decimal actor id
	Timestamp string // unix time in seconds, decimal
	Nonce     string
	Signature string // hex of the 64-byte Ed25519 signature
}

// Present reports whether any signing credential was sent.
func (c Credentials) Present() bool {
	return c.Timestamp != "" || c.Nonce != "" || c.Signature != ""
}

// Digest is the SHA-256 of a request's bytes exactly as sent: the HTTP body of a
// JSON-RPC request (a batch is one request), the serialized request message of a
// gRPC call (a stream's opening message).
func Digest(body []byte) [32]byte { return sha256.Sum256(body) }

// Canonical returns the string a request's signature covers: six lines joined by
// "\n" (no trailing newline) — the scheme, the actor id, the target (JSONRPCTarget or
// the gRPC method, "/hero.v1.Coordinator/GetFlow"), the timestamp, the nonce, and the
// lowercase hex SHA-256 of the request's bytes.
func Canonical(actor uint32, target string, timestamp int64, nonce string, digest [32]byte) string {
	return strings.Join([]string{
		Scheme,
		strconv.FormatUint(uint64(actor), 10),
		target,
		strconv.FormatInt(timestamp, 10),
		nonce,
		hex.EncodeToString(digest[:]),
	}, "\n")
}

// Signer signs requests as one actor.
type Signer struct {
	Actor uint32
	Key   ed25519.PrivateKey
	Now   func() time.Time // nil: time.Now
}

// Sign returns the credentials for a request to target whose bytes have the digest.
func (s *Signer) Sign(target string, digest [32]byte) (Credentials, error) {
	if s == nil || len(s.Key) != ed25519.PrivateKeySize {
		return Credentials{}, errors.New("sign: no actor key")
	}
	nonce, err := NewNonce()
	if err != nil {
		return Credentials{}, err
	}
	ts := s.now().Unix()
	sig := ed25519.Sign(s.Key, []byte(Canonical(s.Actor, target, ts, nonce, digest)))
	return Credentials{
		Actor:     strconv.FormatUint(uint64(s.Actor), 10),
		Timestamp: strconv.FormatInt(ts, 10),
		Nonce:     nonce,
		Signature: hex.EncodeToString(sig),
	}, nil
}

// NewNonce returns 128 random bits as 32 hex characters.
func NewNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Parsed is a signed request's credentials, checked for shape.
type Parsed struct {
	Actor     uint32
	Timestamp int64
	Nonce     string
	Signature []byte
}

// FormatError says which credential is malformed; its message names the header.
type FormatError struct{ Msg string }

func (e *FormatError) Error() string { return e.Msg }

// Parse checks the shape of every credential (not the signature). Each must be in
// the one form the canonical string has (docs/api.md, Signed requests): the actor id
// and the timestamp decimal digits without a sign or leading zeros, the signature
// lowercase hex; another spelling of the same value is refused, so that a request's
// credentials read the same to every reader.
func Parse(c Credentials) (Parsed, error) {
	var p Parsed
	id, ts, err := actorAndTime([][2]string{{HeaderActor, c.Actor}, {HeaderTimestamp, c.Timestamp}, {HeaderNonce, c.Nonce}, {HeaderSignature, c.Signature}})
	if err != nil {
		return p, err
	}
	if !ValidNonce(c.Nonce) {
		return p, &FormatError{fmt.Sprintf("%s must be %d to %d characters of A-Z a-z 0-9 _ -", HeaderNonce, MinNonceLen, MaxNonceLen)}
	}
	sig, err := signatureHex(HeaderSignature, c.Signature)
	if err != nil {
		return p, err
	}
	return Parsed{Actor: id, Timestamp: ts, Nonce: c.Nonce, Signature: sig}, nil
}

// signatureHex decodes a signature sent as 128 lowercase hex characters (name is its
// header, for the error).
func signatureHex(name, s string) ([]byte, error) {
	sig, err := hex.DecodeString(s)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, &FormatError{name + " is not the hex of a 64-byte Ed25519 signature"}
	}
	if strings.ToLower(s) != s {
		return nil, &FormatError{name + " must be lowercase hex (as the canonical string's digest)"}
	}
	return sig, nil
}

// ValidNonce reports whether n has a nonce's shape.
func ValidNonce(n string) bool {
	if len(n) < MinNonceLen || len(n) > MaxNonceLen {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Skew is how far the request's timestamp is from now (positive: in the future).
func (p Parsed) Skew(now time.Time) time.Duration {
	return time.Unix(p.Timestamp, 0).Sub(now.Truncate(time.Second))
}

// Verify checks the signature against pub (nil: an actor with no valid key, which
// never verifies; the check still takes a verification's time).
func (p Parsed) Verify(pub ed25519.PublicKey, target string, digest [32]byte) bool {
	msg := []byte(Canonical(p.Actor, target, p.Timestamp, p.Nonce, digest))
	if len(pub) != ed25519.PublicKeySize {
		// Spend the same time as a real check, so that the answer's timing does not
		// tell an unknown actor (or one without a key) from a bad signature.
		_ = ed25519.Verify(decoyKey, msg, p.Signature)
		return false
	}
	return ed25519.Verify(pub, msg, p.Signature)
}

// decoyKey is a fixed valid public key used only to spend verification time.
var decoyKey = ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)

// actorAndTime checks that every credential of kvs (name, value) is present, then
// reads the first two: the actor id and the unix time. Errors name the credential.
func actorAndTime(kvs [][2]string) (uint32, int64, error) {
	missing := []string{}
	for _, kv := range kvs {
		if kv[1] == "" {
			missing = append(missing, kv[0])
		}
	}
	if len(missing) > 0 {
		return 0, 0, &FormatError{"missing " + strings.Join(missing, ", ")}
	}
	id, err := strconv.ParseUint(kvs[0][1], 10, 32)
	if err != nil || id == 0 {
		return 0, 0, &FormatError{kvs[0][0] + " is not an actor id (a number from 1)"}
	}
	if strconv.FormatUint(id, 10) != kvs[0][1] {
		return 0, 0, &FormatError{kvs[0][0] + " must be the actor id in decimal digits, without a sign or leading zeros (as the canonical string has it)"}
	}
	ts, err := strconv.ParseInt(kvs[1][1], 10, 64)
	if err != nil || ts <= 0 {
		return 0, 0, &FormatError{kvs[1][0] + " is not a unix time in seconds"}
	}
	if strconv.FormatInt(ts, 10) != kvs[1][1] {
		return 0, 0, &FormatError{kvs[1][0] + " must be the unix time in decimal digits, without a sign or leading zeros (as the canonical string has it)"}
	}
	return uint32(id), ts, nil
}
