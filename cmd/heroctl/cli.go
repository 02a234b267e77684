package main

import (
	"cmp"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/tlsx"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

var (
	errHelp  = errors.New("help")
	errUsage = errors.New("usage")
)

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

type globals struct {
	addr    string
	apiURL  string
	actor   uint32
	context uint32
	secret  string
	// secretFile holds the operator secret when secret is empty (its first line that
	// is neither blank nor a # comment: supervisor-daemon's --admin-secret-file).
	secretFile string
	keyFile    string
	tls        tlsx.Files
	plain      bool // --plaintext: no TLS to the API (a stack whose API serves plaintext)
	each       bool // --sign-each-call: sign every gRPC call instead of the connection once
	output     string
	timeout    time.Duration
}

func envOr(k, def string) string {
	if v, ok := os.LookupEnv(k); ok && v != "" {
		return v
	}
	return def
}

func parseGlobal(args []string, stderr io.Writer) (*globals, []string, error) {
	g := &globals{}
	fs := flag.NewFlagSet("heroctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	actor := fs.String("actor", envOr("HERO_ACTOR", ""), "")
	ctxID := fs.String("context", envOr("HERO_CONTEXT", "1"), "")
	addr, err := hero.EnvAddr()
	if err != nil {
		return nil, nil, err
	}
	fs.StringVar(&g.addr, "addr", cmp.Or(addr, "127.0.0.1:9653"), "")
	fs.StringVar(&g.apiURL, "api-url", envOr("HERO_API_URL", ""), "")
	fs.StringVar(&g.secret, "admin-secret", envOr("HERO_ADMIN_SECRET", ""), "")
	fs.StringVar(&g.secretFile, "admin-secret-file", envOr("HERO_ADMIN_SECRET_FILE", ""), "")
	fs.StringVar(&g.keyFile, "key", envOr("HERO_KEY", ""), "")
	fs.StringVar(&g.tls.CA, "tls-ca", envOr("HERO_TLS_CA", ""), "")
	fs.StringVar(&g.tls.Cert, "tls-cert", envOr("HERO_TLS_CERT", ""), "")
	fs.StringVar(&g.tls.Key, "tls-key", envOr("HERO_TLS_KEY", ""), "")
	fs.BoolVar(&g.plain, "plaintext", envOr("HERO_PLAINTEXT", "") == "1", "")
	fs.BoolVar(&g.each, "sign-each-call", envOr("HERO_SIGN_EACH_CALL", "") == "1", "")
	fs.StringVar(&g.output, "output", envOr("HERO_OUTPUT", "table"), "")
	fs.StringVar(&g.output, "o", envOr("HERO_OUTPUT", "table"), "")
	fs.DurationVar(&g.timeout, "timeout", 30*time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, errHelp
		}
		return nil, nil, err
	}
	if g.apiURL == "" {
		// HERO_HTTP_PORT, on the host of --addr
		if g.apiURL, err = hero.EnvAPIURL(g.addr, g.plain); err != nil {
			return nil, nil, err
		}
	}
	if *actor != "" {
		if g.actor, err = parseID("--actor/HERO_ACTOR", *actor); err != nil {
			return nil, nil, err
		}
	}
	if g.context, err = parseID("--context/HERO_CONTEXT", *ctxID); err != nil {
		return nil, nil, err
	}
	if g.output != "table" && g.output != "json" {
		return nil, nil, fmt.Errorf("--output %q: want table or json", g.output)
	}
	return g, fs.Args(), nil
}

func parseID(what, s string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%s: %q is not an id (a number from 1)", what, s)
	}
	return uint32(n), nil
}

