package hero

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// flowServer picks each created job's id and checks, as each creation arrives, that
// the jobs it depends on were created (answered) before; it records how many creations
// were in flight at once. The first creations of a level wait (up to a deadline) for a
// second one to arrive: concurrent creation is seen, not guessed from timing.
type flowServer struct {
	herov1.UnimplementedCoordinatorServer
	mu       sync.Mutex
	next     uint32
	made     map[uint32]bool
	inFlight int
	most     int
	bad      []string
	two      chan struct{} // closed when two creations were in flight at once
	flowJobs []uint32
}

func (s *flowServer) CreateJob(ctx context.Context, r *herov1.CreateJobRequest) (*herov1.CreateJobResponse, error) {
	s.mu.Lock()
	for _, d := range r.Job.Dependends {
		if !s.made[d] {
			s.bad = append(s.bad, fmt.Sprintf("job %q created before its dependency %d", r.Job.Script, d))
		}
	}
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	if s.inFlight == 2 {
		select {
		case <-s.two:
		default:
			close(s.two)
		}
	}
	s.mu.Unlock()
	select {
	case <-s.two:
	case <-time.After(time.Minute):
		// a deadline, not a pace: no second call came (the test fails on s.most);
		// the calls after this one do not wait
		s.mu.Lock()
		select {
		case <-s.two:
		default:
			close(s.two)
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	s.next++
	s.made[s.next] = true
	j := r.Job
	j.Id = s.next
	return &herov1.CreateJobResponse{Job: j}, nil
}

func (s *flowServer) CreateFlow(_ context.Context, r *herov1.CreateFlowRequest) (*herov1.CreateFlowResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flowJobs = r.Flow.Jobs
	f := r.Flow
	f.Id = 9
	return &herov1.CreateFlowResponse{Flow: f}, nil
}

func (s *flowServer) StartFlow(_ context.Context, r *herov1.StartFlowRequest) (*herov1.StartFlowResponse, error) {
	return &herov1.StartFlowResponse{Flow: &herov1.Flow{Id: r.Id, Status: "started"}}, nil
}

// wideSpec is a flow spec of n independent sh jobs a0…a<n-1> (each its name as its
// script), and their names.
func wideSpec(n int) (FlowSpec, []string) {
	var spec FlowSpec
	var names []string
	for i := range n {
		name := fmt.Sprintf("a%d", i)
		names = append(names, name)
		spec.Jobs = append(spec.Jobs, FlowJob{Name: name, Job: model.Job{ScriptType: model.ScriptSh, Script: name}})
	}
	return spec, names
}

// SubmitFlow creates the jobs of one level side by side (at most submitFlowCalls at
// once), each after its dependencies, with their ids, and the flow lists them in
// the spec's order.
func TestSubmitFlowCreatesALevelAtOnce(t *testing.T) {
	s := &flowServer{made: map[uint32]bool{}, two: make(chan struct{})}
	c := serve(t, s)
	spec, wide := wideSpec(40)
	spec.Jobs = append(spec.Jobs,
		FlowJob{Name: "c", Depends: []string{"b"}, Job: model.Job{ScriptType: model.ScriptSh, Script: "c"}},
		FlowJob{Name: "b", Depends: wide, Job: model.Job{ScriptType: model.ScriptSh, Script: "b"}})
	sub, err := c.SubmitFlow(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.bad) > 0 {
		t.Fatalf("out of order: %v", s.bad)
	}
	if s.most < 2 || s.most > submitFlowCalls {
		t.Fatalf("%d creations in flight at most, want 2 to %d", s.most, submitFlowCalls)
	}
	order, _ := spec.Order()
	var want []uint32
	for _, i := range order {
		want = append(want, sub.Jobs[spec.Jobs[i].Name])
	}
	if !slices.Equal(s.flowJobs, want) || len(want) != 42 || sub.Jobs["b"] == 0 || sub.Jobs["c"] == 0 {
		t.Fatalf("the flow lists %v, want the jobs in the spec's order %v", s.flowJobs, want)
	}
	if sub.Flow == nil || sub.Flow.ID != 9 {
		t.Fatalf("flow %+v", sub.Flow)
	}
}

// limited refuses each creation with ResourceExhausted until its count is used up,
// with the server's retry hint or without it.
type limited struct {
	herov1.UnimplementedCoordinatorServer
	mu    sync.Mutex
	left  int
	hint  bool
	calls int
}

func (l *limited) CreateJob(_ context.Context, r *herov1.CreateJobRequest) (*herov1.CreateJobResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	if l.left > 0 {
		l.left--
		st := status.New(codes.ResourceExhausted, "too many requests")
		if l.hint {
			st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Millisecond)})
		}
		return nil, st.Err()
	}
	j := r.Job
	j.Id = 1
	return &herov1.CreateJobResponse{Job: j}, nil
}

