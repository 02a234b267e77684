package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// jsonCmd is a command that prints the given go test -json lines and exits with code.
func jsonCmd(t *testing.T, code int, lines ...string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "out.json")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("cat %s; exit %d", f, code)
}

const pkgA = modulePrefix + "lib/a"

func passing(pkg string) []string {
	return []string{
		`{"Action":"start","Package":"` + pkg + `"}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestOK"}`,
		`{"Action":"output","Package":"` + pkg + `","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"` + pkg + `","Test":"TestOK","Output":"--- PASS: TestOK (2.50s)\n"}`,
		`{"Action":"pass","Package":"` + pkg + `","Test":"TestOK","Elapsed":2.5}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestSkipped"}`,
		`{"Action":"skip","Package":"` + pkg + `","Test":"TestSkipped","Elapsed":0}`,
		`{"Action":"output","Package":"` + pkg + `","Output":"ok  \t` + pkg + `\t2.6s\n"}`,
		`{"Action":"pass","Package":"` + pkg + `","Elapsed":2.6}`,
	}
}

func failing(pkg string) []string {
	return []string{
		`{"Action":"start","Package":"` + pkg + `"}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestBroken"}`,
		`{"Action":"output","Package":"` + pkg + `","Test":"TestBroken","Output":"    x_test.go:12: the flow ended failed, want finished\n"}`,
		`{"Action":"fail","Package":"` + pkg + `","Test":"TestBroken","Elapsed":7.25}`,
		`{"Action":"run","Package":"` + pkg + `","Test":"TestFine"}`,
		`{"Action":"pass","Package":"` + pkg + `","Test":"TestFine","Elapsed":0.1}`,
		`{"Action":"output","Package":"` + pkg + `","Output":"FAIL\n"}`,
		`{"Action":"fail","Package":"` + pkg + `","Elapsed":7.4}`,
	}
}

func runSuite(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), code
}

func mustContain(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the report does not say %q:\n%s", w, out)
		}
	}
}

// A failed command does not stop the others: each runs, the failure is named in the
// summary with its test, the failed test's output is shown, and the status is 1.
func TestEveryCommandRunsAndFailuresAreSummed(t *testing.T) {
	out, code := runSuite(t, "-j", "1",
		"services/x: "+jsonCmd(t, 1, failing(modulePrefix+"services/x")...),
		"lib: "+jsonCmd(t, 0, passing(pkgA)...),
		"e2e secure: "+jsonCmd(t, 0, passing(modulePrefix+"tests/e2e")...))
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	mustContain(t, out,
		"FAIL: TestBroken (7.2s) in services/x",
		"x_test.go:12: the flow ended failed, want finished",
		"ok    lib/a", "1 passed, 1 skipped",
		"ok    tests/e2e [e2e secure]",
		"FAILED services/x: 1 failed: TestBroken",
		"tests: 3 passed, 1 failed, 2 skipped")
	if !regexp.MustCompile(`(?m)^FAIL in \d+s$`).MatchString(out) {
		t.Errorf("no closing FAIL line with the time:\n%s", out)
	}
	if strings.Count(out, "FAILED ") != 1 {
		t.Errorf("one failure expected in the summary (the command's exit status is explained by it):\n%s", out)
	}
	if strings.Contains(out, "x_test.go:12") && strings.Index(out, "x_test.go:12") > strings.Index(out, "slowest tests:") {
		t.Errorf("the failed test's output comes after the summary, want it when the test failed:\n%s", out)
	}
}

func TestAllPassing(t *testing.T) {
	out, code := runSuite(t, "lib: "+jsonCmd(t, 0, passing(pkgA)...))
	if code != 0 {
		t.Errorf("exit %d, want 0:\n%s", code, out)
	}
	mustContain(t, out, "== 1 commands, 1 packages in", "slowest tests:", "2.5s  lib/a", "TestOK", "PASS in ", "tests: 1 passed, 0 failed, 1 skipped")
}

// A command that fails without a failed package (a build error on its standard
// error, a bad flag) is a failure; so is one that ran no package at all.
func TestCommandFailuresOutsidePackages(t *testing.T) {
	out, code := runSuite(t,
		"broken: echo 'x.go:3:1: syntax error' >&2; exit 1",
		"silent: true")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	mustContain(t, out, "broken: x.go:3:1: syntax error",
		"FAILED broken: exited with status 1",
		"FAILED silent: ran no package")
}

