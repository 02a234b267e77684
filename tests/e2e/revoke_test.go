package e2e

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/auth"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// revokeBound is how soon after a change the streams it concerns must have ended: a
// generous deadline around the design's bound (a notice and one check, about a
// second), well short of what the code before it gave (never for a stream; 30 s,
// --auth-session-recheck, for a session's calls).
const revokeBound = 10 * time.Second

// watchOf is a Watch of context 1 held open by a test, its events and its end read
// by a goroutine of its own.
type watchOf struct {
	name   string
	events chan *herov1.Event
	end    chan error
}

func startWatch(t *testing.T, cl *harness.Client, name string) *watchOf {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := cl.API(t).Watch(ctx, &herov1.WatchRequest{ContextId: ctx1})
	if err != nil {
		t.Fatalf("%s: watch: %v", name, err)
	}
	w := &watchOf{name: name, events: make(chan *herov1.Event, 100), end: make(chan error, 1)}
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				w.end <- err
				return
			}
			w.events <- r.Event
		}
	}()
	return w
}

// sees waits until the watch delivers the event of job id's creation.
func (w *watchOf) sees(t *testing.T, id uint32) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case ev := <-w.events:
			if ev.Type == "job.created" && ev.Detail == fmt.Sprintf("job:1:%d", id) { // the event names the job's key
				return
			}
		case err := <-w.end:
			t.Fatalf("%s ended before job %d's event: %v", w.name, id, err)
		case <-deadline:
			t.Fatalf("%s: no event of job %d within a minute", w.name, id)
		}
	}
}

// ends waits (revokeBound) for the watch to end with code.
func (w *watchOf) ends(t *testing.T, code codes.Code) {
	t.Helper()
	start := time.Now()
	deadline := time.After(revokeBound)
	for {
		select {
		case <-w.events: // events written before the change may still come
		case err := <-w.end:
			if status.Code(err) != code {
				t.Fatalf("%s ended with %v, want %v", w.name, err, code)
			}
			t.Logf("%s ended %v after the change's answer", w.name, time.Since(start).Round(time.Millisecond))
			return
		case <-deadline:
			t.Fatalf("%s still open %v after its caller's rights were revoked", w.name, revokeBound)
		}
	}
}

