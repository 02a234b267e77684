package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/hero-coordinator/hero/lib/auth"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The default of --max-connections-per-source and --max-connections.
const (
	defaultPerSource = 256
	defaultMaxConns  = 4096
)

// Acceptance (Trust IV, fair doors): one unauthenticated client on 127.0.0.1 holds
// thousands of idle connections to each public listener — more than --max-connections
// — and a client on 127.0.0.2 still completes a signed call, over JSON-RPC and gRPC:
// the flooder gets --max-connections-per-source (256) of each, its others are closed
// at once and counted by cause. A connection that never finishes its handshake, or
// sends no request, is closed after --handshake-timeout; the admin port's after its
// own 5 s.
func TestFairDoors(t *testing.T) {
	const flood = defaultMaxConns + 200
	raiseFileLimit(t, 2*flood+1024)
	s, _ := newStack(t, harness.StackOptions{APIArgs: []string{"--handshake-timeout", "3s"}})
	s.CreateActor(t, 2)
	other := s.Client(2)

	held := holdConns(t, s.API.HTTPAddr, flood, openJSONRPCIdle)
	heldGRPC := holdConns(t, s.API.GRPCAddr, flood, openGRPCIdle)
	// The harness's own clients (127.0.0.1 too) may hold a slot or two.
	for _, h := range []int{held, heldGRPC} {
		if h > defaultPerSource || h < defaultPerSource-4 {
			t.Errorf("127.0.0.1 holds %d JSON-RPC and %d gRPC connections of the %d it opened to each; want %d of each (--max-connections-per-source) less the harness's own",
				held, heldGRPC, flood, defaultPerSource)
		}
	}
	if err := signedCallFrom(other, "127.0.0.2"); err != nil {
		t.Fatalf("JSON-RPC from 127.0.0.2 while 127.0.0.1 floods: %v", err)
	}
	if err := signedGRPCCallFrom(other, "127.0.0.2"); err != nil {
		t.Fatalf("gRPC from 127.0.0.2 while 127.0.0.1 floods: %v", err)
	}
	for _, listener := range []string{"jsonrpc", "grpc"} {
		series := fmt.Sprintf(`hero_listener_connections_refused_total{cause="per_source",listener=%q}`, listener)
		if v := metricValue(t, s.API.AdminAddr, series); v < flood-defaultPerSource {
			t.Errorf("%s = %v, want at least %d", series, v, flood-defaultPerSource)
		}
	}
	resp, err := http.Get("http://" + s.API.AdminAddr + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz during the flood: %v %v", resp, err)
	}
	_ = resp.Body.Close()

	checkHandshakeTimeouts(t, s)
}

// raiseFileLimit raises the test process's open-file limit to its hard limit (the
// services it starts inherit it) and fails the test when that is below need.
func raiseFileLimit(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	if lim.Cur < need {
		t.Fatalf("this test needs %d open files; the hard limit (ulimit -Hn) is %d", need, lim.Max)
	}
}

// holdConns opens n connections from 127.0.0.1 to addr, eight at a time, takes each
// as far as open does (an unauthenticated client's idle connection), keeps those the
// server kept until the test ends and returns their number; the others (closed by the
// server) are closed at once.
func holdConns(t *testing.T, addr string, n int, open func(net.Conn) error) int {
	t.Helper()
	var next, held atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Timeout: 10 * time.Second}
			for next.Add(1) <= int64(n) {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				if err := open(c); err != nil {
					_ = c.Close()
					continue
				}
				_ = c.SetDeadline(time.Time{})
				held.Add(1)
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return int(held.Load())
}

// attackerTLS is the flooder's TLS: it verifies nothing.
func attackerTLS(c net.Conn, proto string) *tls.Conn {
	return tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}}) //nolint:gosec // the flooder trusts anything
}

