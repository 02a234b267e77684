package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/testutil/proctest"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The chaos suite (issue 17). Flows of mixed shapes (chains of 5, diamonds, fan-out
// 20 → fan-in) run while every service is killed with SIGKILL and restarted, and
// Redis (AOF, appendfsync always) is restarted both ways and stopped with SIGSTOP;
// every optional worker of the runner is on. Each job appends a start and an end line
// (with its attempt, the time, the life of the runner that launched it and its run's
// own token) to a ledger; at the end the ledger is compared with the final state. The
// short mode (≤ 90 s) is part of `make test-long`; HERO_CHAOS=long (`make chaos`) runs
// fault cycles until at least HERO_CHAOS_FLOWS flows (default 300) have run, and
// besides kills the runner 10 times in the middle of a job's start and stops it
// (SIGSTOP) past its lease 3 times (issue 43). docs/chaos.md has the figures.

// chaosFault is one fault of a cycle.
type chaosFault struct {
	name string
	do   func() // takes the system down and brings it back (or lets it go on)
}

// chaosReport is what the suite prints.
type chaosReport struct {
	flows, jobs                       int
	exits                             []string
	lost, stuck, flipped              []uint32
	twice, rerunAfterKill, rerunOther []string
	endsMissing                       []string
	recovery                          map[string][]time.Duration
	faults                            int
	elapsed                           time.Duration
	runnerKills                       []time.Time
	endedBeforeKill                   int
	longest                           time.Duration // the longest flow (start to end)

	// issue 43: the runner's processes and its freezes
	deaths           map[int]time.Time // a killed runner life's death (its end, as its wait saw it)
	exitAfterKill    []time.Duration   // each kill -9 of the runner: the signal to the runner's end
	freezes          []chaosFreeze
	afterDeath       []string // a run that started, or wrote its end, > 100 ms after its runner's death
	rerunAfterFreeze []string // a job started again after a freeze, with no runner kill between
	heldByFreeze     int      // runs that ended while their runner was stopped
	timeouts         []string // a job recorded "timeout" though it exited 0 within its time
}

func TestChaos(t *testing.T) {
	long := os.Getenv("HERO_CHAOS") == "long"
	if !long {
		longTest(t) // the short mode is make test-long's; the long one make chaos's
	}
	target, cycles := 0, 2 // short mode: two fault cycles
	if long {
		target = 300
		if n, err := strconv.Atoi(os.Getenv("HERO_CHAOS_FLOWS")); err == nil && n > 0 {
			target = n
		}
	}
	start := time.Now()
	rs := redistest.Start(t, aofAlways)
	s := harness.StartStack(t, binDir, rs.URL, harness.StackOptions{
		RouterArgs: []string{"--lease", chaosLease.String()},
		RunnerArgs: append([]string{"--lease", chaosLease.String(), "--heartbeat", "2s", "--concurrency", "16", "--interpreters", chaosInterpreters(1)},
			harness.OptionalWorkers(binDir)...),
	})
	t.Cleanup(func() { _ = s.Runner.Signal(syscall.SIGCONT) }) // never left stopped
	s.Setup(t, ctx1)
	dir := harness.ScratchDir(t)
	starts, err := proctest.NewSignal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer starts.Close()
	ch := &chaosRun{t: t, s: s, rs: rs, ledger: filepath.Join(dir, "ledger"), starts: starts,
		flowJobs: map[uint32][]uint32{}, ended: map[uint32]string{}, nextJob: 1, inflight: make(chan struct{}, 8), life: 1,
		rep: chaosReport{recovery: map[string][]time.Duration{}, deaths: map[int]time.Time{}}}
	// The API's address changes when it restarts: clients read it here.
	ch.api.Store(s.Client(1))

	subDone := make(chan struct{})
	go ch.submitter(subDone)
	if !starts.Wait(1, time.Minute) {
		t.Fatal("no job started")
	}
	ch.runFaults(target, cycles, long)
	ch.stopSub.Store(true)
	<-subDone
	ch.waiters.Wait()

	// Compare the ledger with the final state.
	lines := readChaosLedger(t, ch.ledger)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	rep := &ch.rep
	rep.flows = len(ch.submitted)
	rep.exits = s.Exited()
	for _, p := range ch.old {
		if o := p.Output(); strings.Contains(o, "panic:") {
			rep.exits = append(rep.exits, p.Name+" (killed) had panicked")
		}
	}
	c := ch.api.Load()
	for _, id := range ch.submitted {
		ch.checkFlow(c, id, lines)
	}
	rep.elapsed = time.Since(start)
	t.Log(rep.String(long, ch.subErrs))
	ch.keepLogs()
	ch.logSuspects(lines)
	if len(ch.subErrs) > 0 {
		t.Errorf("submissions failed: %v", ch.subErrs)
	}
	if len(rep.exits)+len(rep.lost)+len(rep.stuck)+len(rep.flipped)+len(rep.twice)+len(rep.endsMissing)+len(rep.rerunOther)+
		len(rep.afterDeath)+len(rep.rerunAfterFreeze)+len(rep.timeouts) > 0 {
		t.Errorf("chaos found faults (above)")
	}
	for name, ds := range rep.recovery {
		for _, d := range ds {
			if d < 0 {
				t.Errorf("no job started within 60 s after %s", name)
			}
		}
	}
	checkDispatcherServes(t, s)
}

