package netx

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// serveLimited listens on a local port with the bounds of o and hands out what it
// accepts and the causes of what it refuses, until the test ends.
func serveLimited(t *testing.T, o Options) (*Limited, chan net.Conn, chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan string, 16)
	o.OnReject = func(cause string) { refused <- cause }
	lim := Limit(ln, o)
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := lim.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { _ = lim.Close() })
	return lim, accepted, refused
}

// Over the cap a new connection is answered at once and closed; the accepted one is
// served; once it closes, its slot is free again.
func TestLimitRefusesOverTheCapAndFreesSlots(t *testing.T) {
	lim, accepted, refused := serveLimited(t, Options{Max: 1, Reject: RejectHTTP})
	ln := lim.Listener

	first, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	served := <-accepted
	second, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = second.SetReadDeadline(time.Now().Add(time.Minute))
	line, err := bufio.NewReader(second).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("over the cap: %q %v", line, err)
	}
	if cause := <-refused; cause != CauseMax {
		t.Fatalf("refused for %q, want %q", cause, CauseMax)
	}
	if lim.Open() != 1 {
		t.Fatalf("open = %d, want 1", lim.Open())
	}
	// The accepted connection still works.
	if _, err := first.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	_ = served.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := served.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("served connection: %v", err)
	}
	// Closing it (twice) frees exactly one slot.
	_ = served.Close()
	_ = served.Close()
	if lim.Open() != 0 {
		t.Fatalf("open after close = %d", lim.Open())
	}
	third, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = third.Close() }()
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(time.Minute):
		t.Fatal("a connection after the slot was freed was not accepted")
	}
	_ = first.Close()
	_ = second.Close()
}

// dialFrom connects to addr from the local address src (any 127.0.0.0/8 address is
// the loopback's).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedAtOnce says whether the server closed c without a word.
func closedAtOnce(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := c.Read(make([]byte, 1))
	return err == io.EOF
}

// One source over its bound is refused while another source is accepted, even with
// the first holding more than the listener's share; a closed connection frees its
// source's slot.
func TestLimitBoundsEachSource(t *testing.T) {
	lim, accepted, refused := serveLimited(t, Options{Max: 8, PerSource: 3})
	addr := lim.Addr().String()
	var held []net.Conn
	for range 3 {
		dialFrom(t, "127.0.0.1", addr)
		held = append(held, <-accepted)
	}
	for range 4 {
		if c := dialFrom(t, "127.0.0.1", addr); !closedAtOnce(c) {
			t.Fatal("a fourth connection of 127.0.0.1 was not closed at once")
		}
		if cause := <-refused; cause != CausePerSource {
			t.Fatalf("refused for %q, want %q", cause, CausePerSource)
		}
	}
	dialFrom(t, "127.0.0.2", addr)
	select {
	case c := <-accepted:
		defer func() { _ = c.Close() }()
	case <-time.After(time.Minute):
		t.Fatal("127.0.0.2 was not accepted while 127.0.0.1 was over its bound")
	}
	if lim.Open() != 4 {
		t.Fatalf("open = %d, want 4", lim.Open())
	}
	_ = held[0].Close()
	dialFrom(t, "127.0.0.1", addr)
	select {
	case c := <-accepted:
		defer func() { _ = c.Close() }()
	case <-time.After(time.Minute):
		t.Fatal("127.0.0.1 was not accepted again after one of its connections closed")
	}
	for _, c := range held[1:] {
		_ = c.Close()
	}
}

// An IPv4 address is its own source (also IPv4-mapped); IPv6 addresses count by /64.
func TestSource(t *testing.T) {
	for _, tc := range []struct{ ip, want string }{
		{"192.0.2.7", "192.0.2.7"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"},
		{"2001:db8:1:2::1", "2001:db8:1:2::"},
		{"2001:db8:1:3::1", "2001:db8:1:3::"},
		{"::1", "::"},
	} {
		got, ok := Source(&net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 1})
		if !ok || got.String() != tc.want {
			t.Errorf("Source(%s) = %v, %v; want %s", tc.ip, got, ok, tc.want)
		}
	}
	if _, ok := Source(&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}); ok {
		t.Error("a Unix socket has a source")
	}
}

// Refused counts by listener and cause in one metric, whichever listener registers
// first; its series exist at 0.
func TestRefusedMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	grpcRefused, err := Refused(reg, "grpc")
	if err != nil {
		t.Fatal(err)
	}
	adminRefused, err := Refused(reg, "admin")
	if err != nil {
		t.Fatal(err)
	}
	grpcRefused(CausePerSource)
	grpcRefused(CausePerSource)
	adminRefused(CauseMax)
	want := `
# HELP hero_listener_connections_refused_total Connections a listener (grpc, jsonrpc, admin) closed at once, by cause: max_connections (--max-connections were open) or per_source (--max-connections-per-source of its source address were open).
# TYPE hero_listener_connections_refused_total counter
hero_listener_connections_refused_total{cause="max_connections",listener="admin"} 1
hero_listener_connections_refused_total{cause="max_connections",listener="grpc"} 0
hero_listener_connections_refused_total{cause="per_source",listener="admin"} 0
hero_listener_connections_refused_total{cause="per_source",listener="grpc"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