// go test -json's build events: the compiler's lines are shown with the failure.
func TestBuildFailure(t *testing.T) {
	pkg := modulePrefix + "lib/b"
	out, code := runSuite(t, "lib: "+jsonCmd(t, 1,
		`{"ImportPath":"`+pkg+` [`+pkg+`.test]","Action":"build-output","Output":"lib/b/b.go:4:2: undefined: nope\n"}`,
		`{"ImportPath":"`+pkg+` [`+pkg+`.test]","Action":"build-fail"}`,
		`{"Action":"start","Package":"`+pkg+`"}`,
		`{"Action":"output","Package":"`+pkg+`","Output":"FAIL\t`+pkg+` [build failed]\n"}`,
		`{"Action":"fail","Package":"`+pkg+`","Elapsed":0,"FailedBuild":"`+pkg+` [`+pkg+`.test]"}`))
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	mustContain(t, out, "lib/b/b.go:4:2: undefined: nope", "FAILED lib/b: build failed")
}

// A package that ends without its running test ending (a panic, go test's
// -timeout): the package's output and the test cut short are shown.
func TestPanicShowsTheTestCutShort(t *testing.T) {
	pkg := modulePrefix + "lib/c"
	out, code := runSuite(t, "lib: "+jsonCmd(t, 1,
		`{"Action":"run","Package":"`+pkg+`","Test":"TestHangs"}`,
		`{"Action":"output","Package":"`+pkg+`","Test":"TestHangs","Output":"    c_test.go:9: waiting for the runner\n"}`,
		`{"Action":"output","Package":"`+pkg+`","Output":"panic: test timed out after 20m0s\n"}`,
		`{"Action":"fail","Package":"`+pkg+`","Elapsed":1200}`))
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	mustContain(t, out, "panic: test timed out after 20m0s", "still running when it ended: TestHangs",
		"c_test.go:9: waiting for the runner", "FAILED lib/c: failed outside any test")
}

// Commands run side by side up to -j: with -j 2, two commands that each wait for
// the other's mark both finish (with -j 1 they would wait for ever).
func TestCommandsRunSideBySide(t *testing.T) {
	dir := t.TempDir()
	wait := func(mine, theirs string) string {
		return fmt.Sprintf("touch %s/%s; until [ -e %s/%s ]; do sleep 0.01; done; %s", dir, mine, dir, theirs, jsonCmd(t, 0, passing(modulePrefix+mine)...))
	}
	out, code := runSuite(t, "-j", "2", "one: "+wait("one", "two"), "two: "+wait("two", "one"))
	if code != 0 {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

func TestArguments(t *testing.T) {
	for _, args := range [][]string{{}, {"no label here"}, {"a: true", "a: true"}, {"-j", "0", "a: true"}} {
		if _, code := runSuite(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// -json-dir keeps each command's stream.
func TestJSONDir(t *testing.T) {
	dir := t.TempDir()
	if out, code := runSuite(t, "-json-dir", dir, "e2e secure: "+jsonCmd(t, 0, passing(pkgA)...)); code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "e2e_secure.json"))
	if err != nil || !bytes.Contains(b, []byte(`"Test":"TestOK"`)) {
		t.Errorf("the kept stream: %v %q", err, b)
	}
}

func TestCappedKeepsHeadAndTail(t *testing.T) {
	var c capped
	for i := range headLines + tailLines + 50 {
		c.add(fmt.Sprintf("line %d\n", i))
	}
	var b bytes.Buffer
	c.write(&b, "")
	out := b.String()
	mustContain(t, out, "line 0\n", fmt.Sprintf("line %d\n", headLines-1), "50 lines left out", fmt.Sprintf("line %d\n", headLines+tailLines+49))
	if strings.Contains(out, fmt.Sprintf("line %d\n", headLines+10)) {
		t.Errorf("a line from the middle was kept")
	}
	if strings.Count(out, "\n") != headLines+tailLines+1 {
		t.Errorf("%d lines written", strings.Count(out, "\n"))
	}
}

// A package that runs long gets a progress line: its tests so far and the one running.
func TestProgressNamesTheRunningTest(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	rep := newReporter(&out, now)
	rep.now = func() time.Time { return now }
	rep.started("e2e", "go test")
	for _, l := range []string{
		`{"Action":"run","Package":"` + modulePrefix + `tests/e2e","Test":"TestFast"}`,
		`{"Action":"pass","Package":"` + modulePrefix + `tests/e2e","Test":"TestFast","Elapsed":1}`,
		`{"Action":"run","Package":"` + modulePrefix + `tests/e2e","Test":"TestSlow"}`,
	} {
		rep.line("e2e", l)
	}
	now = now.Add(95 * time.Second)
	rep.progress()
	mustContain(t, out.String(), "[  1m35s] ...   tests/e2e [e2e]", "1 passed, 0 failed so far; running TestSlow (1m35s)")
}
