// Command oneconn is the simplest executor seed 004 allows, written against the
// protocol alone (no SDK): it binds its endpoint, accepts exactly ONE connection,
// serves that connection's requests one after the other and exits (status 0) when
// the connection closes. A reader takes the connection's frames while a handler
// runs, so a cancel frame on the same connection is honoured. Handlers:
//
//	echo   returns {"args": args, "kwargs": kwargs}
//	value  returns kwargs.value as the result (any JSON)
//	deps   returns kwargs.hero_deps
//	trace  returns {"trace_context": context.trace_context}
//	pid    returns {"pid": the process's pid}
//	sleep  sleeps kwargs.seconds; a cancel frame ends it early (error, type cancelled)
//	bye    answers, then closes the connection (so the process exits)
//
// With the argument "crash" it exits with status 3 before binding (a broken executor).
// With "serial" it accepts connections one at a time, serving each until it closes,
// and never exits by itself: the executor of docs/executors.md §8, which a pool
// without Connections 1 would leave a request waiting on a connection it does not
// accept yet.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hero-coordinator/hero/lib/rrq"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "crash" {
		fmt.Fprintln(os.Stderr, "oneconn: crashing at start, as asked")
		os.Exit(3)
	}
	ep, err := rrq.EndpointFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oneconn:", err)
		os.Exit(2)
	}
	if ep.Network == "unix" {
		_ = os.Remove(ep.Address)
	}
	ln, err := net.Listen(ep.Network, ep.Address)
	if err != nil {
		fmt.Fprintln(os.Stderr, "oneconn:", err)
		os.Exit(2)
	}
	serial := len(os.Args) > 1 && os.Args[1] == "serial"
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "oneconn:", err)
			os.Exit(2)
		}
		if !serial {
			_ = ln.Close() // exactly one connection
		}
		serve(c)
		if !serial {
			break
		}
	}
	fmt.Fprintln(os.Stderr, "oneconn: connection closed; exiting")
}

type running struct {
	mu     sync.Mutex
	cancel map[string]chan struct{} // request_id → closed on a cancel frame
	jobs   map[string]string        // request_id → job_id
}

func serve(c net.Conn) {
	defer c.Close()
	reqs := make(chan rrq.ExecutionRequest, 64)
	run := &running{cancel: map[string]chan struct{}{}, jobs: map[string]string{}}
	var wmu sync.Mutex
	write := func(out rrq.ExecutionOutcome) error {
		wmu.Lock()
		defer wmu.Unlock()
		return rrq.WriteMessage(c, &out)
	}
	done := make(chan struct{})
	go func() { // the worker: requests in order
		defer close(done)
		for req := range reqs {
			out, closeAfter := handle(req, run)
			if err := write(out); err != nil || closeAfter {
				_ = c.Close()
				for range reqs { // drain until the reader ends
				}
				return
			}
		}
	}()
	br := bufio.NewReader(c)
	for {
		env, err := rrq.ReadFrame(br, rrq.DefaultMaxFrameSize)
		if err != nil {
			break
		}
		switch env.Type {
		case rrq.TypeRequest:
			req, err := env.Request()
			if err != nil {
				continue
			}
			run.mu.Lock()
			run.cancel[req.RequestID] = make(chan struct{})
			run.jobs[req.RequestID] = req.JobID
			run.mu.Unlock()
			reqs <- req
		case rrq.TypeCancel:
			cr, err := env.Cancel()
			if err != nil {
				continue
			}
			run.mu.Lock()
			for id, ch := range run.cancel {
				if run.jobs[id] == cr.JobID && (cr.RequestID == "" || cr.RequestID == id) {
					select {
					case <-ch:
					default:
						close(ch)
					}
				}
			}
			run.mu.Unlock()
		}
	}
	close(reqs)
	<-done
}

func handle(req rrq.ExecutionRequest, run *running) (rrq.ExecutionOutcome, bool) {
	run.mu.Lock()
	cancelled := run.cancel[req.RequestID]
	run.mu.Unlock()
	defer func() {
		run.mu.Lock()
		delete(run.cancel, req.RequestID)
		delete(run.jobs, req.RequestID)
		run.mu.Unlock()
	}()
	out := rrq.ExecutionOutcome{JobID: req.JobID, RequestID: req.RequestID, Status: rrq.StatusSuccess}
	result := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			out.Status, out.Error = rrq.StatusError, &rrq.ExecutionError{Message: err.Error(), Type: "result_not_serializable"}
			return
		}
		out.Result = b
	}
	closeAfter := false
	switch req.FunctionName {
	case "echo":
		result(map[string]any{"args": req.Args, "kwargs": req.Kwargs})
	case "value":
		out.Result = req.Kwargs["value"]
	case "deps":
		out.Result = req.Kwargs["hero_deps"]
	case "trace":
		result(map[string]any{"trace_context": req.Context.TraceContext})
	case "pid":
		result(map[string]any{"pid": os.Getpid()})
	case "bye":
		closeAfter = true
	case "sleep":
		var secs float64
		_, _ = req.Kwarg("seconds", &secs)
		// "started": a file (a test's named pipe) told when the call runs.
		var started string
		if ok, _ := req.Kwarg("started", &started); ok && started != "" {
			if f, err := os.OpenFile(started, os.O_WRONLY|os.O_APPEND, 0); err == nil {
				_, _ = f.WriteString("started\n")
				_ = f.Close()
			}
		}
		t := time.NewTimer(time.Duration(secs * float64(time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-cancelled:
			out.Status, out.Error = rrq.StatusError, &rrq.ExecutionError{Message: "cancelled", Type: "cancelled"}
		}
	default:
		out.Status, out.Error = rrq.StatusError, &rrq.ExecutionError{Message: "unknown handler " + req.FunctionName, Type: rrq.ErrorTypeHandlerNotFound}
	}
	return out, closeAfter
}
