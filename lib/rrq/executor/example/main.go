// Command example is an RRQ executor written with the Go SDK. The orchestrator starts it
// with RRQ_EXECUTOR_SOCKET or RRQ_EXECUTOR_TCP_SOCKET set. Handlers:
//
//	echo      returns {"args": args, "kwargs": kwargs}
//	reach     tries to read kwargs "file" and dial kwargs "addr" (sandbox tests)
//	pid       returns {"pid": the executor process's pid, "instance": an id unique to the process}
//	sleep     sleeps kwargs.seconds, returning early (cancelled) on a cancel frame
//	noop      returns null
//	fail      fails (status error, type "example_failure"; kwargs.message overrides the message)
//	retry     asks for a retry after kwargs.after_seconds
//	stubborn  sleeps kwargs.seconds ignoring cancellation (to exercise the kill path);
//	          with kwargs.started_file it first creates that file (the call has begun)
//	crash     exits the process with status 1 in the middle of the request
//	value     returns kwargs.value as it is (any JSON; null without it)
//	trace     returns {"attempt": attempt, "trace_context": context.trace_context} and
//	          logs that line to stderr; fails (type "example_failure") while the attempt
//	          is below kwargs.succeed_at
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/hero-coordinator/hero/lib/rrq"
	"github.com/hero-coordinator/hero/lib/rrq/executor"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ex := executor.New(executor.Options{Logger: logger})
	ex.Register("echo", echo)
	ex.Register("sleep", sleep)
	ex.Register("noop", func(context.Context, *rrq.ExecutionRequest) (any, error) { return nil, nil })
	// An id of this process that holds in a PID namespace too (where pids repeat).
	instance := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	ex.Register("pid", func(context.Context, *rrq.ExecutionRequest) (any, error) {
		return map[string]any{"pid": os.Getpid(), "instance": instance}, nil
	})
	ex.Register("fail", fail)
	ex.Register("retry", retry)
	ex.Register("stubborn", stubborn)
	ex.Register("reach", reach)
	ex.Register("value", func(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
		return req.Kwargs["value"], nil // a nil RawMessage is null
	})
	ex.Register("trace", func(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
		return traceCall(logger, req)
	})
	// procs: the cores this process schedules on, and the GOMAXPROCS it was given.
	ex.Register("procs", func(context.Context, *rrq.ExecutionRequest) (any, error) {
		return map[string]any{"gomaxprocs": runtime.GOMAXPROCS(0), "env": os.Getenv("GOMAXPROCS")}, nil
	})
	ex.Register("crash", func(context.Context, *rrq.ExecutionRequest) (any, error) {
		os.Exit(1)
		return nil, nil
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopProfile := cpuProfile(logger)
	err := ex.Serve(ctx)
	stopProfile()
	if err != nil {
		logger.Error("executor stopped", "err", err)
		os.Exit(1)
	}
}

// cpuProfile profiles this process's CPU into <dir>/executor-<pid>.pprof from its start
// until the returned func (its clean stop) when RRQ_EXAMPLE_CPUPROFILE names a
// directory: for the benchmarks (go tool pprof reads it).
func cpuProfile(logger *slog.Logger) func() {
	dir := os.Getenv("RRQ_EXAMPLE_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("executor-%d.pprof", os.Getpid())))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		logger.Error("cpu profile", "err", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// reach says what the executor's process can reach: kwargs "file" (read) and "addr"
// (a TCP dial), each "yes" or the error — for tests of the executor's sandbox.
func reach(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
	out := map[string]any{}
	var file, addr string
	if _, err := req.Kwarg("file", &file); err == nil && file != "" {
		if _, err := os.ReadFile(file); err != nil {
			out["file"] = err.Error()
		} else {
			out["file"] = "yes"
		}
	}
	if _, err := req.Kwarg("addr", &addr); err == nil && addr != "" {
		if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err != nil {
			out["addr"] = err.Error()
		} else {
			_ = c.Close()
			out["addr"] = "yes"
		}
	}
	return out, nil
}

func echo(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
	args := req.Args
	if args == nil {
		args = []json.RawMessage{}
	}
	kwargs := req.Kwargs
	if kwargs == nil {
		kwargs = map[string]json.RawMessage{}
	}
	return map[string]any{"args": args, "kwargs": kwargs}, nil
}

func seconds(req *rrq.ExecutionRequest) (time.Duration, error) {
	var s float64
	if _, err := req.Kwarg("seconds", &s); err != nil {
		return 0, executor.Fail("bad_arguments", "", "kwargs.seconds must be a number")
	}
	return time.Duration(s * float64(time.Second)), nil
}

func sleep(ctx context.Context, req *rrq.ExecutionRequest) (any, error) {
	d, err := seconds(req)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return map[string]any{"slept": d.Seconds()}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func stubborn(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
	d, err := seconds(req)
	if err != nil {
		return nil, err
	}
	var started string
	if _, err := req.Kwarg("started_file", &started); err != nil {
		return nil, executor.Fail("bad_arguments", "", "kwargs.started_file must be a string")
	}
	if started != "" {
		if err := os.WriteFile(started, nil, 0o644); err != nil {
			return nil, err
		}
	}
	time.Sleep(d) // deliberately ignores cancellation
	return map[string]any{"slept": d.Seconds()}, nil
}

func fail(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
	msg := "the example handler failed on purpose"
	if _, err := req.Kwarg("message", &msg); err != nil {
		return nil, err
	}
	return nil, executor.Fail("example_failure", "E_EXAMPLE", msg).WithDetails(map[string]any{"job_id": req.JobID})
}

func retry(_ context.Context, req *rrq.ExecutionRequest) (any, error) {
	var after float64
	if _, err := req.Kwarg("after_seconds", &after); err != nil {
		return nil, executor.Fail("bad_arguments", "", "kwargs.after_seconds must be a number")
	}
	return nil, executor.Retry(time.Duration(after*float64(time.Second)), fmt.Errorf("try again in %gs", after))
}

// traceCall says which trace an attempt belongs to: in its result, on stderr, and in
// the error of an attempt below kwargs.succeed_at.
func traceCall(logger *slog.Logger, req *rrq.ExecutionRequest) (any, error) {
	var succeedAt int
	if _, err := req.Kwarg("succeed_at", &succeedAt); err != nil {
		return nil, executor.Fail("bad_arguments", "", "kwargs.succeed_at must be an integer")
	}
	tp := req.Context.TraceContext["traceparent"]
	logger.Info("trace call", "job_id", req.JobID, "attempt", req.Context.Attempt, "traceparent", tp)
	if req.Context.Attempt < succeedAt {
		return nil, executor.Fail("example_failure", "", fmt.Sprintf("attempt %d of trace %s fails", req.Context.Attempt, tp))
	}
	return map[string]any{"attempt": req.Context.Attempt, "trace_context": req.Context.TraceContext}, nil
}
