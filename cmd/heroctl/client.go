package main

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/tlsx"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
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
	keyFile string
	tls     tlsx.Files
	plain   bool // --plaintext: no TLS to the API (a stack whose API serves plaintext)
	output  string
	timeout time.Duration
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
	fs.StringVar(&g.addr, "addr", envOr("HERO_ADDR", "127.0.0.1:9653"), "")
	fs.StringVar(&g.apiURL, "api-url", envOr("HERO_API_URL", ""), "")
	fs.StringVar(&g.secret, "admin-secret", envOr("HERO_ADMIN_SECRET", ""), "")
	fs.StringVar(&g.keyFile, "key", envOr("HERO_KEY", ""), "")
	fs.StringVar(&g.tls.CA, "tls-ca", envOr("HERO_TLS_CA", ""), "")
	fs.StringVar(&g.tls.Cert, "tls-cert", envOr("HERO_TLS_CERT", ""), "")
	fs.StringVar(&g.tls.Key, "tls-key", envOr("HERO_TLS_KEY", ""), "")
	fs.BoolVar(&g.plain, "plaintext", envOr("HERO_PLAINTEXT", "") == "1", "")
	fs.StringVar(&g.output, "output", envOr("HERO_OUTPUT", "table"), "")
	fs.StringVar(&g.output, "o", envOr("HERO_OUTPUT", "table"), "")
	fs.DurationVar(&g.timeout, "timeout", 30*time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, nil, errHelp
		}
		return nil, nil, err
	}
	var err error
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
	cc   *grpc.ClientConn
	api  herov1.CoordinatorClient
	// operator: the command needs the operator secret (actor create, context create,
	// secret …, dispatcher …); otherwise heroctl signs as HERO_ACTOR when it has the
	// actor's key, and uses the secret only without one.
	operator bool
}

// credential is how a command authenticates: an actor's signer, or an operator
// secret (with the actor it acts for, if any).
type credential struct {
	signer *auth.Signer
	secret string
	actor  uint32
}

// credential picks the command's credential (see cli.operator).
func (c *cli) credential() (credential, error) {
	if c.operator && c.g.secret != "" {
		return credential{secret: c.g.secret, actor: c.g.actor}, nil
	}
	if c.g.actor != 0 {
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
			return credential{}, err
		}
		switch {
		case err == nil:
			return credential{signer: &auth.Signer{Actor: c.g.actor, Key: key}}, nil
		case explicit || (path != "" && !errors.Is(err, os.ErrNotExist)):
			return credential{}, fmt.Errorf("actor %d's key: %v", c.g.actor, err)
		case c.g.secret == "":
			return credential{}, fmt.Errorf("no key for actor %d at %s: create it with `heroctl --actor %d key generate` and register its public key (heroctl actor update), or pass --key FILE (HERO_KEY)", c.g.actor, path, c.g.actor)
		}
	}
	if c.g.secret != "" {
		return credential{secret: c.g.secret, actor: c.g.actor}, nil
	}
	if c.operator {
		return credential{}, usageErr("this command needs the operator secret: set HERO_ADMIN_SECRET (--admin-secret)")
	}
	return credential{}, usageErr("who are you? set HERO_ACTOR (with its key in %s, or --key FILE), or HERO_ADMIN_SECRET for operator commands", keysDirHint())
}

func keysDirHint() string {
	d, err := auth.ConfigDir()
	if err != nil {
		return "the config directory"
	}
	return filepath.Join(d, "keys")
}

func (c *cli) client() (herov1.CoordinatorClient, error) {
	if c.api != nil {
		return c.api, nil
	}
	cred, err := c.credential()
	if err != nil {
		return nil, err
	}
	t, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	var creds credentials.TransportCredentials
	if t != nil {
		creds = credentials.NewTLS(t)
	} else {
		creds = insecure.NewCredentials() // only with --plaintext
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds),
		// Retries come first: each attempt is signed anew (a new nonce).
		grpc.WithChainUnaryInterceptor(retryUnary)}
	if cred.signer != nil {
		opts = append(opts, auth.DialOptions(cred.signer)...)
	} else {
		md := []string{"authorization", "Bearer " + cred.secret}
		if cred.actor != 0 {
			md = append(md, auth.MetadataActor, strconv.FormatUint(uint64(cred.actor), 10))
		}
		opts = append(opts,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, o ...grpc.CallOption) error {
				return inv(metadata.AppendToOutgoingContext(ctx, md...), method, req, reply, cc, o...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, d *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
				return st(metadata.AppendToOutgoingContext(ctx, md...), d, cc, method, o...)
			}))
	}
	cc, err := grpc.NewClient(c.g.addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %v", c.g.addr, err)
	}
	c.cc, c.api = cc, herov1.NewCoordinatorClient(cc)
	return c.api, nil
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

