package grpcx

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/net/http2"

	"github.com/hero-coordinator/hero/lib/testutil/h2frames"
)

// A server announces the fixed flow-control windows (StreamWindow in its SETTINGS,
// ConnWindow through a WINDOW_UPDATE of the connection) instead of gRPC's 64 KiB
// start, from which it would estimate the bandwidth-delay product with a PING for
// about every message received.
func TestServerAnnouncesFixedWindows(t *testing.T) {
	s, err := NewServer("127.0.0.1:0", prometheus.NewRegistry(), zerolog.Nop(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.ListenAndServe() }()
	defer s.Shutdown(context.Background())
	conn, err := net.DialTimeout("tcp", s.Addr(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	window, connWindow, err := h2frames.Windows(fr)
	if err != nil {
		t.Fatal(err)
	}
	if window != StreamWindow {
		t.Errorf("stream window %d; want %d", window, StreamWindow)
	}
	if connWindow != ConnWindow-65535 {
		t.Errorf("connection window raised by %d; want %d (to %d)", connWindow, ConnWindow-65535, ConnWindow)
	}
}
