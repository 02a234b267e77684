package main

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// JSON-RPC error codes (docs/api.md).
const (
	codeParse            = -32700
	codeInvalidRequest   = -32600
	codeMethodNotFound   = -32601
	codeInvalidParams    = -32602
	codeInternal         = -32603
	codeUnavailable      = -32000
	codeUnauthenticated  = -32001
	codePermission       = -32003
	codeNotFound         = -32004
	codeTimeout          = -32008
	codeExists           = -32009
	codeFailedPrecondion = -32010
	codeGone             = -32011
	codeTooMany          = -32029
)

// apiError is an error with its JSON-RPC code and data.
type apiError struct {
	Code int
	Msg  string
	Data map[string]any
}

func (e *apiError) Error() string { return e.Msg }

func invalidParams(field, format string, a ...any) *apiError {
	msg := fmt.Sprintf(format, a...)
	return &apiError{Code: codeInvalidParams, Msg: "invalid params: " + msg, Data: map[string]any{"field": field}}
}

func permissionDenied(format string, a ...any) *apiError {
	return &apiError{Code: codePermission, Msg: "permission denied: " + fmt.Sprintf(format, a...)}
}

// unavailable is a Redis fault as the client sees it: retry later.
func unavailable(err error) *apiError {
	return &apiError{Code: codeUnavailable, Msg: "unavailable: the store (Redis) cannot be reached now; retry: " + err.Error(),
		Data: map[string]any{"retry_after_ms": int64(1000)}}
}

// toAPIError classifies any error the service returns.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var authErr *authError
	if errors.As(err, &authErr) {
		return &apiError{Code: codeUnauthenticated, Msg: authErr.Msg}
	}
	var tm *tooManyError
	if errors.As(err, &tm) {
		return &apiError{Code: codeTooMany, Msg: tm.Msg, Data: map[string]any{"retry_after_ms": max(1, tm.RetryAfter.Milliseconds())}}
	}
	var ve *model.ValidationError
	if errors.As(err, &ve) {
		field := ve.Field
		return &apiError{Code: codeInvalidParams, Msg: "invalid params: " + ve.Error(), Data: map[string]any{"field": field}}
	}
	var pe *store.PlanError
	if errors.As(err, &pe) {
		return &apiError{Code: codeInvalidParams, Msg: "invalid params: " + pe.Error(), Data: map[string]any{"field": "jobs"}}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &apiError{Code: codeNotFound, Msg: err.Error()}
	case errors.Is(err, store.ErrExists):
		return &apiError{Code: codeExists, Msg: err.Error()}
	case errors.Is(err, store.ErrConflict):
		return &apiError{Code: codeFailedPrecondion, Msg: err.Error()}
	case errors.Is(err, store.ErrEventsTrimmed):
		return &apiError{Code: codeGone, Msg: err.Error() + ` (reload the state and follow from "$", or read what is left from "0")`, Data: map[string]any{"field": "after"}}
	case errors.Is(err, store.ErrBadEventID):
		return &apiError{Code: codeInvalidParams, Msg: "invalid params: " + err.Error(), Data: map[string]any{"field": "after"}}
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		switch st.Code() {
		case codes.NotFound:
			return &apiError{Code: codeNotFound, Msg: st.Message()}
		case codes.InvalidArgument:
			return &apiError{Code: codeInvalidParams, Msg: "invalid params: " + st.Message(), Data: map[string]any{"field": "id"}}
		case codes.FailedPrecondition:
			return &apiError{Code: codeFailedPrecondion, Msg: st.Message()}
		case codes.Unavailable:
			return &apiError{Code: codeUnavailable, Msg: "scheduler unavailable: " + st.Message()}
		case codes.DeadlineExceeded:
			return &apiError{Code: codeTimeout, Msg: st.Message()}
		}
	}
	if fault.Transient(err) {
		return unavailable(err)
	}
	return &apiError{Code: codeInternal, Msg: "internal error: " + err.Error()}
}

// grpcCode is the gRPC code of a JSON-RPC error code (docs/api.md, Errors): the answer
// of the gRPC API, and the spelling of the code label of hero_api_requests_total on
// both transports (OK, NotFound, InvalidArgument, …).
func grpcCode(code int) codes.Code {
	switch code {
	case codeUnauthenticated:
		return codes.Unauthenticated
	case codeTooMany:
		return codes.ResourceExhausted
	case codeInvalidParams, codeInvalidRequest, codeParse:
		return codes.InvalidArgument
	case codeMethodNotFound:
		return codes.Unimplemented
	case codePermission:
		return codes.PermissionDenied
	case codeNotFound:
		return codes.NotFound
	case codeExists:
		return codes.AlreadyExists
	case codeTimeout:
		return codes.DeadlineExceeded
	case codeFailedPrecondion:
		return codes.FailedPrecondition
	case codeUnavailable:
		return codes.Unavailable
	case codeGone:
		return codes.OutOfRange
	}
	return codes.Internal
}

// grpcError maps an API error onto a gRPC status; a retry hint travels as a
// google.rpc.RetryInfo detail.
func grpcError(err error) error {
	ae := toAPIError(err)
	c := grpcCode(ae.Code)
	st := status.New(c, ae.Msg)
	if ms, ok := ae.Data["retry_after_ms"].(int64); ok {
		if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(ms) * time.Millisecond)}); err == nil {
			st = d
		}
	}
	return st.Err()
}
