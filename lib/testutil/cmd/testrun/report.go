package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"
)

// modulePrefix is cut from package paths in the report.
const modulePrefix = "github.com/hero-coordinator/hero/"

// event is one line of `go test -json` (cmd/test2json), with the build events of
// `go test -json` (build-output, build-fail) keyed by ImportPath.
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// pkgKey names a package within one command: a package may run in several.
type pkgKey struct{ label, pkg string }

// pkgRun is what is known of a package while it runs.
type pkgRun struct {
	tests       map[string]*capped
	since       map[string]time.Time // when each running test started
	output      capped
	passed      int
	failed      []string
	skipped     int
	buildFailed bool
}

// testTime is a finished test's duration, for the slowest list.
type testTime struct {
	label, pkg, test string
	elapsed          float64
}

// failure is one line of the closing summary.
type failure struct{ what, detail string }

// cmdState is what is known of one command.
type cmdState struct {
	packages int
	failed   bool
}

// reporter prints as events arrive, from any number of commands at once.
type reporter struct {
	mu       sync.Mutex
	out      io.Writer
	start    time.Time
	now      func() time.Time
	pkgs     map[pkgKey]*pkgRun
	build    map[pkgKey]*capped
	cmds     map[string]*cmdState
	times    []testTime
	failures []failure
	passed   int
	failed   int
	skipped  int
	npkgs    int
}

func newReporter(out io.Writer, start time.Time) *reporter {
	return &reporter{out: out, start: start, now: time.Now, pkgs: map[pkgKey]*pkgRun{},
		build: map[pkgKey]*capped{}, cmds: map[string]*cmdState{}}
}

// printf writes a report line; a write error (a closed terminal) is not the suite's.
func (r *reporter) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(r.out, format, args...)
}

func (r *reporter) stamp() string {
	d := r.now().Sub(r.start).Round(time.Second)
	return fmt.Sprintf("[%3dm%02ds]", int(d.Minutes()), int(d.Seconds())%60)
}

func (r *reporter) started(label, command string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cmds[label] = &cmdState{}
	r.printf("%s start %s: %s\n", r.stamp(), label, command)
}

// stderrLine passes a command's standard error through, with its label.
func (r *reporter) stderrLine(label, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.printf("%s: %s\n", label, line)
}

// commandFailed records a command that failed outside any package.
func (r *reporter) commandFailed(label, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commandFailedLocked(label, why)
}

func (r *reporter) commandFailedLocked(label, why string) {
	if c := r.cmds[label]; c != nil {
		c.failed = true
	}
	r.failures = append(r.failures, failure{what: label, detail: why})
	r.printf("%s FAIL  %s: %s\n", r.stamp(), label, why)
}

// ended records a command's end: an exit status that no package failure explains
// is a failure of its own, and so is a command that ran no package.
func (r *reporter) ended(label string, err error, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cmds[label]
	var exit *exec.ExitError
	switch {
	case err != nil && !c.failed && errors.As(err, &exit):
		r.commandFailedLocked(label, fmt.Sprintf("exited with status %d (see its lines above)", exit.ExitCode()))
	case err != nil && !c.failed:
		r.commandFailedLocked(label, err.Error())
	case err == nil && c.packages == 0:
		r.commandFailedLocked(label, "ran no package (its output was not go test -json?)")
	}
	r.printf("%s end   %s in %s\n", r.stamp(), label, took.Round(time.Second))
}

// line takes one line of a command's standard output.
func (r *reporter) line(label, line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ev event
	if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &ev) != nil {
		r.printf("%s: %s\n", label, line)
		return
	}
	switch {
	case ev.Action == "build-output":
		r.buildOutput(label, ev)
	case ev.Action == "build-fail":
	case ev.Package == "":
	case ev.Test != "":
		r.testEvent(label, ev)
	default:
		r.packageEvent(label, ev)
	}
}

