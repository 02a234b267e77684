package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
	dispatchworker "github.com/hero-coordinator/hero/lib/dispatcher/worker"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/sandbox"
)

// Config is the runner's configuration.
type Config struct {
	config.Common
	RunnerID       uint32
	Contexts       string
	ScriptTypes    string
	Interpreters   string
	Concurrency    int
	ClaimLoops     int
	WorkerID       string
	StateDir       string
	Lease          time.Duration
	Heartbeat      time.Duration
	KillGrace      time.Duration
	OutputMaxBytes int
	LogMaxBytes    int
	WorkDir        string
	Executors      string
	CancelGrace    time.Duration
	ExecutorIdle   time.Duration
	MaxFrameBytes  int
	ApplyEnds      bool
	interpreters   map[model.ScriptType][]string
	executors      []executorConfig
	Dispatcher     dispatchworker.Config
	Sandbox        sandbox.Config
	types          []model.ScriptType
	contextIDs     []uint32                   // nil: every registered context
	pause          func(step string, pid int) // tests only (pauseHook); nil otherwise
}

// DefaultInterpreters are used for the script types without an --interpreters entry.
const DefaultInterpreters = "python=python3,sh=/bin/sh,bash=bash"

// RegisterFlags adds every flag.
func (c *Config) RegisterFlags(f *config.FlagSet) {
	c.Common.RegisterFlags(f, ":9656", ":9663")
	c.Dispatcher.RegisterFlags(f)
	c.Sandbox.RegisterFlags(f)
	f.Uint32Var(&c.RunnerID, "runner-id", "", 1, "the runner record (runner:<id>) this process serves in each context")
	f.StringVar(&c.Contexts, "contexts", "RUNNER_CONTEXTS", "*", "contexts served: comma-separated ids, or * for every context that has the runner record")
	f.StringVar(&c.ScriptTypes, "script-types", "", "", "script types served (comma-separated); empty: every type with an interpreter")
	f.StringVar(&c.Interpreters, "interpreters", "", DefaultInterpreters, "interpreter command per script type: type=command[ args],…; the script comes on stdin")
	f.IntVar(&c.Concurrency, "concurrency", "", 4, "jobs run at the same time")
	f.IntVar(&c.ClaimLoops, "claim-loops", "", 1, "claim loops (1-16, at most --concurrency): with more than one, one waits for a wake-up while the others claim, each claim taking every free slot; fewer make larger claims under load (fewer round trips and less CPU a job), more take jobs sooner when claims are slow")
	f.StringVar(&c.WorkerID, "worker-id", "", "", "this process's name in leases and heartbeats: unique among live processes, stable across restarts of one deployment slot (a restart takes back its jobs at once); empty: runner-<host>-<runner-id>")
	f.StringVar(&c.StateDir, "state-dir", "", "", "directory where job ends that Redis could not take are kept until it does, for a restart under the same --worker-id to write them; empty: <work-dir>/hero-runner-state/<worker-id>")
	f.DurationVar(&c.Lease, "lease", "", 30*time.Second, "a claimed job returns to its queue this long after its runner stopped heart-beating")
	f.DurationVar(&c.Heartbeat, "heartbeat", "", 5*time.Second, "how often the process announces itself and extends its leases")
	f.DurationVar(&c.KillGrace, "kill-grace", "", 500*time.Millisecond, "time between SIGTERM and SIGKILL when a job is stopped or times out")
	f.IntVar(&c.OutputMaxBytes, "output-max-bytes", "", 1<<20, "stdout kept as the job's output result")
	f.IntVar(&c.LogMaxBytes, "log-max-bytes", "", 4<<20, "stdout+stderr kept as the job's log")
	f.StringVar(&c.WorkDir, "work-dir", "", os.TempDir(), "directory on the host for the executor pools' directories (their sockets), the jobs' work directories under --sandbox=none, and the default --state-dir; a sandboxed job's work directory is in its own filesystem (--job-disk), not here; the jobs' user (--sandbox-uid) must be able to pass through it (the pools' and, under --sandbox=none, the jobs' first processes start as that user in their directories)")
	f.StringVar(&c.Executors, "executors", "", "", executorsUsage)
	f.DurationVar(&c.ExecutorIdle, "executor-idle", "", 5*time.Minute, "a context's executor pool of start=demand stops after this long without a call (it starts again on demand); 0: never")
	f.DurationVar(&c.CancelGrace, "executor-cancel-grace", "", 2*time.Second, "how long an executor has to answer a cancel before its process is killed and restarted")
	f.BoolVar(&c.ApplyEnds, "apply-ends", "", true, "apply a successful run's end of this node's job in the same Redis script that records it (its flow's dependents dispatched, or its waiters told), as the router and the scheduler would; false: every end goes through the router to the scheduler")
	f.IntVar(&c.MaxFrameBytes, "executor-max-frame-bytes", "", 16<<20, "largest RRQ frame accepted from an executor")
}