// callCtx adds the per-call timeout.
func (c *cli) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.g.timeout)
}

// idempotentCalls may be sent again when the server was unavailable: reads, waits,
// and changes that a second time leave as the first did.
var idempotentCalls = map[string]bool{
	"GetActor": true, "GetContext": true, "GetRunner": true, "ListRunners": true, "GetJob": true, "ListJobs": true,
	"GetJobLogs": true, "GetFlow": true, "ListFlows": true, "GetFlowDag": true, "WaitFlow": true, "StartFlow": true,
	"CancelFlow": true, "ListDLQ": true, "ShowDLQ": true, "GetMessage": true, "ReadEvents": true, "ListOperatorSecrets": true,
	"JobStatus": true, "JobLogs": true,
}

// retryUnary retries an idempotent call on Unavailable (the server, or its Redis,
// is briefly gone) and ResourceExhausted (rate limited), with backoff from 100 ms to
// 2 s (or the server's retry hint), until the call's deadline.
func retryUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	backoff := 100 * time.Millisecond
	for {
		err := invoker(ctx, method, req, reply, cc, opts...)
		st, _ := status.FromError(err)
		if err == nil || !idempotentCalls[path.Base(method)] || (st.Code() != codes.Unavailable && st.Code() != codes.ResourceExhausted) {
			return err
		}
		wait := backoff
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
				wait = ri.RetryDelay.AsDuration()
			}
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// describe turns a gRPC error into one line for the user.
func describe(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch st.Code() {
	case codes.Unavailable:
		return "cannot reach supervisor-daemon (is it running? set HERO_ADDR): " + st.Message()
	case codes.PermissionDenied:
		return st.Message() + " (set HERO_ACTOR, or HERO_ADMIN_SECRET for operator commands)"
	case codes.Unauthenticated:
		return st.Message() + " (is HERO_ACTOR's key the one registered? heroctl key pubkey shows it)"
	case codes.DeadlineExceeded:
		return "timed out: " + st.Message()
	}
	return st.Message()
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	defer func() {
		if c.cc != nil {
			_ = c.cc.Close()
		}
	}()
	obj, rest := args[0], args[1:]
	verb := ""
	if len(rest) > 0 {
		verb, rest = rest[0], rest[1:]
	}
	c.operator = obj == "secret" || obj == "dispatcher" || (obj == "actor" && verb == "create") || (obj == "context" && verb == "create") ||
		(obj == "context" && verb == "update" && hasFlag(rest, "job-max"))
	switch obj {
	case "key":
		return c.keyCmd(verb, rest)
	case "pki":
		return c.pkiCmd(ctx, verb, rest)
	case "api":
		return c.apiCmd(ctx, verb, rest)
	case "secret":
		return c.secretCmd(ctx, verb, rest)
	case "actor":
		return c.actorCmd(ctx, verb, rest)
	case "context":
		return c.contextCmd(ctx, verb, rest)
	case "runner":
		return c.runnerCmd(ctx, verb, rest)
	case "job":
		return c.jobCmd(ctx, verb, rest)
	case "flow":
		return c.flowCmd(ctx, verb, rest)
	case "dlq":
		return c.dlqCmd(ctx, verb, rest)
	case "dispatcher":
		return c.dispatcherCmd(ctx, verb, rest)
	case "events":
		if verb != "" {
			rest = append([]string{verb}, rest...)
		}
		return c.eventsCmd(ctx, rest)
	}
	return usageErr("unknown command %q (heroctl help lists them)", obj)
}

// subFlags is a flag set for one subcommand; positional args may come before or after flags.
func subFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parseSub(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageErr("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// multiFlag collects repeated flags (--env K=V --env …).
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func parseEnv(list []string) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErr("--env %q: want KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

// hasFlag says whether args give the flag (-name, --name, with or without =value).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}
