package hero

import (
	"errors"

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
	if !ok {
		kind = ErrInternal
	}
	return &Error{Kind: kind, Code: st.Code(), Message: st.Message(), status: st}
}
