package console

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A session is a cookie the server made and MACed under a key of the deployment
// (every replica derives the same one): it names who signed in, how (an actor's
// key, by its hash, or an operator secret, by its fingerprint), until when, and a
// random id the CSRF token is derived from. Nothing is stored per session: each
// request checks the MAC, the expiry and that the credential it was made from is
// still valid (the actor's current key hashes the same, the secret is not revoked),
// so a changed key or a revoked secret ends every session made from it at its next
// request.

// CookieName is the session cookie.
const CookieName = "hero_console"

// challengeTTL is how long a sign-in challenge may be signed and sent back.
const challengeTTL = 2 * time.Minute

// session is a verified session cookie.
type session struct {
	Kind  string `json:"k"` // "actor" or "operator"
	Actor uint32 `json:"a,omitempty"`
	Cred  string `json:"c"` // hash of the actor's key, or the secret's fingerprint
	Exp   int64  `json:"e"` // unix seconds
	ID    string `json:"s"` // random, hex
}

func (s *session) identity() Identity {
	if s.Kind == kindOperator {
		return Identity{Operator: true, Fingerprint: s.Cred}
	}
	return Identity{Actor: s.Actor}
}

const (
	kindActor    = "actor"
	kindOperator = "operator"
)

// sealer MACs sessions and challenges.
type sealer struct{ key []byte }

func (k sealer) mac(label, v string) []byte {
	h := hmac.New(sha256.New, k.key)
	h.Write([]byte(label))
	h.Write([]byte{0})
	h.Write([]byte(v))
	return h.Sum(nil)
}

var b64 = base64.RawURLEncoding

// seal makes a cookie value: v1.<payload>.<mac>.
func (k sealer) seal(s *session) (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	body := "v1." + b64.EncodeToString(b)
	return body + "." + b64.EncodeToString(k.mac("hero console session", body)), nil
}

var (
	errNoSession      = errors.New("not signed in")
	errForgedSession  = errors.New("the session cookie is not one this server made (sign in again)")
	errExpiredSession = errors.New("the session has expired (sign in again)")
)

// open checks a cookie value's MAC and expiry.
func (k sealer) open(v string, now time.Time) (*session, error) {
	if v == "" {
		return nil, errNoSession
	}
	i := strings.LastIndexByte(v, '.')
	if i < 0 || !strings.HasPrefix(v, "v1.") {
		return nil, errForgedSession
	}
	mac, err := b64.DecodeString(v[i+1:])
	if err != nil || !hmac.Equal(mac, k.mac("hero console session", v[:i])) {
		return nil, errForgedSession
	}
	b, err := b64.DecodeString(v[3:i])
	if err != nil {
		return nil, errForgedSession
	}
	var s session
	if err := json.Unmarshal(b, &s); err != nil || (s.Kind != kindActor && s.Kind != kindOperator) || s.ID == "" {
		return nil, errForgedSession
	}
	if now.Unix() >= s.Exp {
		return nil, errExpiredSession
	}
	return &s, nil
}

// csrf is the session's CSRF token: the page reads it from /ui/api/me and sends it
// in X-CSRF-Token with every change; a cross-site page can neither read it nor
// compute it.
func (k sealer) csrf(s *session) string {
	return b64.EncodeToString(k.mac("hero console csrf", s.ID))
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// challenge is what a browser signs with the actor's key to sign in:
// "hero-console-login:v1:<nonce>:<expiry>:<mac>". The MAC makes it the server's own;
// the nonce is used once (Backend.UseNonce).
func (k sealer) challenge(now time.Time) (string, error) {
	nonce, err := randomHex(16)
	if err != nil {
		return "", err
	}
	body := "hero-console-login:v1:" + nonce + ":" + strconv.FormatInt(now.Add(challengeTTL).Unix(), 10)
	return body + ":" + hex.EncodeToString(k.mac("hero console challenge", body)[:16]), nil
}

// checkChallenge returns a challenge's nonce, or why it is not valid.
func (k sealer) checkChallenge(c string, now time.Time) (string, error) {
	parts := strings.Split(c, ":")
	if len(parts) != 5 || parts[0] != "hero-console-login" || parts[1] != "v1" {
		return "", errors.New("the challenge is malformed")
	}
	body := strings.Join(parts[:4], ":")
	mac, err := hex.DecodeString(parts[4])
	if err != nil || !hmac.Equal(mac, k.mac("hero console challenge", body)[:16]) {
		return "", errors.New("the challenge is not one this server made")
	}
	exp, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || now.Unix() > exp {
		return "", fmt.Errorf("the challenge expired (it is valid %v): sign in again", challengeTTL)
	}
	return parts[2], nil
}

// keyHash names an actor's key in a session: a new key ends the sessions of the
// old one.
func keyHash(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return hex.EncodeToString(h[:12])
}
