package hero

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The kinds of failure; test with errors.Is(err, hero.ErrNotFound).
var (
	ErrNotFound         = errors.New("not found")
	ErrPermissionDenied = errors.New("permission denied")
	ErrUnauthenticated  = errors.New("unauthenticated")
	ErrInvalidArgument  = errors.New("invalid argument")
	ErrConflict         = errors.New("conflict") // exists already, or not in a state that allows the call
	ErrUnavailable      = errors.New("unavailable")
	ErrRateLimited      = errors.New("rate limited")
	ErrTimeout          = errors.New("timed out")
	ErrCancelled        = errors.New("cancelled")
	ErrInternal         = errors.New("internal error")
	// ErrTLS: the TLS handshake with the API failed for a reason that trying again
	// does not change: its certificate is not trusted (another CA's, another host's,
	// expired), it refused ours, or it does not speak TLS. Not retried.
	ErrTLS = errors.New("TLS handshake with the API failed")
)

// Error is a failed call: its kind (one of the Err* values), the gRPC code and the
// API's message (for an invalid argument, it names the field).
type Error struct {
	Kind    error
	Code    codes.Code
	Message string
	status  *status.Status
}

func (e *Error) Error() string { return e.Kind.Error() + ": " + e.Message }

// Unwrap lets errors.Is match the kind.
func (e *Error) Unwrap() error { return e.Kind }

// GRPCStatus keeps the gRPC status reachable (status.FromError, status.Code).
func (e *Error) GRPCStatus() *status.Status { return e.status }

var kinds = map[codes.Code]error{
	codes.NotFound:           ErrNotFound,
	codes.PermissionDenied:   ErrPermissionDenied,
	codes.Unauthenticated:    ErrUnauthenticated,
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.OutOfRange:         ErrInvalidArgument,
	codes.AlreadyExists:      ErrConflict,
	codes.FailedPrecondition: ErrConflict,
	codes.Aborted:            ErrConflict,
	codes.Unavailable:        ErrUnavailable,
	codes.ResourceExhausted:  ErrRateLimited,
	codes.DeadlineExceeded:   ErrTimeout,
	codes.Canceled:           ErrCancelled,
}

// wrap turns a gRPC error into an *Error (nil stays nil; an *Error stays as it is).
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	kind, ok := kinds[st.Code()]
	switch {
	case tlsRefused(err):
		kind = ErrTLS
	case !ok:
		kind = ErrInternal
	}
	return &Error{Kind: kind, Code: st.Code(), Message: st.Message(), status: st}
}

// tlsRefused says whether err is a TLS handshake with the API that failed for good:
// a certificate that does not verify, a TLS alert from the server, or a server that
// does not speak TLS (a handshake cut short, EOF, is not: the server may have been at
// its connection cap). gRPC gives the handshake's error as text only, inside an
// Unavailable status ("transport: authentication handshake failed: …").
func tlsRefused(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		alert   tls.AlertError
		record  tls.RecordHeaderError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	if errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &record) ||
		errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	_, handshake, found := strings.Cut(st.Message(), "authentication handshake failed")
	if !found {
		return false
	}
	for _, s := range []string{"x509: ", "tls: failed to verify", "first record does not look like a TLS handshake", "remote error: tls: "} {
		if strings.Contains(handshake, s) {
			return true
		}
	}
	return false
}

// Unreachable says whether a call failed because the API could not be reached at all:
// nothing listens at its address (connection refused), or its host name does not
// resolve. A daemon that is not running, or the wrong address; one that restarts
// gives the same for a moment (see Config.FailFastUnreachable).
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var dns *net.DNSError
	if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns) && dns.IsNotFound {
		return true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	// gRPC gives the dial's error as text only: `connection error: desc = "transport:
	// Error while dialing: dial tcp 127.0.0.1:9653: connect: connection refused"`, and
	// a name that does not resolve as "name resolver error: produced zero addresses".
	msg := st.Message()
	_, dial, found := strings.Cut(msg, "Error while dialing")
	return found && (strings.Contains(dial, "connection refused") || strings.Contains(dial, "no such host")) ||
		strings.HasPrefix(msg, "name resolver error: produced zero addresses")
}
