// Package console is the web console supervisor-daemon serves under /ui/: a page of
// plain ES modules embedded in the binary, and a small JSON and server-sent-events
// API behind a session cookie. Every read and action of the console is a call of the
// API's own method table (Backend.Call) as the signed-in actor or operator: the
// console adds no permission logic of its own (docs/console.md).
package console

import (
	"context"
	"crypto/ed25519"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

//go:embed static
var static embed.FS

// Prefix is where the console is served.
const Prefix = "/ui/"

// Identity is who a session acts as: an actor, or an operator by its secret's
// fingerprint.
type Identity struct {
	Operator    bool
	Fingerprint string
	Actor       uint32
}

// ContextRole is a context the identity may see, with its role there.
type ContextRole struct {
	ID   uint32 `json:"id"`
	Role string `json:"role"` // reader, executor, admin
}

// Event is one event of a context's stream.
type Event struct {
	ID     string
	FlowID uint32
	JobID  uint32
	Data   any // marshalled as the event's JSON
}

// APIError is a refused call, with its JSON-RPC code (docs/api.md).
type APIError struct {
	Code    int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// JSON-RPC codes the console maps to HTTP statuses.
const (
	CodeInvalidParams   = -32602
	CodeUnauthenticated = -32001
	CodePermission      = -32003
	CodeNotFound        = -32004
)

// Backend is what the console needs of supervisor-daemon.
type Backend interface {
	// Call runs a method of the API's method table as id; the error of a refusal is
	// an *APIError.
	Call(ctx context.Context, id Identity, method string, params any) (json.RawMessage, error)
	// ActorKey is an actor's current public key (nil: no such actor or no key).
	ActorKey(ctx context.Context, actor uint32) (ed25519.PublicKey, error)
	// CheckSecret returns an operator secret's fingerprint when it is valid.
	CheckSecret(ctx context.Context, secret string) (fp string, ok bool, err error)
	// SecretValid reports whether the secret of a fingerprint is still accepted.
	SecretValid(ctx context.Context, fp string) (bool, error)
	// UseNonce records a sign-in nonce of an actor: false when it was used already.
	UseNonce(ctx context.Context, actor uint32, nonce string, ttl time.Duration) (bool, error)
	// Contexts are the contexts id may read.
	Contexts(ctx context.Context, id Identity) ([]ContextRole, error)
	// Follow sends a context's events after an id (as events.read authorizes them)
	// until ctx ends or send fails.
	Follow(ctx context.Context, id Identity, ctxID uint32, after string, send func([]Event) error) error
	// Guard makes a stream of id one of the API's open streams: the returned context
	// ends, with the refusal as its cause, as soon as a change of the credential or of
	// id's role in ctxID (0: none) takes the right away — check is the session's own
	// check of its credential, run again at each notice of such a change. remove
	// unregisters it.
	Guard(ctx context.Context, id Identity, ctxID uint32, method, peer string, check func(context.Context) error) (context.Context, func())
	// MarkLog marks a job's log as tailed for ttl (as job.logs authorizes it): its
	// appends are then told to LogAppends.
	MarkLog(ctx context.Context, id Identity, ctxID, callerID, jobID uint32, ttl time.Duration) error
	// LogAppends receives when a marked job's log grew; stop ends the watch.
	LogAppends(ctxID, callerID, jobID uint32) (appended <-chan struct{}, stop func())
	// Queues are a context's queues with the items waiting in each, and the items
	// held (running), as a reader of the context may see them.
	Queues(ctx context.Context, id Identity, ctxID uint32) ([]QueueDepth, int64, error)
	// EventsSince are the newest events (at most max) of a context since a time,
	// oldest first, as events.read authorizes them.
	EventsSince(ctx context.Context, id Identity, ctxID uint32, since time.Time, max int) ([]StatEvent, error)
	// Has says whether the API has a method (queue.pause came later than the console).
	Has(method string) bool
}

// Options configure the console.
type Options struct {
	Backend    Backend
	Key        []byte        // the sessions' MAC key, the same on every replica
	ReadOnly   bool          // no actions for anyone
	SessionTTL time.Duration // a session's life
	Log        zerolog.Logger
	Now        func() time.Time
}

// Console is the /ui/ handler.
type Console struct {
	b        Backend
	seal     sealer
	readOnly bool
	ttl      time.Duration
	log      zerolog.Logger
	now      func() time.Time
	mux      *http.ServeMux
	files    http.Handler

	gvMu sync.Mutex // one layout at a time (graphviz is not safe for concurrent use)
	gv   *layoutEngine
}

// New makes the console.
func New(o Options) (*Console, error) {
	if len(o.Key) < 16 {
		return nil, errors.New("console: a session key of at least 16 bytes is needed")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	c := &Console{b: o.Backend, seal: sealer{key: o.Key}, readOnly: o.ReadOnly, ttl: o.SessionTTL, log: o.Log, now: o.Now,
		mux: http.NewServeMux(), files: http.StripPrefix("/ui/", http.FileServerFS(sub))}
	c.routes()
	return c, nil
}

func (c *Console) routes() {
	m := c.mux
	m.HandleFunc("GET /ui/api/challenge", c.challenge)
	m.HandleFunc("POST /ui/api/login", c.sameSite(c.login))
	m.HandleFunc("POST /ui/api/logout", c.sameSite(c.logout))
	m.HandleFunc("GET /ui/api/me", c.signedIn(c.me))
	m.HandleFunc("POST /ui/api/call", c.csrfOnly(c.call))
	m.HandleFunc("GET /ui/api/list", c.signedIn(c.list))
	m.HandleFunc("POST /ui/api/bulk", c.action(c.bulk))
	m.HandleFunc("POST /ui/api/submit", c.action(c.submit))
	m.HandleFunc("GET /ui/api/dag", c.signedIn(c.dag))
	m.HandleFunc("GET /ui/api/events", c.signedIn(c.events))
	m.HandleFunc("GET /ui/api/log", c.signedIn(c.logStream))
	m.HandleFunc("GET /ui/api/stats", c.signedIn(c.stats))
	m.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, "no such console endpoint: "+r.Method+" "+r.URL.Path)
	})
	m.HandleFunc("/ui/", c.static)
}