// A creation the server refused with its retry hint (its rate limit: nothing was
// done) is sent again; one refused without the hint is not.
func TestRateLimitedCreationIsSentAgain(t *testing.T) {
	l := &limited{left: 2, hint: true}
	if _, err := serve(t, l).CreateJob(context.Background(), &model.Job{ScriptType: model.ScriptSh, Script: "true"}); err != nil || l.calls != 3 {
		t.Fatalf("rate limited twice: %v after %d calls, want success after 3", err, l.calls)
	}
	l = &limited{left: 1}
	if _, err := serve(t, l).CreateJob(context.Background(), &model.Job{ScriptType: model.ScriptSh, Script: "true"}); !errors.Is(err, ErrRateLimited) || l.calls != 1 {
		t.Fatalf("refused without a hint: %v after %d calls, want ErrRateLimited after 1", err, l.calls)
	}
}

// batchServer is flowServer with CreateJobs: it records the size of each call, checks
// that each job's dependencies were created before its call, and refuses the jobs
// whose script is "refuse" (an item error).
type batchServer struct {
	flowServer
	calls []int
}

func (s *batchServer) CreateJobs(_ context.Context, r *herov1.CreateJobsRequest) (*herov1.CreateJobsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, len(r.Jobs))
	out := &herov1.CreateJobsResponse{}
	for _, j := range r.Jobs {
		for _, d := range j.Dependends {
			if !s.made[d] {
				s.bad = append(s.bad, fmt.Sprintf("job %q created before its dependency %d", j.Script, d))
			}
		}
		if j.Script == "refuse" {
			out.Items = append(out.Items, &herov1.CreateJobsItem{Error: &herov1.ItemError{Code: "InvalidArgument", Message: "invalid params: script refused", Field: "job.script"}})
			continue
		}
		s.next++
		s.made[s.next] = true
		j.Id = s.next
		out.Items = append(out.Items, &herov1.CreateJobsItem{Job: j})
	}
	return out, nil
}

// SubmitFlow creates a level's jobs with CreateJobs, 500 a call, each level after the
// one it depends on; an item's error fails the submission naming the job and its kind.
func TestSubmitFlowCreatesWithCreateJobs(t *testing.T) {
	s := &batchServer{flowServer: flowServer{made: map[uint32]bool{}, two: make(chan struct{})}}
	close(s.two) // CreateJob (one job a level) does not wait for a second call
	c := serve(t, s)
	spec, wide := wideSpec(1200)
	spec.Jobs = append(spec.Jobs,
		FlowJob{Name: "b", Depends: wide, Job: model.Job{ScriptType: model.ScriptSh, Script: "b"}},
		FlowJob{Name: "c", Depends: []string{"a0"}, Job: model.Job{ScriptType: model.ScriptSh, Script: "c"}})
	sub, err := c.SubmitFlow(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.bad) > 0 {
		t.Fatalf("out of order: %v", s.bad[:min(3, len(s.bad))])
	}
	slices.Sort(s.calls)
	if !slices.Equal(s.calls, []int{2, 200, 500, 500}) { // level 0 in three calls, b and c (level 1) in one
		t.Fatalf("CreateJobs calls of %v jobs, want [2 200 500 500]", s.calls)
	}
	if len(s.flowJobs) != 1202 || sub.Jobs["b"] == 0 || sub.Jobs["c"] == 0 {
		t.Fatalf("the flow lists %d jobs; b %d, c %d", len(s.flowJobs), sub.Jobs["b"], sub.Jobs["c"])
	}

	spec = FlowSpec{Jobs: []FlowJob{
		{Name: "ok", Job: model.Job{ScriptType: model.ScriptSh, Script: "true"}},
		{Name: "bad", Job: model.Job{ScriptType: model.ScriptSh, Script: "refuse"}},
	}}
	_, err = c.SubmitFlow(context.Background(), spec)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `"bad"`) || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a refused job: %v, want an invalid argument naming job \"bad\"", err)
	}
}

