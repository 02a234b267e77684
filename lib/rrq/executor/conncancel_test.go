package executor_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/rrq"
	"github.com/hero-coordinator/hero/lib/rrq/executor"
)

// causeExecutor has a "wait" handler that reports its ctx's cause (and a ctx value)
// once its ctx is done.
type causeExecutor struct {
	ex      *executor.Executor
	started chan string
	causes  chan string
}

type valueKey struct{}

func newCauseExecutor() *causeExecutor {
	c := &causeExecutor{ex: executor.New(executor.Options{Logger: quietLogger()}), started: make(chan string, 4), causes: make(chan string, 4)}
	c.ex.Register("wait", func(ctx context.Context, req *rrq.ExecutionRequest) (any, error) {
		c.started <- req.JobID
		<-ctx.Done()
		v, _ := ctx.Value(valueKey{}).(string)
		c.causes <- req.JobID + ": " + context.Cause(ctx).Error() + " / " + v
		return nil, ctx.Err()
	})
	return c
}

func recvString(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(time.Minute):
		t.Fatal("nothing within a minute")
		return ""
	}
}

// A broken connection cancels the handlers of its own requests, not those of another
// connection.
func TestBrokenConnectionCancelsItsTasksOnly(t *testing.T) {
	c := newCauseExecutor()
	ctx, stop := context.WithCancel(context.WithValue(context.Background(), valueKey{}, "v"))
	defer stop()
	var conns [2]net.Conn
	for i := range conns {
		ours, theirs := net.Pipe()
		t.Cleanup(func() { ours.Close() })
		_ = ours.SetDeadline(time.Now().Add(time.Minute))
		go c.ex.ServeConn(ctx, theirs)
		conns[i] = ours
	}
	for i, job := range []string{"job-broken", "job-fine"} {
		req := rrq.NewRequest(job, "wait", nil, nil)
		send(t, conns[i], &req)
		if got := recvString(t, c.started); got != job {
			t.Fatalf("started %s, want %s", got, job)
		}
	}
	var hdr [4]byte // a zero-length frame breaks the stream
	binary.BigEndian.PutUint32(hdr[:], 0)
	if _, err := conns[0].Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if got := recvString(t, c.causes); got != "job-broken: connection to the orchestrator broken / v" {
		t.Fatalf("cause %q", got)
	}
	// The other connection's handler runs on until a cancel frame for its job.
	if n := c.ex.Cancel(rrq.CancelRequest{JobID: "job-fine"}); n != 1 {
		t.Fatalf("cancel reached %d requests, want 1 (the other one still running)", n)
	}
	out := recvOutcome(t, conns[1])
	if out.Status != rrq.StatusError || out.Error == nil || out.Error.Type != rrq.ErrorTypeCancelled {
		t.Fatalf("%+v", out)
	}
}

// ServeConn's ctx ending cancels the running handler with its cause, and a request
// read afterwards is answered without running its handler.
func TestServeConnContextEndCancels(t *testing.T) {
	c := newCauseExecutor()
	cause := errors.New("caller gone")
	ctx, stop := context.WithCancelCause(context.WithValue(context.Background(), valueKey{}, "v"))
	defer stop(nil)
	ours, theirs := net.Pipe()
	defer ours.Close()
	_ = ours.SetDeadline(time.Now().Add(time.Minute))
	go c.ex.ServeConn(ctx, theirs)
	r1 := rrq.NewRequest("job-1", "wait", nil, nil)
	send(t, ours, &r1)
	recvString(t, c.started)
	stop(cause)
	if got := recvString(t, c.causes); got != "job-1: caller gone / v" {
		t.Fatalf("cause %q", got)
	}
	if out := recvOutcome(t, ours); out.RequestID != r1.RequestID || out.Status != rrq.StatusError {
		t.Fatalf("%+v", out)
	}
	r2 := rrq.NewRequest("job-2", "wait", nil, nil)
	send(t, ours, &r2)
	if out := recvOutcome(t, ours); out.RequestID != r2.RequestID || out.Status != rrq.StatusError {
		t.Fatalf("%+v", out)
	}
	select {
	case job := <-c.started:
		t.Fatalf("%s's handler ran after the connection's ctx ended", job)
	default:
	}
}