func parseIDList(what, s string) ([]uint32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []uint32
	for _, p := range strings.Split(s, ",") {
		id, err := parseID(what, p)
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

type cli struct {
	g    *globals
	out  io.Writer
	errw io.Writer
	hc   *hero.Client
	// operator: the command needs the operator secret (actor create, context create,
	// secret …, dispatcher …); otherwise heroctl signs as HERO_ACTOR when it has the
	// actor's key, and uses the secret only without one.
	operator bool
	// cred is the credential the client was made with: an error's hint names it.
	cred credential
	// secretFrom says where the operator secret came from (the flag, the file).
	secretFrom string
}

// close closes the client's connection, if one was made.
func (c *cli) close() {
	if c.hc != nil {
		_ = c.hc.Close()
	}
}

// credential is how a command authenticates: an actor's key (and its file), or an
// operator secret (with the actor it acts for, if any).
type credential struct {
	key     ed25519.PrivateKey
	keyFile string
	secret  string
	actor   uint32
}

// credential picks the command's credential (see cli.operator).
func (c *cli) credential() (credential, error) {
	if err := c.readSecretFile(); err != nil {
		return credential{}, err
	}
	if c.operator && c.g.secret != "" {
		return credential{secret: c.g.secret, actor: c.g.actor}, nil
	}
	if c.g.actor != 0 {
		cr, ok, err := c.actorKey()
		if ok || err != nil {
			return cr, err
		}
	}
	if c.g.secret != "" {
		return credential{secret: c.g.secret, actor: c.g.actor}, nil
	}
	if c.operator && c.g.secretFile != "" {
		return credential{}, usageErr("this command needs the operator secret: %s (HERO_ADMIN_SECRET_FILE) does not exist; set HERO_ADMIN_SECRET (--admin-secret) or point HERO_ADMIN_SECRET_FILE at the file supervisor-daemon generated", c.g.secretFile)
	}
	if c.operator {
		return credential{}, usageErr("this command needs the operator secret: set HERO_ADMIN_SECRET (--admin-secret), or HERO_ADMIN_SECRET_FILE (--admin-secret-file)")
	}
	return credential{}, usageErr("who are you? set HERO_ACTOR (with its key in %s, or --key FILE), or HERO_ADMIN_SECRET for operator commands", keysDirHint())
}

// readSecretFile takes the operator secret from --admin-secret-file when none is
// given otherwise. A file that does not exist gives none (a command signed with an
// actor's key needs no secret); one that cannot be read, or holds none, is an error.
func (c *cli) readSecretFile() error {
	if c.g.secret != "" || c.g.secretFile == "" {
		if c.secretFrom == "" {
			c.secretFrom = "HERO_ADMIN_SECRET (--admin-secret)"
		}
		return nil
	}
	c.secretFrom = c.g.secretFile + " (HERO_ADMIN_SECRET_FILE)"
	b, err := os.ReadFile(c.g.secretFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--admin-secret-file (HERO_ADMIN_SECRET_FILE): %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			c.g.secret = line
			return nil
		}
	}
	return fmt.Errorf("--admin-secret-file (HERO_ADMIN_SECRET_FILE) %s holds no secret", c.g.secretFile)
}

// actorKey loads HERO_ACTOR's key: ok false when there is none and the operator
// secret may stand in.
func (c *cli) actorKey() (credential, bool, error) {
	path := c.g.keyFile
	explicit := path != ""
	var err error
	if !explicit {
		path, err = auth.ActorKeyPath(c.g.actor)
	}
	var key ed25519.PrivateKey
	if err == nil {
		key, err = auth.LoadPrivateKey(path)
	} else if c.g.secret == "" {
		return credential{}, false, err
	}
	switch {
	case err == nil:
		return credential{key: key, keyFile: path, actor: c.g.actor}, true, nil
	case explicit || (path != "" && !errors.Is(err, os.ErrNotExist)):
		return credential{}, false, fmt.Errorf("actor %d's key: %v", c.g.actor, err)
	case c.g.secret == "":
		return credential{}, false, fmt.Errorf("no key for actor %d at %s: create it with `heroctl --actor %d key generate` and register its public key (heroctl actor update), or pass --key FILE (HERO_KEY)", c.g.actor, path, c.g.actor)
	}
	return credential{}, false, nil
}

func keysDirHint() string {
	d, err := auth.ConfigDir()
	if err != nil {
		return "the config directory"
	}
	return filepath.Join(d, "keys")
}

// client is the Go client (sdk/go) with the command's credential, made once.
func (c *cli) client() (*hero.Client, error) {
	if c.hc != nil {
		return c.hc, nil
	}
	cred, err := c.credential()
	if err != nil {
		return nil, err
	}
	t, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	// A user who runs heroctl while the daemon is not running learns it at once.
	hc, err := hero.Dial(hero.Config{Addr: c.g.addr, APIURL: c.g.apiURL, Actor: cred.actor, Key: cred.key, AdminSecret: cred.secret,
		Context: c.g.context, TLS: t, Plaintext: t == nil, SignEachCall: c.g.each, CallTimeout: c.g.timeout, FailFastUnreachable: true})
	if err != nil {
		return nil, err
	}
	c.hc, c.cred = hc, cred
	return hc, nil
}

// tlsConfig is the API's TLS: the server must present a certificate for the host
// dialled, issued by --tls-ca's CA (HERO_TLS_CA), else by one of the system's roots.
// It is nil only with an explicit --plaintext (HERO_PLAINTEXT=1).
func (c *cli) tlsConfig() (*tls.Config, error) {
	if c.g.plain {
		if c.g.tls.Enabled() {
			return nil, errors.New("--plaintext and --tls-ca/--tls-cert/--tls-key (or HERO_PLAINTEXT and HERO_TLS_*) exclude each other")
		}
		return nil, nil
	}
	if err := c.g.tls.Validate("tls", false); err != nil {
		return nil, err
	}
	return tlsx.ClientConfig(c.g.tls, "", "api", nil)
}

// describe turns an API error into one line for the user: its cause, and what to
// check for the credential the call was made with.
func (c *cli) describe(err error) string {
	if errors.Is(err, hero.ErrTLS) {
		return c.describeTLS(err)
	}
	if hero.Unreachable(err) {
		return "cannot reach supervisor-daemon: nothing answers at " + c.where(err) + ": " + dialError(err) +
			" (is it running? HERO_ADDR (--addr) and HERO_API_URL, or HERO_GRPC_PORT and HERO_HTTP_PORT, say where it listens)"
	}
	var re *hero.RPCError
	if errors.As(err, &re) && re.Code == rpcUnauthenticated {
		return err.Error() + c.authHint()
	}
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch st.Code() {
	case codes.Unavailable:
		if answered, after := apiAnswered(st); answered {
			return "supervisor-daemon answered that it cannot serve the call now: " + st.Message() + " (" + after + ")"
		}
		return "cannot reach supervisor-daemon at " + c.g.addr + " (is it running? set HERO_ADDR): " + st.Message()
	case codes.PermissionDenied:
		return st.Message() + " (set HERO_ACTOR, or HERO_ADMIN_SECRET for operator commands)"
	case codes.Unauthenticated:
		return st.Message() + c.authHint()
	case codes.DeadlineExceeded:
		return "timed out: " + st.Message()
	}
	return st.Message()
}

// rpcUnauthenticated is the JSON-RPC API's error code for a refused authentication.
const rpcUnauthenticated = -32001

// authHint says which credential the API refused and what to compare it with.
func (c *cli) authHint() string {
	switch {
	case c.cred.key != nil:
		a := c.cred.actor
		return fmt.Sprintf(" (heroctl signed as actor %d (HERO_ACTOR) with the key %s: is it the key registered for actor %d? "+
			"`heroctl key pubkey` prints this key's public key, and an operator sees the registered one with `heroctl actor get %d`)", a, c.cred.keyFile, a, a)
	case c.cred.secret != "":
		return " (heroctl sent the operator secret of " + c.secretFrom + ": it is not one the stack accepts. The stack's generated secret: " +
			"`docker compose exec -T supervisor-daemon cat /home/hero/secrets/admin-secret`, or scripts/local-stack.sh's .local-stack/admin-secret)"
	}
	return ""
}

// where is the address a call could not reach: the JSON-RPC URL of `api call`, else
// the gRPC address.
func (c *cli) where(err error) string {
	if strings.Contains(err.Error(), "JSON-RPC API") && c.hc != nil {
		if u, uerr := c.hc.APIURL(); uerr == nil {
			return u
		}
	}
	return c.g.addr
}

// dialError is the end of a failed dial's message: "connection refused",
// "lookup nowhere.invalid: no such host".
func dialError(err error) string {
	msg := err.Error()
	if st, ok := status.FromError(err); ok {
		msg = st.Message()
	}
	msg = strings.TrimRight(msg, `"`)
	if strings.HasPrefix(msg, "name resolver error") {
		return "its host name does not resolve (" + msg + ")"
	}
	for _, cut := range []string{"connect: ", "dial tcp: "} {
		if i := strings.LastIndex(msg, cut); i >= 0 {
			return msg[i+len(cut):]
		}
	}
	return msg
}

// apiAnswered says whether an Unavailable status is supervisor-daemon's own answer
// (its store or a service behind it is down, or it is shutting down: a retry hint, or
// its "unavailable" message) rather than gRPC's for a connection it could not make,
// and when to try again.
func apiAnswered(st *status.Status) (bool, string) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return true, "retry in " + ri.RetryDelay.AsDuration().String()
		}
	}
	msg := st.Message()
	if strings.HasPrefix(msg, "unavailable: ") || strings.HasPrefix(msg, "scheduler unavailable: ") {
		return true, "retry in a moment"
	}
	return false, ""
}

