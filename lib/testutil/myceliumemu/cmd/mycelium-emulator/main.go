// Command mycelium-emulator runs emulated Mycelium nodes (package
// myceliumemu) as a process, for compose examples and local runs on machines
// without Mycelium. It is a TEST FIXTURE, not a Mycelium node: the nodes
// exchange messages only with each other, inside this process.
//
//	mycelium-emulator --nodes a=0.0.0.0:8989,b=0.0.0.0:8990 [--seed S]
//
// Each node serves the Mycelium message API on its listen address. Node keys
// derive from the seed and the node name, so the same flags always give the
// same keys: services can be configured with each other's public keys ahead
// of time (--print-identities prints them without serving). On start the
// command prints one JSON line to stdout,
//
//	{"seed":"…","nodes":[{"name":"a","pk":"…","ip":"…","subnet":"…/64","url":"http://…"}, …]}
//
// and then serves until SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
)

const defaultSeed = "hero-mycelium-emulator"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mycelium-emulator:", err)
		os.Exit(2)
	}
}

type nodeSpec struct{ name, addr string }

// parseNodes reads "a=host:port,b,c=:8990"; a bare name listens on
// 127.0.0.1 at a free port.
func parseNodes(s string) ([]nodeSpec, error) {
	var out []nodeSpec
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, addr, ok := strings.Cut(part, "=")
		if !ok {
			addr = "127.0.0.1:0"
		}
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			return nil, fmt.Errorf("--nodes: empty or repeated name in %q", part)
		}
		seen[name] = true
		out = append(out, nodeSpec{name, strings.TrimSpace(addr)})
	}
	if len(out) == 0 {
		return nil, errors.New("--nodes: at least one node is required, e.g. a=127.0.0.1:8989,b=127.0.0.1:8990")
	}
	return out, nil
}

type nodeOut struct {
	myceliumemu.Identity
	URL string `json:"url,omitempty"`
}

type output struct {
	Seed  string    `json:"seed"`
	Nodes []nodeOut `json:"nodes"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mycelium-emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesFlag := fs.String("nodes", "", "nodes to run: name=listen-address,… (e.g. a=127.0.0.1:8989,b=127.0.0.1:8990; a bare name picks a free port)")
	seed := fs.String("seed", defaultSeed, "seed from which node keys are derived (with each node's name)")
	printOnly := fs.Bool("print-identities", false, "print the nodes' identities as JSON and exit without serving")
	delay := fs.Duration("delay", 0, "delivery delay of every message")
	dropRate := fs.Float64("drop-rate", 0, "probability (0..1) that a message is lost")
	window := fs.Duration("send-window", myceliumemu.DefaultSendWindow, "how long undelivered messages stay pending before they are aborted")
	match := fs.String("topic-match", "exact", "topic filter of popMessage: exact (as Mycelium v0.7.10 does) or prefix (as api.yaml's prose says)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	specs, err := parseNodes(*nodesFlag)
	if err != nil {
		return err
	}
	opts := myceliumemu.Options{Seed: *seed, SendWindow: *window, RandSeed: uint64(time.Now().UnixNano())}
	switch *match {
	case "exact":
	case "prefix":
		opts.TopicMatch = myceliumemu.TopicMatchPrefix
	default:
		return fmt.Errorf("--topic-match: want prefix or exact, got %q", *match)
	}
	if *dropRate < 0 || *dropRate > 1 {
		return fmt.Errorf("--drop-rate: want 0..1, got %v", *dropRate)
	}
	if *seed == "" {
		return errors.New("--seed must not be empty (identities would be random)")
	}

	out := output{Seed: *seed}
	if *printOnly {
		for _, s := range specs {
			out.Nodes = append(out.Nodes, nodeOut{Identity: myceliumemu.DeriveIdentity(*seed, s.name)})
		}
		return json.NewEncoder(stdout).Encode(out)
	}

	n := myceliumemu.NewNetwork(opts)
	defer n.Close()
	n.SetDelay(*delay)
	n.SetDropRate(*dropRate)
	for _, s := range specs {
		nd, err := n.AddNodeAt(s.name, s.addr)
		if err != nil {
			return fmt.Errorf("node %s on %s: %w", s.name, s.addr, err)
		}
		out.Nodes = append(out.Nodes, nodeOut{Identity: nd.Identity(), URL: nd.URL()})
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "mycelium-emulator: %d node(s) serving (test fixture, not Mycelium); SIGTERM to stop\n", len(specs))
	<-ctx.Done()
	fmt.Fprintln(stderr, "mycelium-emulator: stopping")
	return nil
}
