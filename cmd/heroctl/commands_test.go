package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// heroctl runs the command line in-process; it returns stdout, stderr and the exit code.
func heroctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errw bytes.Buffer
	code := run(context.Background(), args, &out, &errw)
	return out.String(), errw.String(), code
}

// Every subcommand's --help: its usage line, every flag with its default, an example.
func TestEveryCommandHelp(t *testing.T) {
	all := commands()
	if len(all) < 40 {
		t.Fatalf("only %d commands in the table", len(all))
	}
	top, _, code := heroctl(t, "help")
	if code != 0 {
		t.Fatalf("heroctl help: exit %d", code)
	}
	for _, cmd := range all {
		if !strings.Contains(top, "  "+cmd.name+" ") {
			t.Errorf("heroctl help does not list %q", cmd.name)
		}
		checkHelp(t, cmd)
	}
}

func checkHelp(t *testing.T, cmd command) {
	t.Helper()
	out, errOut, code := heroctl(t, append(strings.Fields(cmd.name), "--help")...)
	if code != 0 || errOut != "" {
		t.Errorf("%s --help: exit %d, stderr %q", cmd.name, code, errOut)
		return
	}
	if !strings.HasPrefix(out, "Usage: heroctl "+cmd.name) || !strings.Contains(out, "\nExample:\n  heroctl ") || cmd.summary == "" {
		t.Errorf("%s --help lacks its usage line, summary or example:\n%s", cmd.name, out)
	}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	cmd.define(&cli{g: &globals{}}, fs)
	fs.VisitAll(func(f *flag.Flag) {
		line := helpLine(out, f.Name)
		_, use := flag.UnquoteUsage(f)
		if line == "" || use == "" || !strings.Contains(line, use) || !strings.Contains(line, "(default "+defaultText(f)+")") {
			t.Errorf("%s --help: flag %s has no line with its use and default %q: %q", cmd.name, f.Name, defaultText(f), line)
		}
	})
}

// helpLine is the help's line of a flag.
func helpLine(help, name string) string {
	for _, l := range strings.Split(help, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && (f[0] == "--"+name || f[0] == "-"+name) {
			return l
		}
	}
	return ""
}

func TestVersion(t *testing.T) {
	out, _, code := heroctl(t, "version")
	if code != 0 || !strings.HasPrefix(out, "heroctl ") || !strings.Contains(out, "go1.") {
		t.Errorf("version: exit %d %q", code, out)
	}
	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		rev, date string
		info      *debug.BuildInfo
		want      string
	}{
		{"v1-3-gabc", "2026-12-06T00:00:00Z", vcs, "heroctl (devel) revision v1-3-gabc built 2026-12-06T00:00:00Z go1.26.8"},
		{"", "", vcs, "heroctl (devel) revision 0123abcd-dirty built 2026-12-01T10:00:00Z (its commit's time) go1.26.8"},
		{"", "", &debug.BuildInfo{GoVersion: "go1.26.8"}, "heroctl (devel) revision unknown built unknown go1.26.8"},
		{"", "", nil, "heroctl (devel) revision unknown built unknown unknown"},
	} {
		if got := versionOf(tc.rev, tc.date, tc.info); got != tc.want {
			t.Errorf("versionOf(%q, %q, …) = %q, want %q", tc.rev, tc.date, got, tc.want)
		}
	}
}

// The linker's -X flags of the Makefile and the Dockerfile name heroctl's variables.
func TestVersionFromLinkerFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("-short (make test-quick): this test builds heroctl; make test runs it")
	}
	bin := filepath.Join(t.TempDir(), "heroctl")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.revision=abc123def456 -X main.buildDate=2026-12-06T01:02:03Z", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.Contains(string(out), "revision abc123def456 built 2026-12-06T01:02:03Z go1.") {
		t.Errorf("heroctl version of a build with -ldflags -X: %q, %v", out, err)
	}
}

