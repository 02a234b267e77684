package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/protoconv"
	"github.com/hero-coordinator/hero/lib/store"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

type principalKey struct{}

// waitingCalls are the gRPC methods that wait (each holds one of the caller's waiting
// slots while it runs).
var waitingCalls = map[string]bool{
	"/hero.v1.Coordinator/RunJob": true, "/hero.v1.Coordinator/WaitFlow": true, "/hero.v1.Coordinator/Watch": true,
	"/hero.v1.Dispatcher/RunJob": true,
}

// authInterceptors authenticate every call of the public services (hero.v1) from its
// metadata and the digest of its request message as received (codec): the same check
// the JSON-RPC side makes, or a session signature of the call's TLS connection
// (hero-session). A stream is authenticated with its opening message.
func authInterceptors(a *authenticator, l *callerLimits, codec *auth.DigestCodec, m *apiMetrics) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	api := func(full string) bool { return strings.HasPrefix(full, "/hero.v1.") }
	check := func(ctx context.Context, full string, msg any) (context.Context, func(), credentials, error) {
		digest, ok := codec.TakeDigest(msg)
		if !ok {
			return nil, nil, credentials{}, status.Error(codes.Internal, "authentication: the request's digest is missing")
		}
		md, _ := metadata.FromIncomingContext(ctx)
		get := func(k string) string {
			if v := md.Get(k); len(v) > 0 {
				return v[0]
			}
			return ""
		}
		c := credentials{transport: "grpc", target: full, digest: digest, authorization: get("authorization"), session: get(auth.MetadataSession),
			signed: auth.Credentials{Actor: get(auth.MetadataActor), Timestamp: get(auth.MetadataTimestamp), Nonce: get(auth.MetadataNonce), Signature: get(auth.MetadataSignature)}}
		pr, _ := peer.FromContext(ctx)
		if pr != nil && pr.Addr != nil {
			c.peer = pr.Addr.String()
		}
		if c.session != "" {
			c.binding = bindingOf(pr)
		}
		p, err := a.authenticate(ctx, c)
		if err != nil {
			return nil, nil, c, grpcError(err)
		}
		ctx, tperr := withTraceparent(ctx, md.Get(model.TraceparentHeader))
		if tperr != nil {
			return nil, nil, c, grpcError(tperr)
		}
		if err := l.allow(p.key(), 1); err != nil {
			return nil, nil, c, grpcError(err)
		}
		release := func() {}
		if waitingCalls[full] {
			if release, err = l.wait(p.key()); err != nil {
				return nil, nil, c, grpcError(err)
			}
		}
		return context.WithValue(ctx, principalKey{}, p), release, c, nil
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		if !api(info.FullMethod) {
			codec.Forget(req)
			return handler(ctx, req)
		}
		start := time.Now()
		defer func() { m.observe("grpc", path.Base(info.FullMethod), status.Code(err).String(), start) }()
		ctx, release, _, err := check(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		defer release()
		return handler(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		if !api(info.FullMethod) {
			return handler(srv, ss)
		}
		if !itemStreams[info.FullMethod] { // those observe each item instead
			start := time.Now()
			defer func() { m.observe("grpc", path.Base(info.FullMethod), status.Code(err).String(), start) }()
		}
		ws := &authStream{ServerStream: ss, codec: codec, open: func(ctx context.Context, msg any) (context.Context, func(), error) {
			return openAuthStream(ctx, a, info.FullMethod, msg, check)
		}}
		ws.ctx.Store(ss.Context())
		defer ws.release()
		return handler(srv, ws)
	}
	return unary, stream
}

// openAuthStream authenticates a stream's opening message (check) and registers the
// stream with the authenticator, which ends its context when its caller's rights
// change (revoke.go).
func openAuthStream(ctx context.Context, a *authenticator, full string, msg any,
	check func(ctx context.Context, full string, msg any) (context.Context, func(), credentials, error)) (context.Context, func(), error) {
	seen := a.streams.changes.Load()
	ctx, release, c, err := check(ctx, full, msg)
	if err != nil {
		return nil, nil, err
	}
	ctx, s, remove := a.streams.add(ctx, principal(ctx), c)
	if a.streams.changes.Load() != seen {
		// A change was told while the stream was being authenticated: it may have
		// been checked against what the change replaced.
		a.recheck("a change during the stream's opening", []*openStream{s})
	}
	return ctx, func() { remove(); release() }, nil
}

// bindingOf is what binds a session signature to the call's connection: the TLS
// exporter value of the connection the call came on.
func bindingOf(pr *peer.Peer) connBinding {
	if pr == nil {
		return connBinding{}
	}
	ekm, isTLS, err := auth.ConnExporter(pr.AuthInfo)
	if !isTLS {
		return connBinding{}
	}
	return connBinding{tls: true, exporter: ekm, err: err}
}

// authStream authenticates a stream on its opening message; later messages only
// have their digests dropped. Its context, from the opening on, carries the principal
// and ends when the caller's rights are revoked (streamRevoked). Its messages may be
// received in another goroutine than the handler's (SubmitJobStream).
type authStream struct {
	grpc.ServerStream
	ctx    atomic.Value // context.Context
	codec  *auth.DigestCodec
	open   func(ctx context.Context, msg any) (context.Context, func(), error)
	opened bool // by the receiving goroutine only

	mu       sync.Mutex
	released func() // what the opening holds (its registration, a waiting slot)
	ended    bool   // the handler returned
}

func (s *authStream) Context() context.Context { return s.ctx.Load().(context.Context) }

func (s *authStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.opened {
		s.codec.Forget(m)
		return nil
	}
	ctx, release, err := s.open(s.Context(), m)
	if err != nil {
		return err
	}
	s.mu.Lock()
	ended := s.ended
	if !ended {
		s.released = release
	}
	s.mu.Unlock()
	if ended { // the handler gave up meanwhile
		release()
		return status.Error(codes.Canceled, "the stream has ended")
	}
	s.opened = true
	s.ctx.Store(ctx)
	return nil
}

// release lets go of what the opening holds, once the handler has returned.
func (s *authStream) release() {
	s.mu.Lock()
	r := s.released
	s.released, s.ended = nil, true
	s.mu.Unlock()
	if r != nil {
		r()
	}
}

func principal(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// coordinatorServer serves hero.v1.Coordinator on top of the service.
type coordinatorServer struct {
	herov1.UnimplementedCoordinatorServer
	s      *service
	limits *callerLimits // each item of a SubmitJobStream after its opening one
	// batches observes the items of each batch message of a SubmitJobStream, by
	// direction ("received", "sent"); nil: not observed
	batches *prometheus.HistogramVec
}

func call[R any](ctx context.Context, fn func(context.Context, Principal) (R, error)) (R, error) {
	r, err := fn(ctx, principal(ctx))
	if err != nil {
		var zero R
		return zero, grpcError(err)
	}
	return r, nil
}

func jobInFromPB(j *herov1.Job) *jobIn {
	if j == nil {
		return nil
	}
	return &jobIn{ID: j.Id, CallerID: j.CallerId, ContextID: j.ContextId, Script: j.Script, ScriptType: j.ScriptType, Timeout: j.Timeout,
		Retries: j.Retries, EnvVars: j.EnvVars, Prerequisites: j.Prerequisites, Dependends: j.Dependends, RunnerID: j.RunnerId,
		FunctionName: j.FunctionName, Args: json.RawMessage(j.Args), Kwargs: json.RawMessage(j.Kwargs), Limits: protoconv.LimitsFromPB(j.Limits)}
}

func (c *coordinatorServer) CreateActor(ctx context.Context, r *herov1.CreateActorRequest) (*herov1.CreateActorResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateActorResponse, error) {
		var in actorCreateParams
		if r.Actor != nil {
			in.Actor = &actorIn{ID: r.Actor.Id, Pubkey: r.Actor.Pubkey, Address: r.Actor.Address}
		}
		a, err := c.s.actorCreate(ctx, p, in)
		return &herov1.CreateActorResponse{Actor: protoconv.ActorToPB(a)}, err
	})
}

