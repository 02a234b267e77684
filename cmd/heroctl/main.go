// Command heroctl is the command-line client of the Hero coordinator. It talks gRPC
// to supervisor-daemon (HERO_ADDR, default 127.0.0.1:9653) as the actor HERO_ACTOR,
// signing every call with the actor's key (--key, HERO_KEY, default
// ~/.config/hero/keys/actor-<id>.pem), in the context HERO_CONTEXT, or as an
// operator with HERO_ADMIN_SECRET.
//
//	heroctl [global flags] <object> <verb> [args]
//
// `heroctl help` lists the commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitError carries an exit code (e.g. 1 when a watched flow fails).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g, rest, err := parseGlobal(args, stderr)
	if err != nil {
		if errors.Is(err, errHelp) {
			printUsage(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "heroctl: %v\n", err)
		return 2
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		printUsage(stdout)
		return 0
	}
	cli := &cli{g: g, out: stdout, errw: stderr}
	err = cli.dispatch(ctx, rest)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "heroctl: %s\n", ee.msg)
		}
		return ee.code
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintf(stderr, "heroctl: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "heroctl: %s\n", cli.describe(err))
	return 1
}

// usageHead and usageTail frame the command list of `heroctl help`.
const usageHead = `heroctl — the Hero coordinator's command-line client

Usage: heroctl [global flags] <command> [flags] [args]
       heroctl <command> --help   (its flags with their defaults, and an example)

Global flags (each with an environment twin):
  --addr ADDR        supervisor-daemon gRPC address   $HERO_ADDR (default 127.0.0.1:$HERO_GRPC_PORT, 127.0.0.1:9653)
  --api-url URL      JSON-RPC URL (api call)          $HERO_API_URL (default https://<HERO_ADDR host>:$HERO_HTTP_PORT/, port 9652)
  --actor ID         the actor you act as              $HERO_ACTOR
  --key FILE         the actor's private key (PEM)     $HERO_KEY (default <config dir>/keys/actor-<ID>.pem)
  --context ID       the context to work in            $HERO_CONTEXT (default 1)
  --admin-secret S   operator secret                   $HERO_ADMIN_SECRET
  --admin-secret-file FILE  the operator secret in a file (its first line; e.g. one supervisor-daemon generated)   $HERO_ADMIN_SECRET_FILE
  --tls-ca FILE      the CA of the API's TLS (PEM)     $HERO_TLS_CA (default: the system's roots)
  --tls-cert FILE    a client certificate (PEM)        $HERO_TLS_CERT
  --tls-key FILE     its key                           $HERO_TLS_KEY
  --plaintext        the API without TLS (dev only)    $HERO_PLAINTEXT=1
  --sign-each-call   sign every gRPC call, not the TLS connection once (behind a TLS-terminating proxy)   $HERO_SIGN_EACH_CALL=1
  --output, -o F     table or json (json: the JSON-RPC API's objects)   $HERO_OUTPUT (default table)
  --timeout D        per-call timeout                  (default 30s)

Every call as an actor is signed with its Ed25519 key (docs/api.md): over TLS the
connection is signed once (a session signature), else each call. Operator
commands (actor create, context create, secret, dispatcher) use the operator secret;
other commands use it only when HERO_ACTOR has no key. The config directory is
$HERO_CONFIG_DIR, else $XDG_CONFIG_HOME/hero or ~/.config/hero. HERO_GRPC_PORT and
HERO_HTTP_PORT, which move docker-compose.yml's published ports, move heroctl's too.

Commands:
`

const usageTail = `
Examples:
  export HERO_ADDR=127.0.0.1:9653 HERO_TLS_CA=~/.config/hero/ca.pem HERO_ADMIN_SECRET=…   # HERO_TLS_CA: the stack's CA (README, Quickstart)
  heroctl actor create --id 1 && heroctl context create 1 --admins 1
  export HERO_ACTOR=1 HERO_CONTEXT=1
  heroctl runner create 1
  heroctl flow submit examples/diamond.yaml --watch
`
