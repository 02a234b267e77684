package hero

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// refusedStatus is gRPC's error for a connection nothing accepted.
var refusedStatus = status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:9: connect: connection refused"`)

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{refusedStatus, true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp: lookup nowhere.invalid: no such host"`), true},
		{status.Error(codes.Unavailable, `name resolver error: produced zero addresses`), true},
		{fmt.Errorf("%w: cannot reach the JSON-RPC API at https://127.0.0.1:9/: %w", ErrUnavailable, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{status.Error(codes.Unavailable, `unavailable: the store (Redis) cannot be reached now; retry: dial tcp 10.0.0.9:6379: connect: connection refused`), false},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`), false},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.1.2.3:9653: i/o timeout"`), false},
		{nil, false},
	} {
		if got := Unreachable(tc.err); got != tc.want {
			t.Errorf("Unreachable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// With FailFastUnreachable a client that never reached the API tries an unreachable
// one once; after it reached it (a restart), and without the option, it tries again.
func TestFailFastUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// attempts makes calls that fail unreachable `fails` times, then succeed.
	attempts := func(c *Client, fails int) (int, error) {
		n := 0
		err := c.retrying(ctx, true, func() error {
			n++
			if n <= fails {
				return refusedStatus
			}
			return nil
		})
		return n, err
	}
	fast := &Client{cfg: Config{FailFastUnreachable: true}}
	if n, err := attempts(fast, 2); n != 1 || !Unreachable(err) {
		t.Errorf("never reached, fail fast: %d attempts (want 1), %v", n, err)
	}
	fast.reached.Store(true)
	if n, err := attempts(fast, 2); n != 3 || err != nil {
		t.Errorf("reached before, fail fast: %d attempts (want 3), %v", n, err)
	}
	if n, err := attempts(&Client{}, 2); n != 3 || err != nil {
		t.Errorf("without the option: %d attempts (want 3), %v", n, err)
	}

	// gRPC's own error for a port nothing listens on is recognised, and not retried.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(Config{Addr: addr, APIURL: "http://" + addr + "/", Plaintext: true, AdminSecret: "s3cret-s3cret-s3cret", FailFastUnreachable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.GetFlow(ctx, 1); !Unreachable(err) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("GetFlow at %s, where nothing listens: %v, want unreachable", addr, err)
	}
	if _, err := c.Call(ctx, "flow.load", map[string]any{"context_id": 1, "id": 1}); !Unreachable(err) {
		t.Errorf("Call at %s, where nothing listens: %v, want unreachable", addr, err)
	}
}