func (c *coordinatorServer) GetActor(ctx context.Context, r *herov1.GetActorRequest) (*herov1.GetActorResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetActorResponse, error) {
		a, err := c.s.actorLoad(ctx, p, idParams{ID: r.Id})
		return &herov1.GetActorResponse{Actor: protoconv.ActorToPB(a)}, err
	})
}

func (c *coordinatorServer) UpdateActor(ctx context.Context, r *herov1.UpdateActorRequest) (*herov1.UpdateActorResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.UpdateActorResponse, error) {
		in := actorUpdateParams{ID: r.Id, Pubkey: r.Pubkey}
		if r.Address != nil {
			in.Address = &r.Address.Values
		}
		a, err := c.s.actorUpdate(ctx, p, in)
		return &herov1.UpdateActorResponse{Actor: protoconv.ActorToPB(a)}, err
	})
}

func secretToPB(v secretView) *herov1.OperatorSecret {
	return &herov1.OperatorSecret{Fingerprint: v.Fingerprint, Source: v.Source, CreatedAtMs: v.CreatedAtMs, RevokedAtMs: v.RevokedAtMs, Reason: v.Reason, Current: v.Current}
}

func (c *coordinatorServer) ListOperatorSecrets(ctx context.Context, _ *herov1.ListOperatorSecretsRequest) (*herov1.ListOperatorSecretsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListOperatorSecretsResponse, error) {
		res, err := c.s.secretList(ctx, p, noParams{})
		if err != nil {
			return nil, err
		}
		out := &herov1.ListOperatorSecretsResponse{}
		for _, v := range res.Items {
			out.Items = append(out.Items, secretToPB(v))
		}
		return out, nil
	})
}