// Validate checks the configuration before anything starts.
func (c *Config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	if err := c.Dispatcher.Validate(); err != nil {
		return err
	}
	if err := c.Sandbox.Validate(); err != nil {
		return err
	}
	if c.RunnerID == 0 {
		return fmt.Errorf("--runner-id must be at least 1")
	}
	var err error
	if c.interpreters, err = parseInterpreters(c.Interpreters); err != nil {
		return err
	}
	if c.executors, err = parseExecutors(c.Executors); err != nil {
		return err
	}
	if c.types, err = c.servedTypes(); err != nil {
		return err
	}
	if len(c.types) == 0 && len(c.executors) == 0 {
		return fmt.Errorf("no script types to serve: set --interpreters or --script-types")
	}
	if c.contextIDs, err = parseContexts(c.Contexts); err != nil {
		return err
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	return c.validateDirs()
}

// parseInterpreters reads --interpreters: type=command[ args],…
func parseInterpreters(spec string) (map[model.ScriptType][]string, error) {
	out := map[model.ScriptType][]string{}
	for _, part := range config.Entries(spec, ",") {
		name, cmd, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(cmd) == "" {
			return nil, fmt.Errorf("--interpreters: %q is not type=command", part)
		}
		t, err := model.ParseScriptType(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("--interpreters: %v", err)
		}
		out[t] = strings.Fields(cmd)
	}
	return out, nil
}

// servedTypes is --script-types, sorted; without it every type with an interpreter,
// and every executor named after a script type (its handler jobs travel through that
// type's queue).
func (c *Config) servedTypes() ([]model.ScriptType, error) {
	var types []model.ScriptType
	if c.ScriptTypes == "" {
		seen := map[model.ScriptType]bool{}
		for t := range c.interpreters {
			seen[t] = true
		}
		for _, e := range c.executors {
			if t := model.ScriptType(e.name); t.Valid() {
				seen[t] = true
			}
		}
		for t := range seen {
			types = append(types, t)
		}
	} else {
		for _, s := range strings.Split(c.ScriptTypes, ",") {
			t, err := model.ParseScriptType(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--script-types: %v", err)
			}
			types = append(types, t)
		}
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	return types, nil
}

// parseContexts reads --contexts: context ids, or * (nil: every context).
func parseContexts(spec string) ([]uint32, error) {
	if strings.TrimSpace(spec) == "*" {
		return nil, nil
	}
	var ids []uint32
	for _, s := range strings.Split(spec, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("--contexts: %q is not a context id (1 or more) or *", s)
		}
		ids = append(ids, uint32(n))
	}
	return ids, nil
}

// validateLimits checks the numbers: concurrency, the worker id, lease and
// heartbeat, output sizes, the executors' settings.
func (c *Config) validateLimits() error {
	if c.Concurrency < 1 || c.Concurrency > 4096 {
		return fmt.Errorf("--concurrency must be between 1 and 4096")
	}
	if c.ClaimLoops < 1 || c.ClaimLoops > maxClaimLoops {
		return fmt.Errorf("--claim-loops must be between 1 and %d", maxClaimLoops)
	}
	if c.WorkerID == "" {
		c.WorkerID = DefaultWorkerID(c.RunnerID)
	}
	if strings.ContainsAny(c.WorkerID, "\t\n ") {
		return fmt.Errorf("--worker-id must be a name without spaces")
	}
	if c.Lease < time.Second || c.Heartbeat <= 0 || c.Heartbeat*2 > c.Lease {
		return fmt.Errorf("--lease must be at least 1s and at least twice --heartbeat")
	}
	if c.OutputMaxBytes < 1024 || c.LogMaxBytes < 1024 {
		return fmt.Errorf("--output-max-bytes and --log-max-bytes must be at least 1024")
	}
	if c.CancelGrace <= 0 || c.MaxFrameBytes < 1024 {
		return fmt.Errorf("--executor-cancel-grace must be positive and --executor-max-frame-bytes at least 1024")
	}
	return nil
}

// validateDirs checks --work-dir and makes --state-dir.
func (c *Config) validateDirs() error {
	if st, err := os.Stat(c.WorkDir); err != nil || !st.IsDir() {
		return fmt.Errorf("--work-dir %q is not a directory", c.WorkDir)
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Join(c.WorkDir, "hero-runner-state", c.WorkerID)
	}
	if err := os.MkdirAll(c.StateDir, 0o700); err != nil {
		return fmt.Errorf("--state-dir: %v", err)
	}
	return nil
}

// DefaultWorkerID is runner-<host>-<runner id>: stable across restarts on one host (a
// container keeps its host name across restarts, a Kubernetes pod its name), so that
// a restarted process takes its jobs back at once.
func DefaultWorkerID(runnerID uint32) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("runner-%s-%d", host, runnerID)
}

