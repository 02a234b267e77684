package executor

import (
	"errors"
	"fmt"
	"time"
)

// A handler returns one of these errors to choose the outcome; any other error gives
// status "error" with type "handler_error".

// RetryError asks the orchestrator to retry the job: status "retry", with
// retry_after_seconds when After > 0.
type RetryError struct {
	After time.Duration
	Err   error // optional reason, reported as error.message
}

// Retry returns a RetryError; reason may be nil.
func Retry(after time.Duration, reason error) error { return &RetryError{After: after, Err: reason} }

func (e *RetryError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("retry after %v: %v", e.After, e.Err)
	}
	return fmt.Sprintf("retry after %v", e.After)
}

func (e *RetryError) Unwrap() error { return e.Err }

// TimeoutError reports that the handler timed itself out: status "timeout".
type TimeoutError struct{ Err error }

// Timeout returns a TimeoutError; reason may be nil.
func Timeout(reason error) error { return &TimeoutError{Err: reason} }

func (e *TimeoutError) Error() string {
	if e.Err != nil {
		return "timeout: " + e.Err.Error()
	}
	return "timeout"
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// Error is a failure with an explicit error type, code and details: status "error".
// Type "handler_not_found" is reserved by the protocol (fatal, straight to the DLQ).
type Error struct {
	Type    string
	Code    string
	Message string
	Details any // encoded as JSON; nil for none
	Err     error
}

// Fail returns an *Error with the given type, code and message.
func Fail(typ, code, message string) *Error { return &Error{Type: typ, Code: code, Message: message} }

// WithDetails sets Details and returns e.
func (e *Error) WithDetails(details any) *Error { e.Details = details; return e }

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	if e.Type != "" {
		return e.Type + ": " + msg
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorTypeHandler is the error type of an ordinary handler error.
const ErrorTypeHandler = "handler_error"

// ErrorTypePanic is the error type of a handler that panicked.
const ErrorTypePanic = "panic"

// ErrorTypeInvalidRequest is the error type of a request the executor cannot run
// (unsupported protocol_version, missing fields).
const ErrorTypeInvalidRequest = "invalid_request"

// ErrorTypeBadResult is the error type of a result that cannot be encoded as JSON.
const ErrorTypeBadResult = "result_not_serializable"

// errCancelFrame is the cancel cause of a task cancelled by a cancel frame.
var errCancelFrame = errors.New("cancelled by the orchestrator")

// errShutdown is the cancel cause of tasks running when the executor shuts down.
var errShutdown = errors.New("executor shutting down")
