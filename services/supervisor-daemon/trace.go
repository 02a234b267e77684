package main

import (
	"context"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A producer hands its trace in with a W3C traceparent: the HTTP header on JSON-RPC,
// the metadata key on gRPC. The transports validate it for every method, before the
// method runs (a malformed one refuses the request, storing nothing), and put it in
// the request's context; whatever creates a job or a flow (createJob, createFlow,
// flow.start) stores it there, so methods added later carry it too.

type traceparentKey struct{}

// withTraceparent validates the traceparent values of a request (none, or exactly
// one) and returns ctx carrying it.
func withTraceparent(ctx context.Context, values []string) (context.Context, *apiError) {
	if len(values) == 0 {
		return ctx, nil
	}
	if len(values) > 1 {
		return nil, invalidParams(model.TraceparentHeader, "the %s header is given %d times; give it once", model.TraceparentHeader, len(values))
	}
	tp, err := model.ParseTraceparent(values[0])
	if err != nil {
		return nil, invalidParams(model.TraceparentHeader, "the %s header is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>): %v", model.TraceparentHeader, err)
	}
	return context.WithValue(ctx, traceparentKey{}, tp.String()), nil
}

// traceparentOf returns the request's validated traceparent ("" when none).
func traceparentOf(ctx context.Context) string {
	tp, _ := ctx.Value(traceparentKey{}).(string)
	return tp
}

// createJob stores a submitted job, with the request's traceparent.
func (s *service) createJob(ctx context.Context, j *model.Job, actor string) (*model.Job, bool, error) {
	if tp := traceparentOf(ctx); tp != "" {
		j.Traceparent = tp
	}
	return s.store.CreateJob(ctx, j, actor)
}

// createFlow stores a submitted flow, with the request's traceparent.
func (s *service) createFlow(ctx context.Context, f *model.Flow, actor string) (*model.Flow, bool, error) {
	if tp := traceparentOf(ctx); tp != "" {
		f.Traceparent = tp
	}
	return s.store.CreateFlow(ctx, f, actor)
}

// traceFlow gives the jobs of a flow about to start its trace: the request's
// traceparent (stored on the flow too), else the one flow.create stored.
func traceFlow(ctx context.Context, db *store.DB, f *model.Flow) error {
	tp := traceparentOf(ctx)
	if tp == "" {
		tp = f.Traceparent
	}
	if tp == "" || f.Status != model.FlowDispatched {
		return nil
	}
	return db.SetFlowTraceparent(ctx, f, tp)
}
