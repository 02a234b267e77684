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
	// ErrNotJSON is returned by Pop when the node answered 200 with a whole body
	// that is not JSON at all (a proxy's error page, a broken node build): no
	// message can be read from it.
	ErrNotJSON = errors.New("mycelium: 200 response body is not JSON")
	// ErrTooLarge matches a request the node refuses for its size: a 413 answer, or
	// a push that Push refuses before sending because its body would be over
	// MaxRequestBody.
	ErrTooLarge = errors.New("mycelium: request body too large for the node")
)

// Permanent reports whether err is a refusal that repeating the same request
// cannot change: the node answered 400 (bad request), 413 (body too large), 415
// or 422 (a body of the wrong shape), or the request was too large to send.
// Anything else (connection errors, 5xx, timeouts) may pass and is worth a retry.
func Permanent(err error) bool {
	if errors.Is(err, ErrTooLarge) {
		return true
	}
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

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

// Is lets errors.Is(err, ErrNotFound) match a 404 and errors.Is(err, ErrTooLarge)
// a 413.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && e.StatusCode == http.StatusNotFound ||
		target == ErrTooLarge && e.StatusCode == http.StatusRequestEntityTooLarge
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