func (c *coordinatorServer) CreateOperatorSecret(ctx context.Context, _ *herov1.CreateOperatorSecretRequest) (*herov1.CreateOperatorSecretResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateOperatorSecretResponse, error) {
		res, err := c.s.secretCreate(ctx, p, noParams{})
		if err != nil {
			return nil, err
		}
		return &herov1.CreateOperatorSecretResponse{Fingerprint: res.Fingerprint, Secret: res.Secret}, nil
	})
}

func (c *coordinatorServer) RevokeOperatorSecret(ctx context.Context, r *herov1.RevokeOperatorSecretRequest) (*herov1.RevokeOperatorSecretResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.RevokeOperatorSecretResponse, error) {
		v, err := c.s.secretRevoke(ctx, p, secretRevokeParams{Fingerprint: r.Fingerprint})
		if err != nil {
			return nil, err
		}
		return &herov1.RevokeOperatorSecretResponse{Secret: secretToPB(*v)}, nil
	})
}

func (c *coordinatorServer) CreateContext(ctx context.Context, r *herov1.CreateContextRequest) (*herov1.CreateContextResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateContextResponse, error) {
		var in contextCreateParams
		if r.Context != nil {
			in.Context = &contextIn{ID: r.Context.Id, Admins: r.Context.Admins, Readers: r.Context.Readers, Executors: r.Context.Executors, RetentionSeconds: r.Context.RetentionSeconds, AllowedSources: r.Context.AllowedSources,
				JobDefaults: protoconv.LimitsFromPB(r.Context.JobDefaults), JobMax: protoconv.LimitsFromPB(r.Context.JobMax)}
		}
		x, err := c.s.contextCreate(ctx, p, in)
		return &herov1.CreateContextResponse{Context: protoconv.ContextToPB(x)}, err
	})
}

func (c *coordinatorServer) GetContext(ctx context.Context, r *herov1.GetContextRequest) (*herov1.GetContextResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetContextResponse, error) {
		x, err := c.s.contextLoad(ctx, p, idParams{ID: r.Id})
		return &herov1.GetContextResponse{Context: protoconv.ContextToPB(x)}, err
	})
}

func (c *coordinatorServer) UpdateContext(ctx context.Context, r *herov1.UpdateContextRequest) (*herov1.UpdateContextResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.UpdateContextResponse, error) {
		in := contextUpdateParams{ID: r.Id, RetentionSeconds: r.RetentionSeconds}
		ids := func(l *herov1.IdList) *[]uint32 {
			if l == nil {
				return nil
			}
			v := append([]uint32{}, l.Ids...)
			return &v
		}
		in.Admins, in.Readers, in.Executors = ids(r.Admins), ids(r.Readers), ids(r.Executors)
		if r.AllowedSources != nil {
			v := append([]string{}, r.AllowedSources.Values...)
			in.AllowedSources = &v
		}
		// A set message replaces (an empty one clears).
		for _, l := range []struct {
			pb  *herov1.JobLimits
			dst **model.JobLimits
		}{{r.JobDefaults, &in.JobDefaults}, {r.JobMax, &in.JobMax}} {
			if l.pb != nil {
				v := protoconv.LimitsFromPB(l.pb)
				if v == nil {
					v = &model.JobLimits{}
				}
				*l.dst = v
			}
		}
		x, err := c.s.contextUpdate(ctx, p, in)
		return &herov1.UpdateContextResponse{Context: protoconv.ContextToPB(x)}, err
	})
}

