package console

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxBody bounds a console request's body (a pasted flow file is the largest).
const maxBody = 1 << 20

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes or unreadable", maxBody))
		return false
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		fail(w, http.StatusBadRequest, "the request body is not the JSON expected: "+err.Error())
		return false
	}
	return true
}

func (c *Console) challenge(w http.ResponseWriter, _ *http.Request) {
	ch, err := c.seal.challenge(c.now())
	if err != nil {
		fail(w, http.StatusInternalServerError, "no challenge: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"challenge": ch})
}

type loginRequest struct {
	Actor     uint32 `json:"actor"`
	Challenge string `json:"challenge"`
	Signature string `json:"signature"` // hex Ed25519 signature of the challenge's bytes
	Secret    string `json:"secret"`    // an operator secret instead
	Link      string `json:"link"`      // or a one-time link's token (heroctl console login)
}

// login makes a session: an actor's signature of a challenge (the private key stays
// in the browser), or an operator secret.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	var in loginRequest
	if !decodeBody(w, r, &in) {
		return
	}
	s, status, msg := c.verifyLogin(r.Context(), &in)
	if s == nil {
		c.log.Info().Str("peer", r.RemoteAddr).Uint32("actor", in.Actor).Str("reason", msg).Msg("console sign-in refused")
		fail(w, status, msg)
		return
	}
	id, err := randomHex(16)
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.ID, s.Exp = id, c.now().Add(c.ttl).Unix()
	if err := c.setCookie(w, s); err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"signed_in": true})
}

func (c *Console) verifyLogin(ctx context.Context, in *loginRequest) (*session, int, string) {
	if in.Link != "" {
		if in.Secret != "" || in.Actor != 0 || in.Signature != "" {
			return nil, http.StatusBadRequest, "sign in with one of a link, an operator secret or an actor's signature"
		}
		return c.verifyLink(ctx, in.Link)
	}
	if in.Secret != "" {
		if in.Actor != 0 || in.Signature != "" {
			return nil, http.StatusBadRequest, "sign in with either an operator secret or an actor's signature, not both"
		}
		fp, ok, err := c.b.CheckSecret(ctx, in.Secret)
		if err != nil {
			return nil, http.StatusServiceUnavailable, "sign-in failed: " + err.Error()
		}
		if !ok {
			return nil, http.StatusUnauthorized, "sign-in failed: the operator secret is not valid"
		}
		return &session{Kind: kindOperator, Cred: fp}, 0, ""
	}
	if in.Actor == 0 {
		return nil, http.StatusBadRequest, "actor is required (a number from 1), or an operator secret"
	}
	nonce, err := c.seal.checkChallenge(in.Challenge, c.now())
	if err != nil {
		return nil, http.StatusUnauthorized, "sign-in failed: " + err.Error()
	}
	sig, err := hex.DecodeString(in.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, http.StatusBadRequest, "signature must be 128 hex characters (an Ed25519 signature)"
	}
	pub, err := c.b.ActorKey(ctx, in.Actor)
	if err != nil {
		return nil, http.StatusServiceUnavailable, "sign-in failed: " + err.Error()
	}
	if pub == nil || !ed25519.Verify(pub, []byte(in.Challenge), sig) {
		return nil, http.StatusUnauthorized, "sign-in failed: the signature does not verify for this actor and challenge"
	}
	fresh, err := c.b.UseNonce(ctx, in.Actor, "console:"+nonce, 2*challengeTTL)
	if err != nil {
		return nil, http.StatusServiceUnavailable, "sign-in failed: " + err.Error()
	}
	if !fresh {
		return nil, http.StatusUnauthorized, "sign-in failed: this challenge was used already; ask for a new one"
	}
	return &session{Kind: kindActor, Actor: in.Actor, Cred: keyHash(pub)}, 0, ""
}