func (r *reporter) buildOutput(label string, ev event) {
	k := pkgKey{label, ev.ImportPath}
	if r.build[k] == nil {
		r.build[k] = &capped{}
	}
	r.build[k].add(ev.Output)
}

func (r *reporter) pkg(label, name string) *pkgRun {
	k := pkgKey{label, name}
	p := r.pkgs[k]
	if p == nil {
		p = &pkgRun{tests: map[string]*capped{}, since: map[string]time.Time{}}
		r.pkgs[k] = p
	}
	return p
}

func (r *reporter) testEvent(label string, ev event) {
	p := r.pkg(label, ev.Package)
	switch ev.Action {
	case "run":
		p.tests[ev.Test] = &capped{}
		p.since[ev.Test] = r.now()
	case "output":
		if o := p.tests[ev.Test]; o != nil {
			o.add(ev.Output)
		}
	case "pass", "skip":
		if ev.Action == "pass" {
			p.passed++
			r.passed++
		} else {
			p.skipped++
			r.skipped++
		}
		delete(p.tests, ev.Test)
		delete(p.since, ev.Test)
		if ev.Action == "pass" {
			r.times = append(r.times, testTime{label: label, pkg: ev.Package, test: ev.Test, elapsed: ev.Elapsed})
		}
	case "fail":
		p.failed = append(p.failed, ev.Test)
		r.failed++
		r.printf("--- FAIL: %s (%.1fs) in %s\n", ev.Test, ev.Elapsed, r.where(label, ev.Package))
		if o := p.tests[ev.Test]; o != nil {
			o.write(r.out, "    ")
		}
		delete(p.tests, ev.Test)
		delete(p.since, ev.Test)
		r.times = append(r.times, testTime{label: label, pkg: ev.Package, test: ev.Test, elapsed: ev.Elapsed})
	}
}

// progress prints a line for each package still running: how many of its tests
// ended, and its longest-running test (a long package, e2e's, is not silent).
func (r *reporter) progress() {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]pkgKey, 0, len(r.pkgs))
	for k := range r.pkgs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].label+keys[i].pkg < keys[j].label+keys[j].pkg })
	for _, k := range keys {
		p := r.pkgs[k]
		if len(p.since) == 0 {
			continue // building, or between tests
		}
		var oldest string
		for name, at := range p.since {
			if strings.Contains(name, "/") {
				continue
			}
			if oldest == "" || at.Before(p.since[oldest]) {
				oldest = name
			}
		}
		if oldest == "" {
			continue
		}
		r.printf("%s ...   %-44s %d passed, %d failed so far; running %s (%s)\n", r.stamp(), r.where(k.label, k.pkg),
			p.passed, len(p.failed), oldest, r.now().Sub(p.since[oldest]).Round(time.Second))
	}
}

func (r *reporter) packageEvent(label string, ev event) {
	p := r.pkg(label, ev.Package)
	switch ev.Action {
	case "output":
		p.output.add(ev.Output)
		return
	case "start", "run", "pause", "cont", "bench":
		return
	}
	delete(r.pkgs, pkgKey{label, ev.Package})
	if c := r.cmds[label]; c != nil {
		c.packages++
	}
	if ev.Action == "skip" || (ev.Action == "pass" && p.passed+len(p.failed)+p.skipped == 0) {
		return // no test files, or no test matched: nothing to report
	}
	r.npkgs++
	counts := fmt.Sprintf("%d passed", p.passed)
	if p.skipped > 0 {
		counts += fmt.Sprintf(", %d skipped", p.skipped)
	}
	if ev.Action == "pass" {
		r.printf("%s ok    %-44s %6.1fs  %s\n", r.stamp(), r.where(label, ev.Package), ev.Elapsed, counts)
		return
	}
	r.packageFailed(label, ev, p, counts)
}