func (c *coordinatorServer) CreateRunner(ctx context.Context, r *herov1.CreateRunnerRequest) (*herov1.CreateRunnerResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateRunnerResponse, error) {
		in := runnerCreateParams{ContextID: r.ContextId}
		if r.Runner != nil {
			local := r.Runner.Local
			in.Runner = &runnerIn{ID: r.Runner.Id, Pubkey: r.Runner.Pubkey, Address: r.Runner.Address, Topic: r.Runner.Topic, Local: &local,
				Secret: r.Runner.Secret, ScriptTypes: r.Runner.ScriptTypes, Executors: r.Runner.Executors}
		}
		x, err := c.s.runnerCreate(ctx, p, in)
		return &herov1.CreateRunnerResponse{Runner: protoconv.RunnerToPB(x)}, err
	})
}

func (c *coordinatorServer) GetRunner(ctx context.Context, r *herov1.GetRunnerRequest) (*herov1.GetRunnerResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetRunnerResponse, error) {
		x, err := c.s.runnerLoad(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.GetRunnerResponse{Runner: protoconv.RunnerToPB(x)}, err
	})
}

func (c *coordinatorServer) ListRunners(ctx context.Context, r *herov1.ListRunnersRequest) (*herov1.ListRunnersResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListRunnersResponse, error) {
		x, err := c.s.runnerList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor})
		if err != nil {
			return nil, err
		}
		out := &herov1.ListRunnersResponse{NextCursor: x.NextCursor}
		for _, it := range x.Items {
			out.Runners = append(out.Runners, protoconv.RunnerToPB(it))
		}
		return out, nil
	})
}

func (c *coordinatorServer) CreateJob(ctx context.Context, r *herov1.CreateJobRequest) (*herov1.CreateJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateJobResponse, error) {
		x, err := c.s.jobCreate(ctx, p, jobCreateParams{ContextID: r.ContextId, Job: jobInFromPB(r.Job)})
		return &herov1.CreateJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) CreateJobs(ctx context.Context, r *herov1.CreateJobsRequest) (*herov1.CreateJobsResponse, error) {
	return c.jobsCall(ctx, r, c.s.jobCreateMany)
}

func (c *coordinatorServer) CheckJobs(ctx context.Context, r *herov1.CreateJobsRequest) (*herov1.CreateJobsResponse, error) {
	return c.jobsCall(ctx, r, c.s.jobCheckMany)
}

// jobsCall answers CreateJobs or CheckJobs with do (jobCreateMany or jobCheckMany).
func (c *coordinatorServer) jobsCall(ctx context.Context, r *herov1.CreateJobsRequest, do func(context.Context, Principal, jobCreateManyParams) (*createBatchResult, error)) (*herov1.CreateJobsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateJobsResponse, error) {
		in := jobCreateManyParams{ContextID: r.ContextId, Jobs: make([]*jobIn, len(r.Jobs))}
		for i, j := range r.Jobs {
			in.Jobs[i] = jobInFromPB(j)
		}
		x, err := do(ctx, p, in)
		if err != nil {
			return nil, err
		}
		out := &herov1.CreateJobsResponse{Items: make([]*herov1.CreateJobsItem, len(x.Items))}
		for i, it := range x.Items {
			out.Items[i] = &herov1.CreateJobsItem{Job: protoconv.JobToPB(it.Job)}
			if e := it.Error; e != nil {
				field, _ := e.Data["field"].(string)
				out.Items[i].Error = &herov1.ItemError{Code: grpcCode(e.Code).String(), Message: e.Message, Field: field}
			}
		}
		return out, nil
	})
}

