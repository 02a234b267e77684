package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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
	actor   uint32
	context uint32
	secret  string
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
	fs.StringVar(&g.secret, "admin-secret", envOr("HERO_ADMIN_SECRET", ""), "")
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
}

func (c *cli) client() (herov1.CoordinatorClient, error) {
	if c.api != nil {
		return c.api, nil
	}
	cc, err := grpc.NewClient(c.g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %v", c.g.addr, err)
	}
	c.cc, c.api = cc, herov1.NewCoordinatorClient(cc)
	return c.api, nil
}

// callCtx adds the credentials and the per-call timeout.
func (c *cli) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = c.withAuth(ctx)
	return context.WithTimeout(ctx, c.g.timeout)
}

func (c *cli) withAuth(ctx context.Context) context.Context {
	var kv []string
	if c.g.actor != 0 {
		kv = append(kv, "hero-actor", strconv.FormatUint(uint64(c.g.actor), 10))
	}
	if c.g.secret != "" {
		kv = append(kv, "authorization", "Bearer "+c.g.secret)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
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
	switch obj {
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
