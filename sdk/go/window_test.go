package hero

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/hero-coordinator/hero/lib/testutil/h2frames"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// The client's connection announces fixed flow-control windows (streamWindow in its
// SETTINGS, connWindow through a WINDOW_UPDATE of the connection) instead of gRPC's
// 64 KiB start, from which it would estimate the bandwidth-delay product with a PING
// for about every answer it receives.
func TestDialFixesFlowControlWindows(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	c, err := Dial(Config{Addr: ln.Addr().String(), AdminSecret: "secret", Plaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	called := make(chan struct{})
	go func() { // the call that makes the client connect
		defer close(called)
		_, _ = c.API().GetContext(ctx, &herov1.GetContextRequest{Id: 1})
	}()
	defer func() { cancel(); <-called }()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(conn, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("the client's preface %q: %v", preface, err)
	}
	fr := http2.NewFramer(conn, conn)
	gotStream, gotConn, err := h2frames.Windows(fr)
	if err != nil {
		t.Fatal(err)
	}
	if gotStream != streamWindow {
		t.Errorf("stream window %d; want %d", gotStream, streamWindow)
	}
	if gotConn != connWindow-65535 {
		t.Errorf("connection window raised by %d; want %d (to %d)", gotConn, connWindow-65535, connWindow)
	}
}