// CommonConfig returns the shared settings.
func (c *Config) CommonConfig() *config.Common { return &c.Common }

// executorConfig is one executor pool of --executors.
type executorConfig struct {
	name      string
	cmd       []string
	size      int
	inflight  int
	pipeline  int // requests in flight per connection
	conns     int // 1: one persistent connection per process carries requests and cancels
	transport string
	shared    bool          // one pool for every context (else one per context)
	readOnly  []string      // more host paths its sandbox shows it, read-only
	noSandbox bool          // explicitly unsandboxed (sandbox=false)
	demand    bool          // start=demand: a context's pool starts with its first job, stops when idle
	startup   time.Duration // a process's start-up limit (0: rrq's default, 10 s)
	wait      time.Duration // a call's wait for a ready process (0: the start-up limit)
}

// executorKeys are the settings of an --executors entry, as --help lists them.
var executorKeys = []string{"cmd=<command>", "size=N", "inflight=N", "pipeline=N", "connections=1", "transport=unix|tcp",
	"shared=true", "start=ahead|demand", "startup=DURATION", "wait=DURATION", "ro=DIR:DIR", "sandbox=false"}

// executorsUsage is --executors' help: every key of an entry.
var executorsUsage = "executor pools for handler jobs (RRQ protocol), '|'-separated: name;" + executorKeys[0] + "[;" + strings.Join(executorKeys[1:], "][;") + "]" +
	" — e.g. python;cmd=python3 -u /app/executor.py;size=2. size: processes (1); inflight: calls in flight per process (4);" +
	" pipeline: calls per connection (1); connections=1: one persistent connection per process, for an executor that accepts one connection at a time" +
	" (without it such an executor fails its start, saying so); transport (unix). Each context served gets pools of its own, started as the runner" +
	" starts serving it (start=ahead, the default) or with its first job and stopped after --executor-idle (start=demand); shared=true: one pool" +
	" serves every context. startup: how long a process may take to accept connections (10s); wait: how long a call waits for a process of its pool" +
	" when none is ready before it fails (the startup limit). Executors run in the job sandbox, which shows them the directories of cmd's absolute" +
	" paths and ro= (read-only); sandbox=false runs one unsandboxed"