func (r *reporter) packageFailed(label string, ev event, p *pkgRun, counts string) {
	where := r.where(label, ev.Package)
	if c := r.cmds[label]; c != nil {
		c.failed = true
	}
	detail := fmt.Sprintf("%d failed: %s", len(p.failed), strings.Join(p.failed, ", "))
	if b := r.build[pkgKey{label, ev.Package}]; ev.FailedBuild != "" || len(p.failed) == 0 && b != nil {
		detail = "build failed"
		if b == nil {
			b = r.build[pkgKey{label, ev.FailedBuild}]
		}
		if b != nil {
			b.write(r.out, "    ")
		}
	} else if len(p.failed) == 0 {
		detail = "failed outside any test (a panic, a timeout, TestMain)"
	}
	if len(p.failed) == 0 || len(p.tests) > 0 {
		// A panic or a timeout: the package's own lines, then the tests cut short.
		r.printf("--- FAIL: %s: its output\n", where)
		p.output.write(r.out, "    ")
		for name, o := range p.tests {
			r.printf("--- still running when it ended: %s\n", name)
			o.write(r.out, "    ")
		}
	}
	r.failures = append(r.failures, failure{what: where, detail: detail})
	r.printf("%s FAIL  %-44s %6.1fs  %s, %s\n", r.stamp(), where, ev.Elapsed, detail, counts)
}

// where names a package in the report, with the command's label when the label is
// not the package's own module (e.g. "tests/e2e [e2e secure]").
func (r *reporter) where(label, pkg string) string {
	short := strings.TrimPrefix(pkg, modulePrefix)
	if short == label || strings.HasPrefix(short, label+"/") {
		return short
	}
	return short + " [" + label + "]"
}

// summary prints what failed, the slowest tests and the totals, and returns the
// exit status: 1 when anything failed.
func (r *reporter) summary(slowest int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	took := r.now().Sub(r.start).Round(time.Second)
	r.printf("\n== %d commands, %d packages in %s\n", len(r.cmds), r.npkgs, took)
	if slowest > 0 && len(r.times) > 0 {
		sort.SliceStable(r.times, func(i, j int) bool { return r.times[i].elapsed > r.times[j].elapsed })
		r.printf("slowest tests:\n")
		n := 0
		for _, t := range r.times {
			if strings.Contains(t.test, "/") {
				continue // a subtest: its parent is listed
			}
			r.printf("  %7.1fs  %-40s %s\n", t.elapsed, r.where(t.label, t.pkg), t.test)
			if n++; n == slowest {
				break
			}
		}
	}
	for _, f := range r.failures {
		r.printf("FAILED %s: %s\n", f.what, f.detail)
	}
	status := "PASS"
	if len(r.failures) > 0 {
		status = "FAIL"
	}
	r.printf("%s in %s\n", status, took)
	r.printf("tests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
	if len(r.failures) > 0 {
		return 1
	}
	return 0
}

// capped keeps the first and the last lines of an output, not all of a long one.
type capped struct {
	head    []string
	tail    []string
	next    int
	dropped int
}

const (
	headLines = 100
	tailLines = 400
)

func (c *capped) add(s string) {
	if strings.HasPrefix(s, "=== RUN") || strings.HasPrefix(s, "=== PAUSE") || strings.HasPrefix(s, "=== CONT") || strings.HasPrefix(s, "=== NAME") {
		return
	}
	if len(c.head) < headLines {
		c.head = append(c.head, s)
		return
	}
	if len(c.tail) < tailLines {
		c.tail = append(c.tail, s)
		return
	}
	c.tail[c.next] = s
	c.next = (c.next + 1) % tailLines
	c.dropped++
}

func (c *capped) write(w io.Writer, indent string) {
	put := func(s string) { _, _ = io.WriteString(w, indent+strings.TrimRight(s, "\n")+"\n") }
	for _, s := range c.head {
		put(s)
	}
	if c.dropped > 0 {
		put(fmt.Sprintf("… %d lines left out (keep them all with make test TEST_JSON=DIR) …", c.dropped))
	}
	for i := range c.tail {
		put(c.tail[(c.next+i)%len(c.tail)])
	}
}