// ServeHTTP serves /ui/ with the headers every answer carries: nothing from another
// origin is loaded or may frame the page.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if r.URL.Path == "/ui" {
		http.Redirect(w, r, Prefix, http.StatusFound)
		return
	}
	c.mux.ServeHTTP(w, r)
}

func (c *Console) static(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		fail(w, http.StatusMethodNotAllowed, "the console's pages are read with GET")
		return
	}
	f := strings.TrimPrefix(r.URL.Path, Prefix)
	if f == "" || !strings.Contains(f, ".") {
		r.URL.Path = Prefix // the page's routes are in its fragment; any other path is the page
	}
	c.files.ServeHTTP(w, r)
}

// fail answers an error as {"error": msg}.
func fail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// failAPI answers a refused call with the HTTP status of its code.
func failAPI(w http.ResponseWriter, err error) {
	var ae *APIError
	if !errors.As(err, &ae) {
		fail(w, http.StatusServiceUnavailable, "the call failed: "+err.Error())
		return
	}
	status := http.StatusBadRequest
	switch ae.Code {
	case CodeUnauthenticated:
		status = http.StatusUnauthorized
	case CodePermission:
		status = http.StatusForbidden
	case CodeNotFound:
		status = http.StatusNotFound
	}
	if ae.Code == -32603 {
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, map[string]any{"error": ae.Message, "code": ae.Code})
}

// sameSite refuses a request another site's page made: browsers send Sec-Fetch-Site
// (and Origin on a POST); a request without them (not a browser's) is let through to
// the session and CSRF checks.
func (c *Console) sameSite(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
			fail(w, http.StatusForbidden, "cross-site request refused (Sec-Fetch-Site: "+s+")")
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "https://"+r.Host && o != "http://"+r.Host {
			fail(w, http.StatusForbidden, "cross-site request refused (Origin "+o+" is not this console's)")
			return
		}
		next(w, r)
	}
}

type sessionKey struct{}

// signedIn checks the session cookie and that its credential is still valid.
func (c *Console) signedIn(next http.HandlerFunc) http.HandlerFunc {
	return c.sameSite(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(r)
		if err != nil {
			if !errors.Is(err, errNoSession) {
				clearCookie(w)
			}
			fail(w, http.StatusUnauthorized, err.Error())
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	})
}

// action is signedIn for a change: the CSRF token must come with it, and the
// console must not be read-only.
func (c *Console) action(next http.HandlerFunc) http.HandlerFunc {
	return c.signedIn(func(w http.ResponseWriter, r *http.Request) {
		s := r.Context().Value(sessionKey{}).(*session)
		tok := r.Header.Get("X-CSRF-Token")
		if tok == "" || tok != c.seal.csrf(s) {
			fail(w, http.StatusForbidden, "the request has no valid CSRF token (X-CSRF-Token) for this session: reload the page")
			return
		}
		if c.readOnly {
			fail(w, http.StatusForbidden, "the console is read-only (--console-read-only): actions are refused")
			return
		}
		next(w, r)
	})
}

func (c *Console) session(r *http.Request) (*session, error) {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return nil, errNoSession
	}
	s, err := c.seal.open(ck.Value, c.now())
	if err != nil {
		return nil, err
	}
	return s, c.stillValid(r.Context(), s)
}

var errRevoked = errors.New("the session's credential was revoked or replaced (sign in again)")

// stillValid checks that the key or secret the session was made from is still the
// actor's, or accepted.
func (c *Console) stillValid(ctx context.Context, s *session) error {
	if s.Kind == kindOperator {
		ok, err := c.b.SecretValid(ctx, s.Cred)
		if err != nil {
			return err
		}
		if !ok {
			return errRevoked
		}
		return nil
	}
	pub, err := c.b.ActorKey(ctx, s.Actor)
	if err != nil {
		return err
	}
	if pub == nil || keyHash(pub) != s.Cred {
		return errRevoked
	}
	return nil
}

func sessionOf(r *http.Request) *session { return r.Context().Value(sessionKey{}).(*session) }

func (c *Console) setCookie(w http.ResponseWriter, s *session) error {
	v, err := c.seal.seal(s)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: v, Path: Prefix, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode,
		Expires: time.Unix(s.Exp, 0)})
	return nil
}

func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Prefix, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}