func TestUnknownCommandsAndVerbs(t *testing.T) {
	for args, want := range map[string]string{
		"bogus":             `unknown command "bogus"`,
		"flow bogus":        `flow: unknown verb "bogus": want submit|create|`,
		"flow":              "flow submit|create|",
		"flow wait":         "flow wait ID",
		"flow get 1 --nope": "flag provided but not defined: -nope (heroctl flow get --help)",
	} {
		_, errOut, code := heroctl(t, strings.Fields(args)...)
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("heroctl %s: exit %d, %q; want 2 and %q", args, code, errOut, want)
		}
	}
}

// The bash completion completes objects, verbs and a command's flags.
func TestCompletionBash(t *testing.T) {
	script, _, code := heroctl(t, "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d", code)
	}
	file := filepath.Join(t.TempDir(), "heroctl.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for line, want := range map[string]string{
		"heroctl fl":               "flow",
		"heroctl flow su":          "submit",
		"heroctl flow submit --wa": "--wait --watch",
		"heroctl events --fl":      "--flow",
		"heroctl job logs x -":     "--caller -f",
	} {
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		prog := `source "$1"; COMP_WORDS=(` + strings.Join(quoteAll(words), " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _heroctl; echo "${COMPREPLY[*]}"`
		out, err := exec.Command("bash", "-c", prog, "bash", file).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("complete %q: %q %v; want %q", line, out, err, want)
		}
	}
}

func quoteAll(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = "'" + w + "'"
	}
	return out
}

// zsh loads the bash script through bashcompinit; fish gets its own. Where the shell
// is installed (CI installs both: .ci/run), its script is loaded and asked for
// completions; elsewhere it is checked by content only.
func TestCompletionZshFish(t *testing.T) {
	zsh, _, code := heroctl(t, "completion", "zsh")
	if code != 0 || !strings.HasPrefix(strings.SplitN(zsh, "\n", 2)[1], "autoload -U +X bashcompinit && bashcompinit") || !strings.Contains(zsh, "complete -F _heroctl heroctl") {
		t.Errorf("completion zsh: exit %d\n%s", code, zsh)
	}
	fish, _, code := heroctl(t, "completion", "fish")
	if code != 0 || !strings.Contains(fish, "complete -c heroctl -n '__fish_seen_subcommand_from flow; and __fish_seen_subcommand_from submit' -l wait") {
		t.Errorf("completion fish: exit %d\n%s", code, fish)
	}
	if _, errOut, code := heroctl(t, "completion", "tcsh"); code != 2 || !strings.Contains(errOut, "want bash, zsh or fish") {
		t.Errorf("completion tcsh: exit %d %q", code, errOut)
	}
	lines := map[string][]string{
		"heroctl fl":               {"flow"},
		"heroctl flow su":          {"submit"},
		"heroctl flow submit --wa": {"--wait", "--watch"},
		"heroctl job logs x -":     {"--caller", "-f"},
	}
	if _, err := exec.LookPath("zsh"); err == nil {
		t.Run("zsh", func(t *testing.T) { zshCompletes(t, zsh, lines) })
	}
	if _, err := exec.LookPath("fish"); err == nil {
		t.Run("fish", func(t *testing.T) { fishCompletes(t, fish, lines) })
	}
}

// zshCompletes loads the zsh script and calls its function as zsh's bashcompinit
// does (sh emulation, COMP_WORDS and COMP_CWORD set); zsh's own matcher narrows the
// candidates to the typed prefix afterwards, so the wanted ones must be among them.
func zshCompletes(t *testing.T, script string, lines map[string][]string) {
	file := filepath.Join(t.TempDir(), "heroctl.zsh")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	prog := `compdef() { :; } # compinit's, which complete calls: not needed to call _heroctl
source "$1"; shift
emulate -L sh; setopt kshglob noshglob braceexpand nokshautoload
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _heroctl; print -r -- "${COMPREPLY[*]}"`
	for line, want := range lines {
		args := append([]string{"-f", "-c", prog, "zsh", file}, strings.Fields(line)...)
		out, err := exec.Command("zsh", args...).CombinedOutput()
		got := strings.Fields(string(out))
		for _, w := range want {
			if err != nil || !slices.Contains(got, w) {
				t.Errorf("zsh: complete %q: %q %v; want %q among them", line, out, err, w)
			}
		}
	}
}