// verifyLink makes the session a one-time link names, once, while its credential
// is still the identity's.
func (c *Console) verifyLink(ctx context.Context, tok string) (*session, int, string) {
	cl, err := c.seal.openLink(tok, c.now())
	if err != nil {
		return nil, http.StatusUnauthorized, "sign-in failed: " + err.Error()
	}
	s := &session{Kind: cl.Kind, Actor: cl.Actor, Cred: cl.Cred}
	if err := c.stillValid(ctx, s); err != nil {
		if errors.Is(err, errRevoked) {
			return nil, http.StatusUnauthorized, "sign-in failed: the link's key or secret was replaced or revoked since it was made"
		}
		return nil, http.StatusServiceUnavailable, "sign-in failed: " + err.Error()
	}
	fresh, err := c.b.UseNonce(ctx, cl.Actor, "console-link:"+cl.Nonce, 2*LinkTTL)
	if err != nil {
		return nil, http.StatusServiceUnavailable, "sign-in failed: " + err.Error()
	}
	if !fresh {
		return nil, http.StatusUnauthorized, "sign-in failed: this link was used already (a link signs in once): run heroctl console login again"
	}
	return s, 0, ""
}

func (c *Console) logout(w http.ResponseWriter, _ *http.Request) {
	clearCookie(w)
	writeJSON(w, http.StatusOK, map[string]any{"signed_in": false})
}

// me is who is signed in, the contexts they see with their roles, the CSRF token and
// whether the console is read-only.
func (c *Console) me(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	ctxs, err := c.b.Contexts(r.Context(), s.identity())
	if err != nil {
		failAPI(w, err)
		return
	}
	if ctxs == nil {
		ctxs = []ContextRole{}
	}
	name := "actor " + strconv.FormatUint(uint64(s.Actor), 10)
	if s.Kind == kindOperator {
		name = "operator " + s.Cred
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": s.Kind, "actor": s.Actor, "name": name, "csrf": c.seal.csrf(s),
		"read_only": c.readOnly, "expires": s.Exp, "contexts": ctxs})
}

// readMethods are the API methods the console calls to read; writeMethods those of
// its actions. Any other method is refused here; the API's method table checks the
// role of each.
var readMethods = map[string]bool{
	"context.load": true, "runner.list": true, "runner.load": true, "job.list": true, "job.load": true, "job.logs": true,
	"flow.list": true, "flow.load": true, "flow.dag": true, "dlq.list": true, "dlq.show": true, "events.read": true,
	"schedule.list": true, "schedule.load": true, "queue.list": true,
}

var writeMethods = map[string]bool{
	"flow.cancel": true, "flow.retry": true, "flow.delete": true, "job.stop": true, "dlq.requeue": true, "dlq.purge": true,
	"flow.pause": true, "flow.resume": true, "schedule.pause": true, "schedule.resume": true, "schedule.trigger": true,
	"queue.pause": true, "queue.resume": true,
}

type callRequest struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// call runs one API method as the session's identity. Reads pass in a read-only
// console; every call needs the CSRF token.
func (c *Console) call(w http.ResponseWriter, r *http.Request) {
	var in callRequest
	if !decodeBody(w, r, &in) {
		return
	}
	switch {
	case readMethods[in.Method]:
	case writeMethods[in.Method]:
		if c.readOnly {
			fail(w, http.StatusForbidden, "the console is read-only (--console-read-only): "+in.Method+" is refused")
			return
		}
	default:
		fail(w, http.StatusBadRequest, fmt.Sprintf("method %q is not one the console calls", in.Method))
		return
	}
	out, err := c.b.Call(r.Context(), sessionOf(r).identity(), in.Method, in.Params)
	if err != nil {
		failAPI(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"result":`))
	_, _ = w.Write(out)
	_, _ = w.Write([]byte("}\n"))
}

// csrfOnly is signedIn with the CSRF token checked (reads through call).
func (c *Console) csrfOnly(next http.HandlerFunc) http.HandlerFunc {
	return c.signedIn(func(w http.ResponseWriter, r *http.Request) {
		tok := r.Header.Get("X-CSRF-Token")
		if tok == "" || tok != c.seal.csrf(sessionOf(r)) {
			fail(w, http.StatusForbidden, "the request has no valid CSRF token (X-CSRF-Token) for this session: reload the page")
			return
		}
		next(w, r)
	})
}

func queryUint(r *http.Request, name string, need bool) (uint32, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		if need {
			return 0, fmt.Errorf("%s is required", name)
		}
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a number", name, v)
	}
	return uint32(n), nil
}

var errBadInput = errors.New("bad input")
