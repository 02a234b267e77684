// Command testrun runs `go test -json` commands side by side and reports them as a
// person reads a long suite: a line per package as it ends, the output of each failed
// test when it fails, and at the end what failed, the slowest tests and the total
// time. Every command runs to its end even when another fails; the exit status is 1
// when anything failed (a test, a build, a command's own exit status).
//
//	testrun [-j N] [-json-dir DIR] [-slowest N] [-progress D] 'LABEL: COMMAND' ...
//
// Each argument is a label and a bash command run from the current directory,
// e.g. `lib: cd lib && go test -json -race ./...`; the command must write go test's
// -json stream to its standard output. `make test` is the main user (Makefile).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("testrun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jobs := fs.Int("j", 2, "commands run at once")
	jsonDir := fs.String("json-dir", "", "keep each command's -json stream in this directory (LABEL.json)")
	slowest := fs.Int("slowest", 10, "list this many of the slowest tests at the end")
	every := fs.Duration("progress", time.Minute, "how often to print a line for each package still running (0: never)")
	fs.Usage = func() {
		_, _ = fmt.Fprintln(stderr, "usage: testrun [-j N] [-json-dir DIR] [-slowest N] [-progress D] 'LABEL: COMMAND' ...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	runs, err := parseRuns(fs.Args())
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "testrun:", err)
		return 2
	}
	if *jobs < 1 {
		_, _ = fmt.Fprintln(stderr, "testrun: -j must be at least 1")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := newReporter(stdout, time.Now())
	s := &suite{rep: rep, jobs: *jobs, jsonDir: *jsonDir}
	if *every > 0 {
		stopProgress := startProgress(rep, *every)
		defer stopProgress()
	}
	s.runAll(ctx, runs)
	return rep.summary(*slowest)
}

// startProgress prints the running packages' progress every d until the returned
// function is called.
func startProgress(rep *reporter, d time.Duration) func() {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				rep.progress()
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}