// chaosRun is one run of the chaos suite: the stack under test, the ledger the jobs
// write, the signal of their starts, the flows submitted, and the report.
type chaosRun struct {
	t      *testing.T
	s      *harness.Stack
	rs     *redistest.Server
	api    atomic.Pointer[harness.Client] // the API's address changes when it restarts
	ledger string
	starts *proctest.Signal

	// The submitter's: it keeps flows in flight until told to stop (short mode: one
	// fault cycle; long mode: until target flows ran), each awaited by flow.wait.
	mu        sync.Mutex
	submitted []uint32
	flowJobs  map[uint32][]uint32
	ended     map[uint32]string
	nextJob   uint32
	stopSub   atomic.Bool
	subErrs   []string
	waiters   sync.WaitGroup
	inflight  chan struct{}

	rep      chaosReport
	old      []*harness.Proc // killed processes: their logs are checked for panics too
	faultLog []string
	life     int // the runner's life: 1, then one more at each restart (chaosInterpreters)
}

// call retries an API call through faults (an API or Redis restart) until it
// succeeds or the deadline; "exists" answers a create whose first try got through.
func (ch *chaosRun) call(method string, params, out any, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		err := ch.api.Load().Call(method, params, out)
		var re *harness.RPCError
		if err == nil || errors.As(err, &re) && re.Code == -32009 {
			return nil
		}
		if errors.As(err, &re) && re.Code == -32008 && time.Now().Before(deadline) {
			continue // flow.wait's own wait ended
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond) // the client's retry pace through a fault
	}
}

// script is a job that writes its start and end to the ledger, signals its start, and
// sleeps in between. A line says the job, its attempt, the time, the life of the
// runner that launched the run (HERO_CHAOS_LIFE, set by its interpreter:
// chaosInterpreters) and the run's own token (its TRACEPARENT: a parent id per run).
func (ch *chaosRun) script(sleep string) string {
	id := `$HERO_CONTEXT_ID:$HERO_CALLER_ID:$HERO_JOB_ID $HERO_ATTEMPT`
	run := `$HERO_CHAOS_LIFE $TRACEPARENT`
	return fmt.Sprintf("echo \"start %s $(date +%%s%%3N) %s\" >> %s\necho x > %s\nsleep %s\necho \"end %s $(date +%%s%%3N) %s\" >> %s\n",
		id, run, ch.ledger, ch.starts.Path, sleep, id, run, ch.ledger)
}