// openJSONRPCIdle makes one unauthenticated JSON-RPC request and leaves the
// connection open and idle (kept alive: --http-idle-timeout, 60 s).
func openJSONRPCIdle(c net.Conn) error {
	tc := attackerTLS(c, "http/1.1")
	if err := tc.Handshake(); err != nil {
		return err
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"actor.load","params":{"id":1}}`
	if _, err := fmt.Fprintf(tc, "POST / HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.Close {
		return fmt.Errorf("the server closes the connection after %s", resp.Status)
	}
	return nil
}

// openGRPCIdle finishes the TLS handshake and HTTP/2's (the client preface and an
// empty SETTINGS frame), reads the server's first frame and makes no call: an idle
// connection until the server's idle limit (5 minutes).
func openGRPCIdle(c net.Conn) error {
	tc := attackerTLS(c, "h2")
	if err := tc.Handshake(); err != nil {
		return err
	}
	if _, err := io.WriteString(tc, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		return err
	}
	header := make([]byte, 9)
	if _, err := io.ReadFull(tc, header); err != nil {
		return err
	}
	if header[3] != 0x4 { // SETTINGS
		return fmt.Errorf("the server's first frame is of type %d, not SETTINGS", header[3])
	}
	return nil
}

// fromDialer dials from the local address src.
func fromDialer(src string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
}

// signedCallFrom makes a signed JSON-RPC call (actor.load) as c from src.
func signedCallFrom(c *harness.Client, src string) error {
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: harness.APITLS(), DialContext: fromDialer(src).DialContext}}
	defer hc.CloseIdleConnections()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "actor.load", "params": map[string]any{"id": c.Actor}})
	req, err := c.NewRequest(body)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var r struct {
		Result json.RawMessage   `json:"result"`
		Error  *harness.RPCError `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %v", resp.Status, err)
	}
	if r.Error != nil {
		return r.Error
	}
	return nil
}

// signedGRPCCallFrom makes a signed gRPC call (GetActor, the connection's session
// signature) as c from src.
func signedGRPCCallFrom(c *harness.Client, src string) error {
	creds := harness.APICredentials()
	opts := append(auth.SessionDialOptions(c.Signer(), creds), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return fromDialer(src).DialContext(ctx, "tcp", addr)
	}))
	cc, err := grpc.NewClient(c.GRPCAddr, opts...)
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = herov1.NewCoordinatorClient(cc).GetActor(ctx, &herov1.GetActorRequest{Id: c.Actor})
	return err
}

// checkHandshakeTimeouts: a connection that stops before its TLS handshake, or after
// it without a request (JSON-RPC) or the HTTP/2 preface (gRPC), is closed by the
// server (--handshake-timeout 3s); so is a silent one on the admin port (5 s).
func checkHandshakeTimeouts(t *testing.T, s *harness.Stack) {
	t.Helper()
	cases := []struct {
		name, addr string
		open       func(net.Conn) net.Conn
	}{
		{"JSON-RPC, no TLS handshake", s.API.HTTPAddr, nil},
		{"JSON-RPC, no request", s.API.HTTPAddr, func(c net.Conn) net.Conn { return handshaken(t, c, "http/1.1") }},
		{"gRPC, no TLS handshake", s.API.GRPCAddr, nil},
		{"gRPC, no HTTP/2 preface", s.API.GRPCAddr, func(c net.Conn) net.Conn { return handshaken(t, c, "h2") }},
		{"admin, no request", s.API.AdminAddr, nil},
	}
	var wg sync.WaitGroup
	for _, tc := range cases {
		c, err := fromDialer("127.0.0.3").Dial("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		var r net.Conn = c
		if tc.open != nil {
			r = tc.open(c)
		}
		wg.Go(func() {
			// A minute is the safety net: the server closes it after its timeout.
			_ = r.SetReadDeadline(time.Now().Add(time.Minute))
			_, err := io.Copy(io.Discard, r)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("%s: not closed by the server within a minute", tc.name)
			}
		})
	}
	wg.Wait()
}

// handshaken finishes c's TLS handshake (ALPN proto) and returns the TLS connection.
func handshaken(t *testing.T, c net.Conn, proto string) net.Conn {
	t.Helper()
	tc := attackerTLS(c, proto)
	_ = tc.SetDeadline(time.Now().Add(20 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	return tc
}