func (c *coordinatorServer) GetJob(ctx context.Context, r *herov1.GetJobRequest) (*herov1.GetJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetJobResponse, error) {
		x, err := c.s.jobLoad(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.GetJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) ListJobs(ctx context.Context, r *herov1.ListJobsRequest) (*herov1.ListJobsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListJobsResponse, error) {
		x, err := c.s.jobList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor, Status: r.Status})
		if err != nil {
			return nil, err
		}
		out := &herov1.ListJobsResponse{NextCursor: x.NextCursor}
		for _, it := range x.Items {
			out.Jobs = append(out.Jobs, protoconv.JobToPB(it))
		}
		return out, nil
	})
}

func (c *coordinatorServer) RunJob(ctx context.Context, r *herov1.RunJobRequest) (*herov1.RunJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.RunJobResponse, error) {
		in := jobRunParams{ContextID: r.ContextId, Job: jobInFromPB(r.Job)}
		if r.Timeout > 0 {
			t := r.Timeout
			in.Timeout = &t
		}
		x, err := c.s.jobRun(ctx, p, in)
		return &herov1.RunJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) StopJob(ctx context.Context, r *herov1.StopJobRequest) (*herov1.StopJobResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.StopJobResponse, error) {
		x, err := c.s.jobStop(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.StopJobResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) GetJobLogs(ctx context.Context, r *herov1.GetJobLogsRequest) (*herov1.GetJobLogsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetJobLogsResponse, error) {
		x, err := c.s.jobLogs(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id, Offset: r.Offset})
		if err != nil {
			return nil, err
		}
		return &herov1.GetJobLogsResponse{Logs: x.Logs, NextOffset: x.NextOffset, Complete: x.Complete}, nil
	})
}

func (c *coordinatorServer) CreateFlow(ctx context.Context, r *herov1.CreateFlowRequest) (*herov1.CreateFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateFlowResponse, error) {
		in := flowCreateParams{ContextID: r.ContextId}
		if r.Flow != nil {
			in.Flow = &flowIn{ID: r.Flow.Id, CallerID: r.Flow.CallerId, ContextID: r.Flow.ContextId, Jobs: r.Flow.Jobs, EnvVars: r.Flow.EnvVars}
		}
		x, err := c.s.flowCreate(ctx, p, in)
		return &herov1.CreateFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) GetFlow(ctx context.Context, r *herov1.GetFlowRequest) (*herov1.GetFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetFlowResponse, error) {
		x, err := c.s.flowLoad(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.GetFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) WaitFlow(ctx context.Context, r *herov1.WaitFlowRequest) (*herov1.WaitFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.WaitFlowResponse, error) {
		in := flowWaitParams{ContextID: r.ContextId, ID: r.Id}
		if r.Timeout > 0 {
			t := r.Timeout
			in.Timeout = &t
		}
		x, err := c.s.flowWait(ctx, p, in)
		return &herov1.WaitFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) ListFlows(ctx context.Context, r *herov1.ListFlowsRequest) (*herov1.ListFlowsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListFlowsResponse, error) {
		x, err := c.s.flowList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor, Status: r.Status})
		if err != nil {
			return nil, err
		}
		out := &herov1.ListFlowsResponse{NextCursor: x.NextCursor}
		for _, it := range x.Items {
			out.Flows = append(out.Flows, protoconv.FlowToPB(it))
		}
		return out, nil
	})
}

func (c *coordinatorServer) StartFlow(ctx context.Context, r *herov1.StartFlowRequest) (*herov1.StartFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.StartFlowResponse, error) {
		x, err := c.s.flowStart(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.StartFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) GetFlowDag(ctx context.Context, r *herov1.GetFlowDagRequest) (*herov1.GetFlowDagResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetFlowDagResponse, error) {
		x, err := c.s.flowDAG(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		if err != nil {
			return nil, err
		}
		out := &herov1.GetFlowDagResponse{Flow: protoconv.FlowToPB(x.Flow)}
		for _, n := range x.Nodes {
			out.Nodes = append(out.Nodes, &herov1.DagNode{Id: n.ID, Depends: n.Depends, Dependents: n.Dependents, NodeStatus: n.NodeStatus,
				JobStatus: n.JobStatus, Attempt: n.Attempt, Error: n.Error, ScriptType: n.ScriptType, FunctionName: n.FunctionName})
		}
		return out, nil
	})
}

