package main

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
	"github.com/hero-coordinator/hero/lib/model"
)

// parseConfig parses flags as the binary does (no environment) and validates them.
func parseConfig(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	cfg := &Config{}
	fs := config.NewFlagSet("runner", summary)
	cfg.RegisterFlags(fs)
	fs.SetEnvLookup(func(string) (string, bool) { return "", false })
	base := []string{"--redis-url", "redis://127.0.0.1:1/0", "--work-dir", t.TempDir()}
	if err := fs.Parse(append(base, args...), io.Discard); err != nil {
		t.Fatal(err)
	}
	return cfg, cfg.Validate()
}

// Bad settings are refused with an error naming the flag and what is wrong.
func TestConfigRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runner-id", "0"}, "--runner-id must be at least 1"},
		{[]string{"--interpreters", "sh"}, `--interpreters: "sh" is not type=command`},
		{[]string{"--interpreters", "Bad!=x"}, "--interpreters:"},
		{[]string{"--script-types", "sh,Bad!"}, "--script-types:"},
		{[]string{"--interpreters", "", "--script-types", ""}, "no script types to serve"},
		{[]string{"--contexts", "1,x"}, `--contexts: "x" is not a context id`},
		{[]string{"--contexts", "0"}, `--contexts: "0" is not a context id`},
		{[]string{"--concurrency", "0"}, "--concurrency must be between 1 and 4096"},
		{[]string{"--claim-loops", "0"}, "--claim-loops must be between 1 and 16"},
		{[]string{"--claim-loops", "17"}, "--claim-loops must be between 1 and 16"},
		{[]string{"--worker-id", "a b"}, "--worker-id must be a name without spaces"},
		{[]string{"--lease", "2s", "--heartbeat", "1500ms"}, "--lease must be at least 1s and at least twice --heartbeat"},
		{[]string{"--output-max-bytes", "10"}, "--output-max-bytes and --log-max-bytes must be at least 1024"},
		{[]string{"--executor-cancel-grace", "0s"}, "--executor-cancel-grace must be positive"},
		{[]string{"--work-dir", "/nonexistent/dir"}, `--work-dir "/nonexistent/dir" is not a directory`},
		{[]string{"--executors", "py"}, "--executors: executor py: cmd=<command> is required"},
		{[]string{"--executors", "=x;cmd=a"}, `--executors: "=x;cmd=a" must start with the executor's name`},
		{[]string{"--executors", "py;cmd=a|py;cmd=b"}, `--executors: executor "py" given twice`},
		{[]string{"--executors", "py;cmd=a;size=0"}, "--executors: executor py: size=0: must be 1-64"},
		{[]string{"--executors", "py;cmd=a;inflight=2000"}, "--executors: executor py: inflight=2000: must be 1-1024"},
		{[]string{"--executors", "py;cmd=a;pipeline=x"}, "--executors: executor py: pipeline=x:"},
		{[]string{"--executors", "py;cmd=a;connections=2"}, "connections=2: must be 1"},
		{[]string{"--executors", "py;cmd=a;ro=rel/dir"}, `ro=rel/dir: "rel/dir" is not an absolute path`},
		{[]string{"--executors", "py;cmd=a;transport=udp"}, "transport=udp: must be unix or tcp"},
		{[]string{"--executors", "py;cmd=a;colour=red"}, "colour=red: unknown key"},
		{[]string{"--executors", "py;cmd=a;size"}, `--executors: executor py: "size" is not key=value`},
		{[]string{"--executors", "py;cmd=a;start=later"}, "start=later: must be ahead or demand"},
		{[]string{"--executors", "py;cmd=a;startup=soon"}, `startup=soon: time: invalid duration "soon"`},
		{[]string{"--executors", "py;cmd=a;startup=1ms"}, "startup=1ms: must be 100ms-1h0m0s"},
		{[]string{"--executors", "py;cmd=a;wait=2h"}, "wait=2h: must be 100ms-1h0m0s"},
	} {
		_, err := parseConfig(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// Good settings: the served script types (sorted; by default every type with an
// interpreter and every executor named after a script type), the contexts, the
// executors' settings and the defaults derived from others.
func TestConfigReadsSettings(t *testing.T) {
	cfg, err := parseConfig(t, "--runner-id", "7", "--contexts", "3, 9", "--interpreters", "sh=/bin/sh -e,bash=bash",
		"--executors", "python;cmd=python3 -u x.py;size=2;inflight=8;pipeline=2;connections=1;transport=tcp;shared=true;sandbox=false;ro=/a:/b;start=demand;startup=30s;wait=45s")
	if err != nil {
		t.Fatal(err)
	}
	if want := []model.ScriptType{"bash", "python", "sh"}; !reflect.DeepEqual(cfg.types, want) {
		t.Fatalf("script types %v, want %v", cfg.types, want)
	}
	if want := []uint32{3, 9}; !reflect.DeepEqual(cfg.contextIDs, want) {
		t.Fatalf("contexts %v, want %v", cfg.contextIDs, want)
	}
	if want := []string{"/bin/sh", "-e"}; !reflect.DeepEqual(cfg.interpreters["sh"], want) {
		t.Fatalf("sh interpreter %v, want %v", cfg.interpreters["sh"], want)
	}
	want := executorConfig{name: "python", cmd: []string{"python3", "-u", "x.py"}, size: 2, inflight: 8, pipeline: 2, conns: 1,
		transport: "tcp", shared: true, readOnly: []string{"/a", "/b"}, noSandbox: true, demand: true, startup: 30 * time.Second, wait: 45 * time.Second}
	if len(cfg.executors) != 1 || !reflect.DeepEqual(cfg.executors[0], want) {
		t.Fatalf("executors %+v, want [%+v]", cfg.executors, want)
	}
	if !strings.HasSuffix(cfg.WorkerID, "-7") || !strings.HasSuffix(cfg.StateDir, cfg.WorkerID) {
		t.Fatalf("derived worker id %q and state dir %q", cfg.WorkerID, cfg.StateDir)
	}
	cfg, err = parseConfig(t, "--contexts", "*", "--script-types", "sh")
	if err != nil || cfg.contextIDs != nil || !reflect.DeepEqual(cfg.types, []model.ScriptType{"sh"}) {
		t.Fatalf("--contexts * --script-types sh: contexts %v types %v, %v", cfg.contextIDs, cfg.types, err)
	}
}

// runner --help lists every key of an --executors entry (connections among them),
// and an unknown key's error names them all.
func TestExecutorsHelpListsEveryKey(t *testing.T) {
	fs := config.NewFlagSet("runner", summary)
	(&Config{}).RegisterFlags(fs)
	var help strings.Builder
	fs.PrintUsage(&help)
	_, err := parseConfig(t, "--executors", "py;cmd=a;colour=red")
	if err == nil {
		t.Fatal("an unknown key was accepted")
	}
	_, listed, _ := strings.Cut(err.Error(), "unknown key (")
	named := strings.Split(strings.TrimSuffix(listed, ")"), ", ")
	for _, k := range []string{"cmd", "size", "inflight", "pipeline", "connections", "transport", "shared", "start", "startup", "wait", "ro", "sandbox"} {
		if !strings.Contains(help.String(), ";"+k+"=") {
			t.Errorf("runner --help does not list the --executors key %s", k)
		}
		if !slices.Contains(named, k) {
			t.Errorf("the unknown key's error does not name %s: %v", k, err)
		}
	}
}

// The runner claims with one claim loop unless told otherwise: each claim then takes
// every slot freed while it waited for a wake-up (larger claims under load, fewer
// round trips a job; docs/benchmarks.md, "The runner's claim loops").
func TestOneClaimLoopByDefault(t *testing.T) {
	cfg := &Config{}
	fs := config.NewFlagSet("runner", summary)
	cfg.RegisterFlags(fs)
	fs.SetEnvLookup(func(string) (string, bool) { return "", false })
	if err := fs.Parse(nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	if cfg.ClaimLoops != 1 {
		t.Fatalf("--claim-loops defaults to %d, want 1", cfg.ClaimLoops)
	}
}
