package console

import (
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// A one-time sign-in link: `heroctl console login` asks for one with a signed
// request (the API's console.link, as the identity it signed as) and prints the
// console's address with the token in the fragment (/ui/#/link/<token>: a fragment
// never reaches a server's log or another site's Referer). The page sends the token
// to login, which makes a session as the token names. A token is MACed under the
// sessions' key, valid LinkTTL, used once (Backend.UseNonce), and names the actor's
// key by its hash (or the operator secret by its fingerprint): a new key or a revoked
// secret voids it as it ends a session.

// LinkTTL is how long a sign-in link may be used.
const LinkTTL = 2 * time.Minute

type linkClaims struct {
	Kind  string `json:"k"`
	Actor uint32 `json:"a,omitempty"`
	Cred  string `json:"c"`
	Exp   int64  `json:"e"` // unix seconds
	Nonce string `json:"n"`
}

// NewLink makes a sign-in link's token for id: an actor whose current key is pub,
// or an operator by its secret's fingerprint (pub unused). key is the console's
// (Options.Key).
func NewLink(key []byte, id Identity, pub ed25519.PublicKey, now time.Time) (string, time.Time, error) {
	if len(key) < 16 {
		return "", time.Time{}, errors.New("console: a session key of at least 16 bytes is needed")
	}
	nonce, err := randomHex(16)
	if err != nil {
		return "", time.Time{}, err
	}
	exp := now.Add(LinkTTL)
	cl := linkClaims{Kind: kindOperator, Cred: id.Fingerprint, Exp: exp.Unix(), Nonce: nonce}
	if !id.Operator {
		if len(pub) != ed25519.PublicKeySize {
			return "", time.Time{}, errors.New("the actor has no public key to sign in with")
		}
		cl = linkClaims{Kind: kindActor, Actor: id.Actor, Cred: keyHash(pub), Exp: exp.Unix(), Nonce: nonce}
	}
	b, err := json.Marshal(cl)
	if err != nil {
		return "", time.Time{}, err
	}
	body := "l1." + b64.EncodeToString(b)
	return body + "." + b64.EncodeToString(sealer{key: key}.mac("hero console link", body)), exp, nil
}

var (
	errForgedLink  = errors.New("the sign-in link is not one this server made")
	errExpiredLink = errors.New("the sign-in link expired (it is valid 2 minutes): run heroctl console login again")
)

// openLink checks a link token's MAC and expiry.
func (k sealer) openLink(tok string, now time.Time) (*linkClaims, error) {
	i := strings.LastIndexByte(tok, '.')
	if i < 0 || !strings.HasPrefix(tok, "l1.") {
		return nil, errForgedLink
	}
	mac, err := b64.DecodeString(tok[i+1:])
	if err != nil || !hmac.Equal(mac, k.mac("hero console link", tok[:i])) {
		return nil, errForgedLink
	}
	b, err := b64.DecodeString(tok[3:i])
	if err != nil {
		return nil, errForgedLink
	}
	var cl linkClaims
	if err := json.Unmarshal(b, &cl); err != nil || (cl.Kind != kindActor && cl.Kind != kindOperator) || cl.Nonce == "" {
		return nil, errForgedLink
	}
	if now.Unix() > cl.Exp {
		return nil, errExpiredLink
	}
	return &cl, nil
}
