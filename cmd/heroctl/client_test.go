package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// TestTLSByDefault: heroctl verifies the API's certificate unless told --plaintext;
// with no --tls-ca it does not fall back to plaintext, and a plaintext server sees
// no request.
func TestTLSByDefault(t *testing.T) {
	for _, k := range []string{"HERO_TLS_CA", "HERO_TLS_CERT", "HERO_TLS_KEY", "HERO_PLAINTEXT", "HERO_API_URL"} {
		t.Setenv(k, "")
	}
	parse := func(args ...string) *cli {
		t.Helper()
		g, _, err := parseGlobal(append(args, "version"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return &cli{g: g}
	}
	// apiURL is the JSON-RPC URL the Go client would call.
	apiURL := func(c *cli) (string, error) {
		c.g.secret = "s3cret-s3cret-s3cret"
		hc, err := c.client()
		if err != nil {
			return "", err
		}
		defer c.close()
		return hc.APIURL()
	}

	c := parse("--addr", "api.example.com:9653")
	if cfg, err := c.tlsConfig(); err != nil || cfg == nil || cfg.InsecureSkipVerify || cfg.RootCAs != nil {
		t.Errorf("default: TLS config %v, %v; want TLS against the system's roots", cfg, err)
	}
	if u, err := apiURL(c); err != nil || u != "https://api.example.com:9652/" {
		t.Errorf("default JSON-RPC URL %q, %v", u, err)
	}

	if _, err := apiURL(parse("--api-url", "http://127.0.0.1:9652/")); err == nil {
		t.Error("an http:// --api-url was taken without --plaintext")
	}

	c = parse("--addr", "127.0.0.1:9653", "--plaintext")
	if cfg, err := c.tlsConfig(); err != nil || cfg != nil {
		t.Errorf("--plaintext: TLS config %v, %v", cfg, err)
	}
	if u, _ := apiURL(c); u != "http://127.0.0.1:9652/" {
		t.Errorf("--plaintext JSON-RPC URL %q", u)
	}
	t.Setenv("HERO_PLAINTEXT", "1")
	if cfg, err := parse().tlsConfig(); err != nil || cfg != nil {
		t.Errorf("HERO_PLAINTEXT=1: TLS config %v, %v", cfg, err)
	}
	if _, err := parse("--tls-ca", "/nonexistent/ca.pem").tlsConfig(); err == nil || !strings.Contains(err.Error(), "--plaintext") {
		t.Errorf("--plaintext with --tls-ca: %v", err)
	}
	t.Setenv("HERO_PLAINTEXT", "")

	// A plaintext server: heroctl without --plaintext fails its handshake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	fake := &fakeDispatcher{}
	herov1.RegisterDispatcherServer(gs, fake)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	for _, plain := range []bool{false, true} {
		var out, errw bytes.Buffer
		c := &cli{g: &globals{addr: ln.Addr().String(), secret: "s3cret-s3cret-s3cret", plain: plain, output: "table", timeout: 3 * time.Second}, out: &out, errw: &errw}
		err := c.dispatch(context.Background(), []string{"dispatcher", "run", "--worker", "local", "--script", "echo hi"})
		if plain != (err == nil) {
			t.Errorf("plaintext=%v against a plaintext server: %v", plain, err)
		}
	}
	if len(fake.runs) != 1 || len(fake.auth) != 1 {
		t.Errorf("the plaintext server got %d requests (%v), want only the --plaintext one", len(fake.runs), fake.auth)
	}
}

// --sign-each-call (HERO_SIGN_EACH_CALL=1) asks the Go client to sign every gRPC call
// instead of its TLS connection once.
func TestSignEachCallFlag(t *testing.T) {
	t.Setenv("HERO_SIGN_EACH_CALL", "")
	for _, tc := range []struct {
		env  string
		args []string
		want bool
	}{{"", nil, false}, {"", []string{"--sign-each-call"}, true}, {"1", nil, true}} {
		t.Setenv("HERO_SIGN_EACH_CALL", tc.env)
		g, _, err := parseGlobal(append(tc.args, "version"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if g.each != tc.want {
			t.Errorf("env %q args %v: sign each call %v, want %v", tc.env, tc.args, g.each, tc.want)
		}
	}
}

// HERO_GRPC_PORT and HERO_HTTP_PORT, which move docker-compose.yml's published ports,
// move heroctl's addresses too (gRPC and `api call`'s JSON-RPC); --addr and
// --api-url still say them exactly.
func TestPortsFromEnv(t *testing.T) {
	clearHeroEnv(t)
	t.Setenv("HERO_GRPC_PORT", "19653")
	t.Setenv("HERO_HTTP_PORT", "19652")
	for _, tc := range []struct {
		args         []string
		addr, apiURL string
	}{
		{nil, "127.0.0.1:19653", "https://127.0.0.1:19652/"},
		{[]string{"--addr", "api.example:443"}, "api.example:443", "https://api.example:19652/"},
		{[]string{"--api-url", "https://api/"}, "127.0.0.1:19653", "https://api/"},
	} {
		g, _, err := parseGlobal(append(tc.args, "version"), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if g.addr != tc.addr || g.apiURL != tc.apiURL {
			t.Errorf("%v: addr %q, JSON-RPC %q; want %q, %q", tc.args, g.addr, g.apiURL, tc.addr, tc.apiURL)
		}
	}
	t.Setenv("HERO_GRPC_PORT", "x")
	if _, _, err := parseGlobal([]string{"version"}, io.Discard); err == nil || !strings.Contains(err.Error(), "HERO_GRPC_PORT") {
		t.Errorf("HERO_GRPC_PORT=x: %v", err)
	}
}