// Acceptance (Trust IV, revocation reaches open streams): the changes are made through
// one supervisor-daemon and the streams are open on another replica. A reader removed
// from the context, an actor whose key is replaced (its Watch signed per call, its
// SubmitJobStream and its calls on a session connection), an operator secret revoked:
// each stream ends with the refusal within the bound, and the streams of everyone
// else stay open and keep receiving events. An actor removed from the executors has
// each submission of its open stream refused.
func TestRevocationReachesOpenStreams(t *testing.T) {
	s, admin := newStack(t, harness.StackOptions{})
	api2 := harness.Start(t, binDir, "supervisor-daemon", s.RedisURL, harness.Options{
		Args: []string{"--scheduler-addr", s.Scheduler.GRPCAddr}, Env: []string{"HERO_ADMIN_SECRET=" + harness.AdminSecret}})
	on2 := func(cl *harness.Client) *harness.Client {
		cl.URL, cl.GRPCAddr = harness.APIURL(api2), api2.GRPCAddr
		return cl
	}
	op := s.Operator()
	for _, id := range []uint32{2, 3, 4} {
		s.CreateActor(t, id)
	}
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{2}, "executors": []int{3, 4}}, nil)
	var secret struct {
		Fingerprint string `json:"fingerprint"`
		Secret      string `json:"secret"`
	}
	op.MustCall(t, "secret.create", map[string]any{}, &secret)
	harness.GuardSecret(secret.Secret)

	keep := startWatch(t, on2(s.Client(1)), "the admin's watch")
	reader := startWatch(t, on2(s.Client(2)), "the reader's watch")
	signed := on2(s.Client(4))
	signed.SignEachCall = true
	rotated := startWatch(t, signed, "a watch signed per call")
	byOp := startWatch(t, on2(&harness.Client{Secret: secret.Secret}), "a watch opened with an operator secret")
	all := []*watchOf{keep, reader, rotated, byOp}

	// A producer's stream and a session connection of actor 3, each used once.
	sess := on2(s.Client(3)).API(t)
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	producer, err := sess.SubmitJobStream(sctx)
	if err != nil {
		t.Fatal(err)
	}
	submit := func(id uint32) error {
		err := producer.Send(&herov1.SubmitJobStreamRequest{Seq: uint64(id), Submit: &herov1.SubmitJobRequest{ContextId: ctx1,
			Job: &herov1.Job{Id: id, ScriptType: "sh", Script: "true"}}})
		if err != nil {
			return err
		}
		r, err := producer.Recv()
		if err == nil && r.Error != nil {
			err = fmt.Errorf("refused: %s", r.Error.Message)
		}
		return err
	}
	if err := submit(100); err != nil {
		t.Fatalf("the first submission of the stream: %v", err)
	}
	if _, err := sess.ListFlows(context.Background(), &herov1.ListFlowsRequest{ContextId: ctx1}); err != nil {
		t.Fatal(err)
	}

	job := uint32(0)
	event := func(open ...*watchOf) { // a new event, seen by every watch still open
		t.Helper()
		job++
		admin.MustCall(t, "job.create", map[string]any{"context_id": ctx1, "job": map[string]any{"id": job, "script_type": "sh", "script": "true"}}, nil)
		for _, w := range open {
			w.sees(t, job)
		}
	}
	event(all...) // every watch is open and authorized

	// A reader removed from the context.
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "readers": []int{}}, nil)
	reader.ends(t, codes.PermissionDenied)
	event(keep, rotated, byOp)

	// An actor's key replaced: its watch signed per call ends.
	newKey := func(id uint32) {
		_, k, _ := auth.GenerateKey()
		op.MustCall(t, "actor.update", map[string]any{"id": id, "pubkey": auth.PublicKeyHex(k.Public().(ed25519.PublicKey))}, nil)
	}
	newKey(4)
	rotated.ends(t, codes.Unauthenticated)
	event(keep, byOp)

	// An operator secret revoked.
	op.MustCall(t, "secret.revoke", map[string]any{"fingerprint": secret.Fingerprint}, nil)
	byOp.ends(t, codes.Unauthenticated)

	// Actor 3 no longer an executor: each submission on its open stream is refused
	// (each is authorized on its own, against the context as it is), the stream stays.
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "executors": []int{4}}, nil)
	if err := submit(102); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a submission after its actor left the executors: %v", err)
	}
	op.MustCall(t, "context.update", map[string]any{"id": ctx1, "executors": []int{3, 4}}, nil)
	if err := submit(103); err != nil {
		t.Fatalf("a submission once its actor is an executor again: %v", err)
	}

	// Actor 3's key replaced: its submission stream ends, and its session connection's
	// next call is verified again (refused) instead of taken from the cache.
	newKey(3)
	ended := make(chan error, 1)
	go func() {
		_, err := producer.Recv()
		ended <- err
	}()
	start := time.Now()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("the submission stream ended with %v, want Unauthenticated", err)
		}
		t.Logf("the submission stream ended %v after the change's answer", time.Since(start).Round(time.Millisecond))
	case <-time.After(revokeBound):
		t.Fatalf("the submission stream is still open %v after its actor's key was replaced", revokeBound)
	}
	if _, err := sess.ListFlows(context.Background(), &herov1.ListFlowsRequest{ContextId: ctx1}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a session call after the key was replaced: %v, want Unauthenticated", err)
	}
	if err := submit(101); err == nil {
		t.Fatal("the submission stream took a submission after the key was replaced")
	}
	if err := op.Call("job.load", map[string]any{"context_id": ctx1, "caller_id": 3, "id": 101}, nil); err == nil || !strings.Contains(err.Error(), "-32004") {
		t.Fatalf("job 101 of the revoked stream: %v, want not found", err)
	}

	event(keep) // the admin's watch was never touched
	if v, err := harness.Metric(api2, "hero_api_streams_revoked_total"); err != nil || v != 4 {
		t.Errorf("hero_api_streams_revoked_total on the second replica = %v (%v), want 4", v, err)
	}
}
