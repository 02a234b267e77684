package mycelium

import (
	"errors"
	"fmt"
	"net/http"
)

var (
	// ErrNotFound matches an APIError with status 404 (unknown message id in
	// Status, unknown address in PublicKeyFromIP).
	ErrNotFound = errors.New("mycelium: not found")
	// ErrReplyTimeout is returned by Push when it waited for a reply and the
	// node answered 408: no reply came in time. The PushResult returned with it
	// carries the message id, so the reply can still be popped or the status
	// checked later.
	ErrReplyTimeout = errors.New("mycelium: timed out waiting for a reply")
	// ErrMalformed is returned by Pop when the node answered 200 with a message that
	// cannot be read (bad JSON, a payload that is not base64): the message is gone
	// from the node, the connection is fine.
	ErrMalformed = errors.New("mycelium: malformed message")
)

// APIError is a response from the node with a status the operation does not
// treat as success. It names the operation (the spec's operationId), the
// method and path, the status and the body's message.
type APIError struct {
	Op         string // operationId in api.yaml, e.g. "pushMessage"
	Method     string
	Path       string // the request path, e.g. "/api/v1/messages"
	StatusCode int
	Message    string // the response body (trimmed, at most 1 KiB); may be empty
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = "(empty body)"
	}
	return fmt.Sprintf("mycelium %s (%s %s): %d %s: %s",
		e.Op, e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode), msg)
}

// Is lets errors.Is(err, ErrNotFound) match a 404.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && e.StatusCode == http.StatusNotFound
}

// RequestError is a failure to talk to the node at all (connection refused,
// reset, timeout, undecodable response). It names the operation and wraps
// the cause.
type RequestError struct {
	Op     string
	Method string
	Path   string
	Err    error
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("mycelium %s (%s %s): %v", e.Op, e.Method, e.Path, e.Err)
}

func (e *RequestError) Unwrap() error { return e.Err }