// shape is the n-th flow's jobs: a chain of 5, a diamond, or a fan-out of 20 and its
// fan-in, in turn.
func (ch *chaosRun) shape(n int) (string, []jobSpec) {
	ch.mu.Lock()
	base := ch.nextJob
	ch.mu.Unlock()
	var jobs []jobSpec
	add := func(sleep string, deps ...uint32) uint32 {
		id := base + uint32(len(jobs))
		jobs = append(jobs, jobSpec{id: id, typ: "sh", script: ch.script(sleep), deps: deps})
		return id
	}
	var name string
	switch n % 3 {
	case 0:
		name = "chain"
		prev := add("0.2")
		for i := 0; i < 4; i++ {
			prev = add("0.2", prev)
		}
	case 1:
		name = "diamond"
		a := add("0.2")
		b, c := add("0.3", a), add("0.3", a)
		add("0.2", b, c)
	default:
		name = "fan-out 20 -> fan-in"
		root := add("0.1")
		var leaves []uint32
		for i := 0; i < 20; i++ {
			leaves = append(leaves, add("0.3", root))
		}
		add("0.1", leaves...)
	}
	ch.mu.Lock()
	ch.nextJob = base + uint32(len(jobs))
	ch.mu.Unlock()
	return name, jobs
}

// submit creates the flow's jobs and the flow, and starts it.
func (ch *chaosRun) submit(flowID uint32, jobs []jobSpec) error {
	var ids []uint32
	for _, j := range jobs {
		job := map[string]any{"id": j.id, "script": j.script, "script_type": j.typ, "depends": j.deps, "timeout": chaosJobTimeout}
		if err := ch.call("job.create", map[string]any{"context_id": ctx1, "job": job}, nil, time.Minute); err != nil {
			return fmt.Errorf("job.create %d: %v", j.id, err)
		}
		ids = append(ids, j.id)
	}
	if err := ch.call("flow.create", map[string]any{"context_id": ctx1, "flow": map[string]any{"id": flowID, "jobs": ids}}, nil, time.Minute); err != nil {
		return fmt.Errorf("flow.create %d: %v", flowID, err)
	}
	ch.mu.Lock()
	ch.flowJobs[flowID] = ids
	ch.submitted = append(ch.submitted, flowID)
	ch.mu.Unlock()
	if err := ch.call("flow.start", map[string]any{"context_id": ctx1, "id": flowID}, nil, time.Minute); err != nil {
		return fmt.Errorf("flow.start %d: %v", flowID, err)
	}
	return nil
}

// submitter keeps up to 8 flows in flight until stopSub, each awaited by a waiter;
// it closes done when it stops.
func (ch *chaosRun) submitter(done chan<- struct{}) {
	defer close(done)
	for n := 0; !ch.stopSub.Load(); n++ { // until the fault cycles end
		ch.inflight <- struct{}{}
		flowID := uint32(n + 1)
		_, jobs := ch.shape(n)
		if err := ch.submit(flowID, jobs); err != nil {
			ch.mu.Lock()
			ch.subErrs = append(ch.subErrs, err.Error())
			ch.mu.Unlock()
			<-ch.inflight
			continue
		}
		ch.waiters.Add(1)
		go ch.await(flowID)
	}
}

// await waits for the flow to end (flow.wait) and records how it ended.
func (ch *chaosRun) await(flowID uint32) {
	defer ch.waiters.Done()
	defer func() { <-ch.inflight }()
	var f harness.Flow
	if err := ch.call("flow.wait", map[string]any{"context_id": ctx1, "id": flowID, "timeout": 30}, &f, 3*time.Minute); err != nil {
		return // stuck: found in the final check
	}
	ch.mu.Lock()
	ch.ended[flowID] = f.Status
	ch.mu.Unlock()
}

// restart kills the service with SIGKILL and starts it again.
func (ch *chaosRun) restart(name string) {
	var p *harness.Proc
	switch name {
	case "scheduler":
		p = ch.s.Scheduler
	case "router":
		p = ch.s.Router
	case "runner":
		p = ch.s.Runner
	default:
		p = ch.s.API
	}
	if name == "runner" {
		ch.restartRunner()
		return
	}
	ch.old = append(ch.old, p)
	p.Kill()
	ch.s.Start(name)
	if name == "supervisor-daemon" {
		ch.api.Store(ch.s.Client(1))
	}
}

// redisDown takes Redis down the way named (redistest.Down*) for d, then up.
func (ch *chaosRun) redisDown(how string, d time.Duration) func() {
	return func() {
		if err := ch.rs.Down(how); err != nil {
			ch.t.Fatal(err)
		}
		time.Sleep(d) // the outage under test
		if err := ch.rs.Up(); err != nil {
			ch.t.Fatal(err)
		}
	}
}