func (c *coordinatorServer) CancelFlow(ctx context.Context, r *herov1.CancelFlowRequest) (*herov1.CancelFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CancelFlowResponse, error) {
		x, err := c.s.flowCancel(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.CancelFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func (c *coordinatorServer) RetryFlow(ctx context.Context, r *herov1.RetryFlowRequest) (*herov1.RetryFlowResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.RetryFlowResponse, error) {
		x, err := c.s.flowRetry(ctx, p, ctxIDParams{ContextID: r.ContextId, ID: r.Id})
		return &herov1.RetryFlowResponse{Flow: protoconv.FlowToPB(x)}, err
	})
}

func dlqEntryPB(e dlqEntry) *herov1.DLQEntry {
	return &herov1.DLQEntry{CallerId: e.CallerID, Id: e.ID, FlowId: e.FlowID, Error: e.Error, Attempt: e.Attempt, DlqAtMs: e.DLQAtMs,
		ScriptType: e.ScriptType, FunctionName: e.FunctionName}
}

func (c *coordinatorServer) ListDLQ(ctx context.Context, r *herov1.ListDLQRequest) (*herov1.ListDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ListDLQResponse, error) {
		x, err := c.s.dlqList(ctx, p, listParams{ContextID: r.ContextId, Limit: int(r.Limit), Cursor: r.Cursor})
		if err != nil {
			return nil, err
		}
		out := &herov1.ListDLQResponse{NextCursor: x.NextCursor}
		for _, e := range x.Items {
			out.Entries = append(out.Entries, dlqEntryPB(e))
		}
		return out, nil
	})
}

func (c *coordinatorServer) ShowDLQ(ctx context.Context, r *herov1.ShowDLQRequest) (*herov1.ShowDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ShowDLQResponse, error) {
		x, err := c.s.dlqShow(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.ShowDLQResponse{Entry: dlqEntryPB(x.Entry), Job: protoconv.JobToPB(x.Job)}, nil
	})
}

func (c *coordinatorServer) RequeueDLQ(ctx context.Context, r *herov1.RequeueDLQRequest) (*herov1.RequeueDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.RequeueDLQResponse, error) {
		x, err := c.s.dlqRequeue(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.RequeueDLQResponse{Job: protoconv.JobToPB(x)}, err
	})
}

func (c *coordinatorServer) PurgeDLQ(ctx context.Context, r *herov1.PurgeDLQRequest) (*herov1.PurgeDLQResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.PurgeDLQResponse, error) {
		x, err := c.s.dlqPurge(ctx, p, dlqPurgeParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		if err != nil {
			return nil, err
		}
		return &herov1.PurgeDLQResponse{Purged: x.Purged}, nil
	})
}

func (c *coordinatorServer) DeleteJob(ctx context.Context, r *herov1.DeleteJobRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.jobDelete(ctx, p, deleteJobParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}

func (c *coordinatorServer) DeleteFlow(ctx context.Context, r *herov1.DeleteFlowRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.flowDelete(ctx, p, deleteParams{ContextID: r.ContextId, ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}

func (c *coordinatorServer) DeleteRunner(ctx context.Context, r *herov1.DeleteRunnerRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.runnerDelete(ctx, p, deleteParams{ContextID: r.ContextId, ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}

func (c *coordinatorServer) DeleteContext(ctx context.Context, r *herov1.DeleteContextRequest) (*herov1.DeleteResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.DeleteResponse, error) {
		_, err := c.s.contextDelete(ctx, p, deleteContextParams{ID: r.Id, Force: r.Force})
		return &herov1.DeleteResponse{Deleted: err == nil}, err
	})
}

func (c *coordinatorServer) CreateMessage(ctx context.Context, r *herov1.CreateMessageRequest) (*herov1.CreateMessageResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.CreateMessageResponse, error) {
		in := messageCreateParams{ContextID: r.ContextId}
		if r.Message != nil {
			in.Message = protoconv.MessageFromPB(r.Message)
		}
		x, err := c.s.messageCreate(ctx, p, in)
		return &herov1.CreateMessageResponse{Message: protoconv.MessageToPB(x)}, err
	})
}

func (c *coordinatorServer) GetMessage(ctx context.Context, r *herov1.GetMessageRequest) (*herov1.GetMessageResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.GetMessageResponse, error) {
		x, err := c.s.messageLoad(ctx, p, jobRefParams{ContextID: r.ContextId, CallerID: r.CallerId, ID: r.Id})
		return &herov1.GetMessageResponse{Message: protoconv.MessageToPB(x)}, err
	})
}

