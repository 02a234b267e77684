package main

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/sandbox"
	"github.com/hero-coordinator/hero/lib/store"
)

// executionKind is how the runner runs one kind of job: a new kind (say, a job in a
// container) is one more implementation, registered by name in executionKinds, and a
// case in kindOf — not another branch at the top of every run.
type executionKind interface {
	// run runs the claimed and started job j to its end (or hands it back). release
	// (nil: none) is what is left to do once the job's end is written: its sandbox's
	// teardown, off the time from its end to its dependents' start.
	run(ctx context.Context, r *runner, db *store.DB, cl *store.Claim, j *model.Job, log zerolog.Logger) (res runResult, release func())
}

// Execution kinds' names (logs and the executionKinds registry).
const (
	kindScriptSandboxed = "script-sandboxed" // a script in its own bwrap sandbox (made ahead when it can be)
	kindScriptPlain     = "script-plain"     // a script without a sandbox (--sandbox=none)
	kindHandler         = "rrq-handler"      // a handler call in an executor pool (RRQ)
)

// executionKinds are the kinds this runner knows, by name.
func executionKinds() map[string]executionKind {
	return map[string]executionKind{
		kindScriptSandboxed: scriptKind{},
		kindScriptPlain:     scriptKind{},
		kindHandler:         handlerKind{},
	}
}

// kindOf names the kind that runs j here.
func (r *runner) kindOf(j *model.Job) string {
	switch {
	case j.IsHandler():
		return kindHandler
	case r.sandbox.Mode() == sandbox.ModeNone:
		return kindScriptPlain
	}
	return kindScriptSandboxed
}

// scriptKind runs a script under its interpreter, in the runner's sandbox (its mode
// tells sandboxed from plain; lib/execcore takes a sandbox made ahead when there is
// one for the job's limits).
type scriptKind struct{}

func (scriptKind) run(ctx context.Context, r *runner, db *store.DB, cl *store.Claim, j *model.Job, log zerolog.Logger) (runResult, func()) {
	var release func()
	res := r.runScript(ctx, db, cl, j, log, &release)
	return res, release
}

// handlerKind calls a handler job's function in its executor's pool.
type handlerKind struct{}

func (handlerKind) run(ctx context.Context, r *runner, db *store.DB, cl *store.Claim, j *model.Job, log zerolog.Logger) (runResult, func()) {
	return r.runHandler(ctx, db, cl, j, log), nil
}