// checkingServer is batchServer with CheckJobs: it refuses the jobs whose function
// names executor "nosuch", as a server whose runners did not announce it does, and
// counts the jobs it was asked to check.
type checkingServer struct {
	batchServer
	checked int
}

func (s *checkingServer) CheckJobs(_ context.Context, r *herov1.CreateJobsRequest) (*herov1.CreateJobsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &herov1.CreateJobsResponse{}
	for _, j := range r.Jobs {
		s.checked++
		if len(j.Dependends) > 0 {
			s.bad = append(s.bad, fmt.Sprintf("job %q checked with dependencies %v", j.FunctionName, j.Dependends))
		}
		if strings.HasPrefix(j.FunctionName, "nosuch#") {
			out.Items = append(out.Items, &herov1.CreateJobsItem{Error: &herov1.ItemError{Code: "InvalidArgument",
				Message: `invalid params: no runner in context 1 has executor "nosuch"`, Field: "job.function_name"}})
			continue
		}
		out.Items = append(out.Items, &herov1.CreateJobsItem{Job: j})
	}
	return out, nil
}

// SubmitFlow has the server check every job before it creates the first: a flow with
// a job the server would refuse (an executor no runner announced, in a later level)
// is refused naming that job, and nothing is created; a flow the check passes is
// created as before.
func TestSubmitFlowChecksEveryJobFirst(t *testing.T) {
	s := &checkingServer{batchServer: batchServer{flowServer: flowServer{made: map[uint32]bool{}, two: make(chan struct{})}}}
	close(s.two)
	c := serve(t, s)
	spec := FlowSpec{Jobs: []FlowJob{
		{Name: "measure", Job: model.Job{ScriptType: model.ScriptSh, Script: "true"}},
		{Name: "other", Job: model.Job{ScriptType: model.ScriptSh, Script: "true"}},
		{Name: "notify", Depends: []string{"measure"}, Job: model.Job{FunctionName: "nosuch#send", Kwargs: []byte(`{}`)}},
	}}
	_, err := c.SubmitFlow(context.Background(), spec)
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `job "notify" of the flow`) || !strings.Contains(err.Error(), `executor "nosuch"`) {
		t.Fatalf("a flow with an unserved executor: %v, want a refusal naming job \"notify\" and the executor", err)
	}
	if s.next != 0 || s.flowJobs != nil || s.checked != 3 {
		t.Fatalf("after the refusal: %d jobs created, flow %v, %d jobs checked; want none created and 3 checked", s.next, s.flowJobs, s.checked)
	}
	spec.Jobs[2].Job.FunctionName = "mailer#send"
	sub, err := c.SubmitFlow(context.Background(), spec)
	if err != nil || len(s.flowJobs) != 3 || sub.Jobs["notify"] == 0 {
		t.Fatalf("a flow the check passes: %v, %+v", err, sub)
	}
	if len(s.bad) > 0 {
		t.Fatal(s.bad)
	}
}