// redisStop stops Redis with SIGSTOP for 3 s.
func (ch *chaosRun) redisStop() {
	if err := ch.rs.Pause(); err != nil {
		ch.t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the stop under test
	if err := ch.rs.Resume(); err != nil {
		ch.t.Fatal(err)
	}
}

// runFaults runs fault cycles: cycles of them (short mode, target 0), or until
// target flows were submitted and, in long mode, the runner's extra faults were done
// (runnerFaults: one kill at a job's start per cycle, 10 in all, and a freeze past
// its lease in each of the first 3 cycles). Each fault is followed by a wait for the
// next job start: the recovery time.
func (ch *chaosRun) runFaults(target, cycles int, long bool) {
	cycle := []chaosFault{
		{"kill -9 scheduler", func() { ch.restart("scheduler") }},
		{"kill -9 router", func() { ch.restart("router") }},
		{"kill -9 runner", func() { ch.restart("runner") }},
		{"kill -9 supervisor-daemon", func() { ch.restart("supervisor-daemon") }},
		{"redis SHUTDOWN NOSAVE, 3 s", ch.redisDown(redistest.DownShutdown, 3*time.Second)},
		{"redis kill -9, 3 s", ch.redisDown(redistest.DownKill, 3*time.Second)},
		{"redis SIGSTOP, 3 s", ch.redisStop},
	}
	for c := 0; ; c++ {
		for _, f := range cycle {
			ch.fault(f)
		}
		extra := 0
		if long {
			extra = ch.runnerFaults(c)
		}
		ch.mu.Lock()
		n := len(ch.submitted)
		ch.mu.Unlock()
		if target == 0 && c+1 >= cycles || target > 0 && n >= target && extra <= 0 {
			return
		}
	}
}

// fault does one fault and records the time to the next job start.
func (ch *chaosRun) fault(f chaosFault) {
	ch.faultLog = append(ch.faultLog, time.Now().UTC().Format("15:04:05.000")+" "+f.name)
	f.do()
	back := time.Now()
	ch.faultLog = append(ch.faultLog, back.UTC().Format("15:04:05.000")+" over")
	ch.starts.Drain() // the recovery waits for a start after the fault
	ch.rep.faults++
	if ch.starts.Wait(1, 60*time.Second) {
		ch.rep.recovery[f.name] = append(ch.rep.recovery[f.name], time.Since(back))
	} else {
		ch.rep.recovery[f.name] = append(ch.rep.recovery[f.name], -1)
	}
	ch.starts.Wait(20, 60*time.Second) // work under way again before the next fault
}

// checkFlow compares a submitted flow's final state, and its jobs' ledger lines,
// with what should be: lost, stuck, failed flows and jobs run or ended twice go to
// the report.
func (ch *chaosRun) checkFlow(c *harness.Client, id uint32, lines map[string][]chaosLine) {
	rep := &ch.rep
	var f harness.Flow
	err := c.Call("flow.load", map[string]any{"context_id": ctx1, "id": id}, &f)
	var re *harness.RPCError
	switch {
	case errors.As(err, &re) && re.Code == -32004:
		rep.lost = append(rep.lost, id)
		return
	case err != nil:
		ch.t.Fatalf("flow.load %d: %v", id, err)
	case f.Status == "error":
		rep.flipped = append(rep.flipped, id)
		ch.checkTimeout(c, f, lines)
	case f.Status != "finished":
		rep.stuck = append(rep.stuck, id)
	}
	if f.FinishedAt > 0 {
		rep.longest = max(rep.longest, time.Duration(f.FinishedAt-f.StartedAt)*time.Second)
	}
	for _, j := range ch.flowJobs[id] {
		rep.jobs++
		key := fmt.Sprintf("%d:1:%d", ctx1, j)
		ch.checkJobLedger(key, lines[key], f.Status)
	}
}

// chaosLaunchBound bounds how long before its script's first line a job's run was
// launched (claimed, its sandbox set up): a runner killed that long before a job's
// first start may have launched it.
const chaosLaunchBound = 2 * time.Second

// checkJobLedger reads a job's ledger lines (l; its flow ended with flowStatus). A
// run again after a runner kill between its starts, or during the launch of its first
// run (a run the killed runner launched, which the next runner's start ends), is
// expected (the process died, maybe after the script ended and before its end was
// written); a run again after a freeze of the runner (and no kill) is a fault (the
// frozen runner still held the run's end, and no other attempt had started), and so is
// any other second run, or a second end without a kill between the starts.
func (ch *chaosRun) checkJobLedger(key string, l []chaosLine, flowStatus string) {
	rep := &ch.rep
	ends, startTimes := 0, []int64{}
	for _, x := range l {
		if x.kind == "end" {
			ends++
			if ch.frozenAt(x.ms) {
				rep.heldByFreeze++
			}
		} else {
			startTimes = append(startTimes, x.ms)
		}
	}
	ch.checkRunsAfterDeath(key, l)
	killed := false // a runner kill between the job's starts
	if len(startTimes) > 1 {
		sort.Slice(startTimes, func(a, b int) bool { return startTimes[a] < startTimes[b] })
		first, last := startTimes[0], startTimes[len(startTimes)-1]
		atLaunch := false // a runner kill while the first run was being launched
		for _, k := range rep.runnerKills {
			ms := k.UnixMilli()
			killed = killed || (ms >= first && ms <= last)
			atLaunch = atLaunch || (ms < first && ms >= first-chaosLaunchBound.Milliseconds())
		}
		switch {
		case killed || atLaunch:
			rep.rerunAfterKill = append(rep.rerunAfterKill, key)
		case ch.frozenBetween(first, last):
			rep.rerunAfterFreeze = append(rep.rerunAfterFreeze, key)
		default:
			rep.rerunOther = append(rep.rerunOther, key)
		}
	}
	switch {
	// Two ends are expected only when the first run ended before the kill (its end not
	// yet written): a run launched by a runner killed meanwhile is ended by the next
	// runner's start (lib/sandbox), never completed.
	case ends > 1 && killed:
		rep.endedBeforeKill++
	case ends > 1:
		rep.twice = append(rep.twice, key)
	case ends == 0 && flowStatus == "finished":
		rep.endsMissing = append(rep.endsMissing, key)
	}
}

// keepLogs writes the fault log, the ledger and every service's log to
// HERO_CHAOS_KEEP, when set and a job ran or ended twice.
func (ch *chaosRun) keepLogs() {
	keep := os.Getenv("HERO_CHAOS_KEEP")
	if keep == "" || len(ch.suspects()) == 0 {
		return
	}
	_ = os.MkdirAll(keep, 0o755)
	_ = os.WriteFile(filepath.Join(keep, "faults"), []byte(strings.Join(ch.faultLog, "\n")+"\n"), 0o644)
	b, _ := os.ReadFile(ch.ledger)
	_ = os.WriteFile(filepath.Join(keep, "ledger"), b, 0o644)
	for i, p := range append(ch.old, ch.s.Procs()...) {
		_ = os.WriteFile(filepath.Join(keep, fmt.Sprintf("%02d-%s.log", i, p.Name)), []byte(p.Output()), 0o644)
	}
	ch.t.Logf("logs kept in %s", keep)
}

// suspects are the jobs at fault: run or ended twice when they should not have been,
// or with a process alive after its runner's death.
func (ch *chaosRun) suspects() []string {
	keys := append(append(append([]string(nil), ch.rep.twice...), ch.rep.rerunOther...), ch.rep.rerunAfterFreeze...)
	keys = append(keys, ch.rep.timeouts...)
	for _, d := range ch.rep.afterDeath {
		keys = append(keys, strings.Fields(d)[0])
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// logSuspects logs what the ledger and the services' logs say about each job at fault.
// At most 20 of them: each is a scan of every service's log.
func (ch *chaosRun) logSuspects(lines map[string][]chaosLine) {
	keys := ch.suspects()
	if len(keys) > 20 {
		ch.t.Logf("%d jobs at fault; the first 20:", len(keys))
		keys = keys[:20]
	}
	for _, key := range keys {
		ch.t.Logf("job %s ledger: %+v", key, lines[key])
		id := key[strings.LastIndexByte(key, ':')+1:]
		for _, p := range append(ch.old, ch.s.Procs()...) {
			for _, l := range strings.Split(p.Output(), "\n") {
				if strings.Contains(l, `"job_id":`+id+`,`) || strings.Contains(l, `"job_id":`+id+`}`) || strings.Contains(l, ":1:"+id+`"`) {
					ch.t.Logf("  %s: %s", p.Name, l)
				}
			}
		}
	}
}

type chaosLine struct {
	kind    string
	attempt string
	ms      int64
	life    int    // the runner life that launched the run
	run     string // the run's token
}

// readChaosLedger reads "start|end <ctx:caller:job> <attempt> <ms> <life> <run>" lines
// by job.
func readChaosLedger(t *testing.T, file string) map[string][]chaosLine {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]chaosLine{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 6 {
			continue
		}
		ms, _ := strconv.ParseInt(f[3], 10, 64)
		life, _ := strconv.Atoi(f[4])
		out[f[1]] = append(out[f[1]], chaosLine{kind: f[0], attempt: f[2], ms: ms, life: life, run: f[5]})
	}
	return out
}

func (r chaosReport) String(long bool, subErrs []string) string {
	mode := "short"
	if long {
		mode = "long"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n==== chaos (%s mode): %d flows, %d jobs, %d faults, %s ====\n", mode, r.flows, r.jobs, r.faults, r.elapsed.Round(time.Second))
	fmt.Fprintf(&b, "service panics and exits:          %d %v\n", len(r.exits), r.exits)
	fmt.Fprintf(&b, "flows lost:                        %d %v\n", len(r.lost), r.lost)
	fmt.Fprintf(&b, "flows stuck:                       %d %v\n", len(r.stuck), r.stuck)
	fmt.Fprintf(&b, "flows flipped (ended in error):    %d %v\n", len(r.flipped), r.flipped)
	fmt.Fprintf(&b, "jobs completed twice:              %d %v\n", len(r.twice), r.twice)
	fmt.Fprintf(&b, "jobs finished with no end line:    %d %v\n", len(r.endsMissing), r.endsMissing)
	fmt.Fprintf(&b, "re-runs after a runner kill:       %d (expected; %d of them had ended, their end not yet written)\n", len(r.rerunAfterKill), r.endedBeforeKill)
	fmt.Fprintf(&b, "re-runs without a runner kill:     %d %v\n", len(r.rerunOther), r.rerunOther)
	fmt.Fprintf(&b, "runner kills, freezes:             %d, %d\n", len(r.runnerKills), len(r.freezes))
	fmt.Fprintf(&b, "processes after their runner died: %d %v\n", len(r.afterDeath), r.afterDeath)
	fmt.Fprintf(&b, "runner's end after its kill -9:    max %v\n", slices.Max(append([]time.Duration{0}, r.exitAfterKill...)).Round(time.Millisecond))
	fmt.Fprintf(&b, "re-runs after a freeze:            %d %v\n", len(r.rerunAfterFreeze), r.rerunAfterFreeze)
	fmt.Fprintf(&b, "runs ended during a freeze:        %d (their ends recorded when the runner went on)\n", r.heldByFreeze)
	fmt.Fprintf(&b, "timeouts of jobs that exited 0:    %d %v\n", len(r.timeouts), r.timeouts)
	fmt.Fprintf(&b, "submission errors:                 %d\n", len(subErrs))
	fmt.Fprintf(&b, "longest flow (start to end, s):    %s\n", r.longest)
	names := make([]string, 0, len(r.recovery))
	for n := range r.recovery {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "recovery (fault over → next job start):\n")
	for _, n := range names {
		ds := r.recovery[n]
		var worst time.Duration
		var parts []string
		for _, d := range ds {
			worst = max(worst, d)
			parts = append(parts, d.Round(time.Millisecond).String())
		}
		if len(parts) > 6 {
			parts = append(parts[:6], "…")
		}
		fmt.Fprintf(&b, "  %-38s max %-8s %s\n", n, worst.Round(time.Millisecond), strings.Join(parts, " "))
	}
	return b.String()
}
