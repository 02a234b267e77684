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
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "heroctl: %v\n", err)
		return 2
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
		fmt.Fprint(stdout, usage)
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
	fmt.Fprintf(stderr, "heroctl: %s\n", describe(err))
	return 1
}

const usage = `heroctl — the Hero coordinator's command-line client

Usage: heroctl [global flags] <command> [flags] [args]

Global flags (each with an environment twin):
  --addr ADDR        supervisor-daemon gRPC address   $HERO_ADDR (default 127.0.0.1:9653)
  --api-url URL      JSON-RPC URL (api call)          $HERO_API_URL (default https://<HERO_ADDR host>:9652/)
  --actor ID         the actor you act as              $HERO_ACTOR
  --key FILE         the actor's private key (PEM)     $HERO_KEY (default <config dir>/keys/actor-<ID>.pem)
  --context ID       the context to work in            $HERO_CONTEXT (default 1)
  --admin-secret S   operator secret                   $HERO_ADMIN_SECRET
  --tls-ca FILE      the CA of the API's TLS (PEM)     $HERO_TLS_CA (default: the system's roots)
  --tls-cert FILE    a client certificate (PEM)        $HERO_TLS_CERT
  --tls-key FILE     its key                           $HERO_TLS_KEY
  --plaintext        the API without TLS (dev only)    $HERO_PLAINTEXT=1
  --output, -o F     table or json                     $HERO_OUTPUT (default table)
  --timeout D        per-call timeout                  (default 30s)

Every call as an actor is signed with its Ed25519 key (docs/api.md). Operator
commands (actor create, context create, secret, dispatcher) use the operator secret;
other commands use it only when HERO_ACTOR has no key. The config directory is
$HERO_CONFIG_DIR, else $XDG_CONFIG_HOME/hero or ~/.config/hero.

Commands:
  key generate [--out FILE] [--force]   (prints the public key; default FILE: HERO_ACTOR's in the config dir)
  key pubkey                            (the public key of --key / HERO_ACTOR's key)
  actor create --id N [--pubkey HEX | --no-key] [--address A]...   (no --pubkey: the key in the config dir, made if missing)
  actor update [--id N] (--pubkey HEX | --generate-key) [--address A]...   (rotate: the old key is refused from then on)
  actor get ID
  secret list     secret create     secret revoke FINGERPRINT   (operator secrets; operator)
  api call METHOD ['{"json": "params"}']   (any JSON-RPC method, signed; prints the result)
  pki init --dir DIR [--api-host H]... [--redis-host H]... [--host H]... [--days N] [--renew]
                  (the internal CA and certificates: mutual TLS between services, the API's TLS; Redis ACL users)
  pki k8s-secrets --prefix NAME [--namespace NS] [--certs=false] [--redis-users=false] [--label K=V]... [pki init's host flags] [--days N]
                  (in a Kubernetes pod: the same, stored in the Secrets <NAME>-ca, <NAME>-<service>-tls, <NAME>-api-tls,
                   <NAME>-redis-tls, <NAME>-operator-tls, <NAME>-redis-users; creates only the missing ones)
  context create ID --admins 1,2 [--readers …] [--executors …] [--retention 72h] [--allowed-sources KEY,…]
  context update [ID] [--admins …] [--readers …] [--executors …] [--retention D] [--allowed-sources …]
                     [--job-defaults memory=512MiB,pids=64,cpu=500,file-size=1GiB,network=none|outbound]
                     [--job-max … (operators)]   (create takes them too; docs/security.md)
  context get [ID]   context delete ID [--force]
  runner create [ID] [--remote --pubkey K|--address A] [--topic T] [--script-types python,sh]
  runner get ID      runner list      runner delete ID [--force]
  job create --type T (--script S | --file F) [--id N] [--depends 1,2] [--env K=V]… [--timeout S] [--retries N] [--runner ID] [--limits memory=…,pids=…]
  job get ID [--caller N]     job list [--status S] [--limit N]
  job run --type T (--script S | --file F) [--env K=V]… [--timeout S] [--wait S]   (prints the output)
  job run --function executor#handler [--args '[1,2]'] [--kwargs '{"k":1}'] …     (a handler job)
  job logs ID [-f] [--caller N]     job stop ID [--caller N]     job delete ID [--caller N] [--force]
  flow submit FILE.yaml [--watch]   (creates the jobs and the flow, and starts it)
  flow create --jobs 1,2,3 [--id N] [--env K=V]…     flow start ID
  flow get ID     flow list [--status S]     flow dag ID
  flow watch ID   (live per-job status; exits 1 when the flow fails)
  flow wait ID [--wait S]   (waits until the flow ends and prints it; exits 1 when it failed)
  flow cancel ID  (running jobs stopped, pending ones never start)   flow delete ID [--force]
  flow retry ID   (re-run a failed flow's failed and cancelled jobs)
  dlq list        dlq show ID [--caller N]    dlq requeue ID [--caller N]    dlq purge [ID] [--caller N]
  events [--flow ID] [--after EVENT-ID] [-f]
  dispatcher list [--all]   dispatcher status ID   dispatcher logs ID   dispatcher stop ID   (Hero Dispatcher protocol; operator secret)
  dispatcher run --worker W (--script S | --file F) [--env K=V]… [--timeout S] [--retries N] [--log-path P] [--depends ID,ID] [--concurrent] [--wait S]

Examples:
  export HERO_ADDR=127.0.0.1:9653 HERO_ADMIN_SECRET=… 
  heroctl actor create --id 1 && heroctl context create 1 --admins 1
  export HERO_ACTOR=1 HERO_CONTEXT=1
  heroctl runner create 1
  heroctl flow submit examples/diamond.yaml --watch
`