// parseExecutors reads --executors: '|'-separated entries, each
// name;key=value;… (parseExecutor).
func parseExecutors(spec string) ([]executorConfig, error) {
	var out []executorConfig
	seen := map[string]bool{}
	for _, entry := range config.Entries(spec, "|") {
		e, err := parseExecutor(entry, seen)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// parseExecutor reads one --executors entry: its name (not one of seen: it is added
// there), then key=value settings (cmd is required).
func parseExecutor(entry string, seen map[string]bool) (executorConfig, error) {
	parts := strings.Split(entry, ";")
	e := executorConfig{name: strings.TrimSpace(parts[0]), size: 1, inflight: 4, pipeline: 1, transport: "unix"}
	if e.name == "" || strings.ContainsAny(e.name, "=# ") {
		return e, fmt.Errorf("--executors: %q must start with the executor's name", entry)
	}
	if seen[e.name] {
		return e, fmt.Errorf("--executors: executor %q given twice", e.name)
	}
	seen[e.name] = true
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return e, fmt.Errorf("--executors: executor %s: %q is not key=value", e.name, kv)
		}
		if err := e.set(k, v); err != nil {
			return e, fmt.Errorf("--executors: executor %s: %s=%s: %v", e.name, k, v, err)
		}
	}
	if len(e.cmd) == 0 {
		return e, fmt.Errorf("--executors: executor %s: cmd=<command> is required", e.name)
	}
	return e, nil
}

// set applies one key=value setting of an --executors entry.
func (e *executorConfig) set(k, v string) error {
	var err error
	switch k {
	case "cmd":
		e.cmd = strings.Fields(v)
	case "size":
		e.size, err = intIn(v, 1, 64)
	case "inflight":
		e.inflight, err = intIn(v, 1, 1024)
	case "pipeline":
		e.pipeline, err = intIn(v, 1, 1024)
	case "connections":
		e.conns, err = strconv.Atoi(v)
		if err == nil && e.conns != 1 {
			err = fmt.Errorf("must be 1 (one persistent connection per process); leave it out for a connection per request")
		}
	case "shared":
		e.shared, err = strconv.ParseBool(v)
	case "sandbox":
		var on bool
		on, err = strconv.ParseBool(v)
		e.noSandbox = !on
	case "ro":
		e.readOnly, err = readOnlyPaths(e.readOnly, v)
	case "transport":
		if v != "unix" && v != "tcp" {
			err = fmt.Errorf("must be unix or tcp")
		}
		e.transport = v
	case "start":
		if v != "ahead" && v != "demand" {
			err = fmt.Errorf("must be ahead or demand")
		}
		e.demand = v == "demand"
	case "startup":
		e.startup, err = durationIn(v, 100*time.Millisecond, time.Hour)
	case "wait":
		e.wait, err = durationIn(v, 100*time.Millisecond, time.Hour)
	default:
		err = fmt.Errorf("unknown key (%s)", keyNames())
	}
	return err
}

// keyNames lists the keys of an --executors entry.
func keyNames() string {
	names := make([]string, len(executorKeys))
	for i, k := range executorKeys {
		names[i], _, _ = strings.Cut(k, "=")
	}
	return strings.Join(names, ", ")
}

// durationIn reads a duration from lo to hi.
func durationIn(v string, lo, hi time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err == nil && (d < lo || d > hi) {
		err = fmt.Errorf("must be %v-%v", lo, hi)
	}
	return d, err
}

// intIn reads a whole number from lo to hi.
func intIn(v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err == nil && (n < lo || n > hi) {
		err = fmt.Errorf("must be %d-%d", lo, hi)
	}
	return n, err
}

// readOnlyPaths adds the ':'-separated absolute paths of ro= to paths.
func readOnlyPaths(paths []string, v string) ([]string, error) {
	var err error
	for _, p := range strings.Split(v, ":") {
		if p = strings.TrimSpace(p); p != "" {
			if !strings.HasPrefix(p, "/") {
				err = fmt.Errorf("%q is not an absolute path", p)
			}
			paths = append(paths, p)
		}
	}
	return paths, err
}