// describeTLS says what a failed TLS handshake with the API means, which CA heroctl
// checked it against, and what to set.
func (c *cli) describeTLS(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "x509: "); i >= 0 {
		// gRPC quotes the handshake's error inside its own message.
		msg = strings.ReplaceAll(strings.TrimRight(msg[i:], `"`), `\"`, `"`)
	}
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the API does not speak TLS: " + msg + " (an API without TLS needs --plaintext, HERO_PLAINTEXT=1)"
	case strings.Contains(msg, "x509: "):
		checked := "HERO_TLS_CA is not set, so heroctl checked it against the system's CAs only"
		if c.g.tls.CA != "" {
			checked = "heroctl checked it against HERO_TLS_CA's " + c.g.tls.CA + ", not the CA that issued it"
		}
		return "the API's certificate is not trusted: " + msg + " (" + checked + ". Set HERO_TLS_CA (--tls-ca) to the stack's CA: " +
			"`docker compose exec -T supervisor-daemon cat /pki/ca.pem`, scripts/local-stack.sh's .local-stack/pki/ca.pem, or the chart's <release>-api-tls Secret)"
	}
	return "the TLS handshake with the API failed: " + msg + " (check HERO_TLS_CA, HERO_TLS_CERT and HERO_TLS_KEY)"
}

// multiFlag collects repeated flags (--env K=V --env …).
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// parseKV parses repeated KEY=VALUE flags.
func parseKV(flagName string, list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErr("--%s %q: want KEY=VALUE", flagName, kv)
		}
		out[k] = v
	}
	return out, nil
}

func parseEnv(list []string) (map[string]string, error) { return parseKV("env", list) }