func (c *coordinatorServer) ReadEvents(ctx context.Context, r *herov1.ReadEventsRequest) (*herov1.ReadEventsResponse, error) {
	return call(ctx, func(ctx context.Context, p Principal) (*herov1.ReadEventsResponse, error) {
		x, err := c.s.eventsRead(ctx, p, eventsParams{ContextID: r.ContextId, After: r.AfterId, Limit: int(r.Limit), FlowID: r.FlowId})
		if err != nil {
			return nil, err
		}
		out := &herov1.ReadEventsResponse{NextAfterId: x.Next}
		for i := range x.Events {
			out.Events = append(out.Events, protoconv.EventToPB(&x.Events[i]))
		}
		return out, nil
	})
}

// Watch follows a context's event stream: from after_id ("" = only new events), every
// event exactly once and in order; a client that reconnects resumes from the last id
// it saw. It ends when the caller is no longer a reader of the context (or its
// credentials were revoked) with that refusal, at once: the events are read in a
// goroutine of their own (a blocked read of Redis is not interrupted).
func (c *coordinatorServer) Watch(r *herov1.WatchRequest, stream grpc.ServerStreamingServer[herov1.WatchResponse]) error {
	ctx := stream.Context()
	p := principal(ctx)
	bindStream(ctx, r.ContextId, RoleReader, "watch") // before the authorization reads the context
	_, db, err := c.s.authorize(ctx, p, r.ContextId, RoleReader, "watch")
	if err != nil {
		return grpcError(err)
	}
	after := r.AfterId
	if after == "" {
		if after, err = db.LastEventID(ctx); err != nil {
			return grpcError(err)
		}
	} else if err := db.CheckEventPosition(ctx, after); err != nil {
		return grpcError(err)
	}
	batches := make(chan eventBatch)
	go followEvents(ctx, db, after, batches)
	for {
		var b eventBatch
		select {
		case <-ctx.Done():
			if err := streamRevoked(ctx); err != nil {
				return grpcError(err)
			}
			return nil
		case b = <-batches:
		}
		if b.err != nil {
			return grpcError(b.err)
		}
		for i := range b.events {
			if r.FlowId != 0 && b.events[i].FlowID != r.FlowId {
				continue
			}
			if len(r.TypePrefixes) > 0 && !slices.ContainsFunc(r.TypePrefixes, func(p string) bool { return strings.HasPrefix(b.events[i].Type, p) }) {
				continue
			}
			if err := stream.Send(&herov1.WatchResponse{Event: protoconv.EventToPB(&b.events[i])}); err != nil {
				return err
			}
		}
	}
}

// eventBatch is what followEvents read: events, or why it stopped.
type eventBatch struct {
	events []store.Event
	err    error
}

// followEvents reads a context's events after `after` into out until ctx ends or a
// read fails (its last batch carries the error).
func followEvents(ctx context.Context, db *store.DB, after string, out chan<- eventBatch) {
	const batch = 500
	reader := db.EventReader()
	defer func() { _ = reader.Close() }()
	send := func(b eventBatch) bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		evs, err := reader.Wait(ctx, after, batch, 5*time.Second)
		if err != nil {
			if ctx.Err() == nil {
				send(eventBatch{err: fmt.Errorf("read events: %w", err)})
			}
			return
		}
		if len(evs) == batch {
			// A watcher this far behind may fall off the stream's end: say so rather
			// than skip what was trimmed meanwhile.
			if err := db.CheckEventPosition(ctx, after); err != nil {
				send(eventBatch{err: err})
				return
			}
		}
		if len(evs) == 0 {
			continue
		}
		after = evs[len(evs)-1].ID
		if !send(eventBatch{events: evs}) {
			return
		}
	}
}
