package hero

import (
	"crypto/x509"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A handshake that failed for good is ErrTLS and not retried; one cut short (the
// server at its connection cap closed it: EOF), or the server's own Unavailable
// naming a TLS problem of its Redis, stays transient.
func TestTLSRefused(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`), true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: EOF"`), false},
		{status.Error(codes.Unavailable, `unavailable: the store (Redis) cannot be reached now; retry: tls: failed to verify certificate: x509: certificate has expired`), false},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:9653: connect: connection refused"`), false},
		{fmt.Errorf("post: %w", x509.UnknownAuthorityError{}), true},
		{errors.New("connection refused"), false},
	} {
		if got := tlsRefused(tc.err); got != tc.want {
			t.Errorf("tlsRefused(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if tc.want && (Retryable(tc.err) || !errors.Is(wrap(tc.err), ErrTLS) && status.Code(tc.err) == codes.Unavailable) {
			t.Errorf("%v: retryable %v, kind %v", tc.err, Retryable(tc.err), wrap(tc.err))
		}
	}
}
