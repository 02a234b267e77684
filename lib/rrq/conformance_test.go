package rrq

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestExecutorConformance drives each example executor over a raw connection, as an
// orchestrator written from the protocol text would: requests pipelined on one
// connection are answered in order, a cancel for a request still queued behind another
// answers it "cancelled", an invalid request gets an error outcome, and a bad frame
// closes only that connection.
func TestExecutorConformance(t *testing.T) {
	for _, kind := range executorKinds {
		for _, transport := range []Transport{TransportUnix, TransportTCP} {
			t.Run(kind.name+"/"+string(transport), func(t *testing.T) {
				t.Parallel()
				p := startTestPool(t, kind, transport, 1, 1)
				ep := p.Endpoints()[0]
				dial := func() net.Conn {
					nc, err := net.Dial(ep.Network, ep.Address)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { nc.Close() })
					_ = nc.SetDeadline(time.Now().Add(time.Minute))
					return nc
				}
				write := func(nc net.Conn, payload any) {
					t.Helper()
					if err := WriteMessage(nc, payload); err != nil {
						t.Fatal(err)
					}
				}
				read := func(nc net.Conn) ExecutionOutcome {
					t.Helper()
					env, err := ReadFrame(nc, 0)
					if err != nil {
						t.Fatal(err)
					}
					out, err := env.Outcome()
					if err != nil {
						t.Fatal(err)
					}
					return out
				}

				// Pipelined requests are answered in order.
				nc := dial()
				r1 := NewRequest("job-p1", "sleep", nil, map[string]any{"seconds": 0.2})
				r2 := NewRequest("job-p2", "echo", []any{"x"}, nil)
				r3 := NewRequest("job-p3", "noop", nil, nil)
				for _, r := range []*ExecutionRequest{&r1, &r2, &r3} {
					write(nc, r)
				}
				for _, r := range []ExecutionRequest{r1, r2, r3} {
					if out := read(nc); out.RequestID != r.RequestID || out.JobID != r.JobID || out.Status != StatusSuccess {
						t.Fatalf("pipelined %s: %+v", r.FunctionName, out)
					}
				}

				// A queued request cancelled by request_id is answered without running;
				// the running one is cancelled by job_id alone. (Frames on one connection
				// are ordered; a cancel on another connection could overtake the request
				// it cancels — the pool tests cover that path by resending.)
				q1 := NewRequest("job-q1", "sleep", nil, map[string]any{"seconds": 30})
				q2 := NewRequest("job-q2", "echo", nil, nil)
				write(nc, &q1)
				write(nc, &q2)
				write(nc, &CancelRequest{ProtocolVersion: "1", JobID: q2.JobID, RequestID: q2.RequestID})
				write(nc, &CancelRequest{ProtocolVersion: "1", JobID: q1.JobID})
				for _, r := range []ExecutionRequest{q1, q2} {
					out := read(nc)
					if out.RequestID != r.RequestID || out.Status != StatusError || out.Error == nil || out.Error.Type != ErrorTypeCancelled {
						t.Fatalf("cancelled %s: %+v %+v", r.JobID, out, out.Error)
					}
				}

				// An invalid request (unknown protocol version) gets an error outcome.
				bad := NewRequest("job-bad", "echo", nil, nil)
				bad.ProtocolVersion = "99"
				write(nc, &bad)
				if out := read(nc); out.RequestID != bad.RequestID || out.Status != StatusError || out.Error == nil || out.Error.Type != "invalid_request" {
					t.Fatalf("invalid request: %+v %+v", out, out.Error)
				}

				// A bad frame closes that connection only.
				if _, err := nc.Write(rawFrame(`{"type":"request","payload":`)); err != nil {
					t.Fatal(err)
				}
				if _, err := ReadFrame(nc, 0); err != io.EOF {
					t.Fatalf("after a bad frame: %v, want the executor to close the connection", err)
				}
				nc2 := dial()
				ok := NewRequest("job-ok", "echo", nil, nil)
				write(nc2, &ok)
				if out := read(nc2); out.Status != StatusSuccess {
					t.Fatalf("new connection after a bad frame: %+v", out)
				}
			})
		}
	}
}