// fishCompletes loads the fish script and asks fish (complete -C) for each line.
func fishCompletes(t *testing.T, script string, lines map[string][]string) {
	file := filepath.Join(t.TempDir(), "heroctl.fish")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for line, want := range lines {
		out, err := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, file, line).CombinedOutput()
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			got = append(got, strings.SplitN(l, "\t", 2)[0]) // a candidate, then its description
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("fish: complete %q: %q %v; want %q", line, got, err, want)
		}
	}
}

// Flow-file errors name the file, the line and the field, and suggest a field.
func TestFlowFileErrors(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ yaml, want string }{
		"typo.yaml":    {"env: {A: b}\njobs:\n  - name: a\n    type: sh\n    scirpt: echo hi\n", `typo.yaml:5: job 1: unknown field "scirpt"; did you mean "script"?`},
		"top.yaml":     {"job:\n  - name: a\n", `top.yaml:1: the flow: unknown field "job"; did you mean "jobs"?`},
		"type.yaml":    {"jobs:\n  - name: a\n    type: sh\n    script: x\n    timeout: soon\n", "type.yaml:5: cannot unmarshal !!str `soon` into uint32"},
		"deps.yaml":    {"jobs:\n  - {name: a, type: sh, script: x, depends: [z]}\n", `deps.yaml: job "a" depends on "z", which is not a job of this flow`},
		"cycle.yaml":   {"jobs:\n  - {name: a, type: sh, script: x, depends: [b]}\n  - {name: b, type: sh, script: x, depends: [a]}\n", "dependency cycle among jobs a, b"},
		"notype.yaml":  {"jobs:\n  - name: a\n    script: x\n  - name: b\n    script: y\n", `notype.yaml:2: job "a": has no type`},
		"handler.yaml": {"jobs:\n  - {name: a, function: 'e#h', script: x}\n", `handler.yaml:2: job "a": a handler job (function) has no script or file`},
		"empty.yaml":   {"", "empty.yaml: no jobs"},
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := loadFlowFile(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), p) {
			t.Errorf("%s: %v\nwant %q", name, err, tc.want)
		}
	}
}

// A good file: jobs in file order with their dependencies, a file: read beside it.
func TestFlowFileLoads(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "b.py"), []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ok.yaml")
	src := "env: {A: x}\njobs:\n  - {name: b, type: python, file: b.py, depends: [a]}\n  - {name: a, type: sh, script: 'echo', retries: 2}\n  - {name: h, function: 'e#add', args: [1, 2], kwargs: {k: v}}\n"
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	spec, err := loadFlowFile(p)
	if err != nil {
		t.Fatal(err)
	}
	order, err := spec.Order()
	if err != nil || len(order) != 3 || order[0] != 1 || order[1] != 2 || order[2] != 0 {
		t.Fatalf("order %v %v", order, err)
	}
	b, a, h := spec.Jobs[0], spec.Jobs[1], spec.Jobs[2]
	if b.Job.Script != "print(1)\n" || b.Depends[0] != "a" || a.Job.Retries != 2 || spec.Env["A"] != "x" ||
		string(h.Job.Args) != "[1,2]" || string(h.Job.Kwargs) != `{"k":"v"}` || h.Job.FunctionName != "e#add" {
		t.Errorf("spec %+v", spec)
	}
}

func TestSuggest(t *testing.T) {
	known := yamlFields(flowFileJob{})
	for in, want := range map[string]string{"scirpt": "script", "dependson": "depends", "depend": "depends", "tpye": "type", "zzzzzz": ""} {
		got := suggest(in, known)
		if (want == "") != (got == "") || (want != "" && !strings.Contains(got, `"`+want+`"`)) {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
