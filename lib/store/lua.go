package store

import (
	"embed"
	"fmt"
	"strconv"
	"strings"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// WakeCap bounds a runner's wake list (keys.WakeRunner): beyond it a producer adds a
// token of its context only if the list holds none. A runner id with no live process
// (its record kept, its processes gone) then keeps at most WakeCap tokens and one per
// context, instead of more with every push forever.
const WakeCap = 10000

// ReleaseChunk is the most dependents of a completed node that one call makes ready
// (lib_complete.lua's release): a node of more is released in several calls
// (release_dependents.lua), never all in one. A dependent released and dispatched in
// the same call (finish_jobs) costs it ~15 Redis commands: 256 of them made the run's
// finish the slowest call of BenchmarkFanOutFanIn10k (10.5–12.5 ms, past the 10 ms
// that no Redis command may take); 100 keep it near 4 ms.
const ReleaseChunk = 100

// CascadeChunk is the most nodes one call examines of the transitive dependents of a
// failed node that it cancels (lib_complete.lua's cascade): a flow whose failure
// reaches more is cancelled in several calls (flow_cascade_chunk.lua), never all in
// one. A node cancelled costs a call a dozen Redis commands (its DAG fields, its job,
// its index, its event, its dependents read): 500 a call were ~3,000 commands, as
// many as a start's call of 1,000 nodes; 100 stay under the start's chunk's cost
// (startChunk), well under the 10 ms that no Redis command may take (issue 49).
const CascadeChunk = 100

// WakeSpread is the most wake tokens a push of jobs, or a claim that leaves jobs on
// their queue, puts on a runner's wake list for one context: enough for the claim
// loops of a few processes to claim side by side (a runner process has up to 4), few
// enough that a burst of thousands of jobs pushes, and a claim moves, a handful of
// tokens. Each claim renews them while jobs are left (lua/claim_start.lua).
const WakeSpread = 8

// The store's atomic transitions are Lua scripts, one file each under lua/: each file
// opens with a header that says what it does, declares its KEYS, its ARGV, its reply
// and the library files it needs (lua_gen.go is generated from it: make lua-gen), and
// names the keys it derives itself. A script is the prelude (below), then the
// library files it names (lua/lib_*.lua), then its own file (its generated prologue
// first): a Redis function (script.go), whose own file runs on each call, the rest
// once, when loaded. A library file keeps no state
// from one call to the next but in tables that a function <name>_reset() sets anew
// (each call runs it first).
//
//go:embed lua/*.lua
var luaFiles embed.FS

// stateLibs are the library files of the scripts that change statuses (set_job,
// set_flow, event, store_message, …): lib_state needs lib_busy.
var stateLibs = []string{"lib_busy.lua", "lib_state.lua"}

// stateScript makes a script of lua/<name> that uses lib_state (and lib_busy), then the
// other library files libs.
func stateScript(name string, libs ...string) *Script {
	return luaScript(name, append(append([]string(nil), stateLibs...), libs...)...)
}

// luaScript makes a script of the prelude, the library files libs (in order) and the
// file lua/<name>. Of the prelude it takes the definitions the script uses: each costs
// Redis a little on every call. A file that cannot be read makes a script that Open
// refuses with an error naming it.
func luaScript(name string, libs ...string) *Script {
	var head strings.Builder
	var own []byte
	for _, f := range append(libs, name) {
		src, err := luaFiles.ReadFile("lua/" + f)
		if err != nil {
			sc := &Script{name: name, err: fmt.Errorf("lua script %s: %w", f, err)}
			scripts = append(scripts, sc)
			return sc
		}
		if f == name {
			own = src
		} else {
			head.Write(src)
		}
	}
	// The prelude and the library files run once, when the library is loaded; the
	// script's own file on each call (Script).
	return newScript(name, preludeFor(head.String()+string(own))+head.String(), string(own))
}

// preludeFor returns the prelude's first line and the definitions that the code uses,
// and those that these use in turn (EVENTS_CAP's constants), in the prelude's order.
func preludeFor(code string) string {
	code = withoutComments(code) // a name a comment mentions is not a use
	lines := strings.SplitAfter(luaPrelude, "\n")
	taken := make([]bool, len(lines))
	for more := true; more; {
		more = false
		for i, l := range lines[1:] {
			name, _, _ := strings.Cut(strings.TrimPrefix(l, "local "), " ")
			if !taken[i+1] && name != "" && usesName(code, name) {
				taken[i+1], more = true, true
				code += "\n" + l
			}
		}
	}
	var b strings.Builder
	b.WriteString(lines[0])
	for i, l := range lines[1:] {
		if taken[i+1] {
			b.WriteString(l)
		}
	}
	return b.String()
}

// withoutComments is the Lua code with its comments (-- to the line's end, --[[ ]],
// --[==[ ]==]) left out; strings, long ones too, are kept as they are.
func withoutComments(code string) string {
	var b strings.Builder
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == '\'' || c == '"':
			end := shortStringEnd(code, i)
			b.WriteString(code[i:end])
			i = end
		case c == '[' && longBracket(code[i:]) >= 0:
			end := longEnd(code, i, longBracket(code[i:]))
			b.WriteString(code[i:end])
			i = end
		case c == '-' && strings.HasPrefix(code[i:], "--"):
			if level := longBracket(code[i+2:]); level >= 0 {
				i = longEnd(code, i+2, level)
			} else if nl := strings.IndexByte(code[i:], '\n'); nl >= 0 {
				i += nl
			} else {
				i = len(code)
			}
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// shortStringEnd is the index after the quoted string that opens at code[i] (its
// escapes skipped), or the line's end for one left open.
func shortStringEnd(code string, i int) int {
	q := code[i]
	for j := i + 1; j < len(code); j++ {
		switch code[j] {
		case '\\':
			j++
		case q, '\n':
			return j + 1
		}
	}
	return len(code)
}

// longBracket is the level of the long bracket s opens with ([[ is 0, [=[ is 1), or
// -1 when it opens with none.
func longBracket(s string) int {
	if len(s) < 2 || s[0] != '[' {
		return -1
	}
	n := 1
	for n < len(s) && s[n] == '=' {
		n++
	}
	if n < len(s) && s[n] == '[' {
		return n - 1
	}
	return -1
}

// longEnd is the index after the long bracket of level that opens at code[i] closes
// (the code's end for one left open).
func longEnd(code string, i, level int) int {
	closing := "]" + strings.Repeat("=", level) + "]"
	if k := strings.Index(code[i+level+2:], closing); k >= 0 {
		return i + level + 2 + k + len(closing)
	}
	return len(code)
}

// usesName reports whether the Lua code holds the identifier name (not as a part of a
// longer one).
func usesName(code, name string) bool {
	if name == "" {
		return false
	}
	ident := func(c byte) bool {
		return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	for i := 0; ; {
		k := strings.Index(code[i:], name)
		if k < 0 {
			return false
		}
		at, end := i+k, i+k+len(name)
		if (at == 0 || !ident(code[at-1])) && (end == len(code) || !ident(code[end])) {
			return true
		}
		i = end
	}
}

// luaPrelude defines, as Lua locals, the status values and event types of lib/model,
// the keys and key prefixes of lib/keys and the store's limits, so that a script spells
// none of them itself. Every script of lua/ starts with the part of it that it uses.
var luaPrelude = buildPrelude()

// luaKeys are the keys (and the prefixes of the keys that carry ids) the scripts use,
// by their Lua name.
var luaKeys = []struct{ name, key string }{
	{"K_CONTEXT", keys.ContextPrefix},
	{"K_FLOW", keys.FlowPrefix},
	{"K_MESSAGE", keys.MessagePrefix},
	{"K_JOB", keys.JobPrefix},
	{"K_QUEUE", keys.QueuePrefix},
	{"K_MSG_OUT", keys.MsgOut},
	{"K_MSG_IN", keys.MsgIn},
	{"K_DAG", keys.DAGPrefix},
	{"K_FLOW_CASCADE", keys.FlowCascadePrefix},
	{"K_FLOW_STAGE", keys.FlowStagePrefix},
	{"K_FLOW_CLAIM", keys.FlowClaimPrefix},
	{"K_JOB_LOG", keys.JobLogPrefix},
	{"K_JOB_MESSAGES", keys.JobMessagesPrefix},
	{"K_FLOW_MESSAGES", keys.FlowMessagesPrefix},
	{"K_PINNED_QUEUE", keys.PinnedQueuePrefix},
	{"K_PRIO", keys.PriorityPrefix},
	{"K_TURNS", keys.Turns},
	{"K_FEATURES", keys.OrderFeatures},
	{"K_CK_RUN", keys.ConcurrencyRunningPrefix},
	{"K_CK_HELD", keys.ConcurrencyHeldPrefix},
	{"K_CK_RATE", keys.ConcurrencyRateHeldPrefix},
	{"K_LIMITS", keys.Limits},
	{"K_LIM_RUN", keys.LimitRunningPrefix},
	{"K_LIM_BUCKET", keys.LimitBucketPrefix},
	{"K_LIM_PARK", keys.LimitParked},
	{"K_PROCESSING", keys.ProcessingPrefix},
	{"K_STOP_LIST", keys.StopListPrefix},
	{"K_WAKERS", keys.WakersPrefix},
	{"K_WAKE_RUNNER", keys.WakeRunnerPrefix},
	{"K_RUNNER_COORD", keys.RunnerCoordPrefix},
	{"K_ACTIVE_FLOWS", keys.ActiveFlows},
	{"K_DUE", keys.Due},
	{"K_DELAYED", keys.Delayed},
	{"K_DELAYED_WAKE", keys.DelayedWake},
	{"K_SCHED_DUE", keys.ScheduleDue},
	{"K_EXPIRE", keys.Expire},
	{"K_SCHEDULER", keys.SchedulerSettings},
	{"K_CONTROL", keys.Control},
	{"K_JOB_DONE", keys.JobDone},
	{"K_FLOW_DONE", keys.FlowDone},
	{"K_AUTH_CHANGED", keys.AuthChanged},
	{"K_LOG_APPENDED", keys.LogAppended},
	{"K_WAKE_MSG_OUT", keys.WakeMsgOut},
	{"K_WAKE_MSG_IN", keys.WakeMsgIn},
	{"K_BUSY", keys.Busy},
	{"K_LEASES", keys.Leases},
	{"K_MESSAGE_SEQ", keys.MessageSeq},
	{"K_MSG_TEMPLATE", keys.MessageTemplate},
	{"K_JOB_TEMPLATE", keys.JobTemplate},
	{"K_JOB_SEQ", keys.JobSeqPrefix},
	{"K_SCRIPT_TYPES", keys.ScriptTypes},
	{"K_EXECUTORS", keys.Executors},
	{"K_EXEC_QUEUE", keys.Queue(model.ExecQueueSuffix(""))},
	{"K_FLOW_INDEX", keys.FlowIndex},
	{"K_RUNNER_INDEX", keys.RunnerIndex},
	{"K_JOB_INDEX", keys.JobIndex},
	{"K_MESSAGE_INDEX", keys.MessageIndex},
	{"K_EVENTS", keys.Events},
	{"K_DLQ", keys.DLQ},
	{"K_QPAUSE", keys.QueuePause},
}

// buildPrelude writes the prelude: JOB_<STATUS>, FLOW_<STATUS>, MSG_<STATUS> and
// NODE_<STATUS> for the statuses, EV_<OBJECT>_<VERB> for the event types, K_<NAME>
// for the keys, and the limits.
func buildPrelude() string {
	var b strings.Builder
	b.WriteString("-- The prelude, generated by lib/store/lua.go (buildPrelude) from lib/model, lib/keys and the store's limits.\n")
	def := func(prefix, value string) {
		name := prefix + strings.ToUpper(strings.NewReplacer(".", "_", ":", "_").Replace(value))
		fmt.Fprintf(&b, "local %s = '%s'\n", name, value)
	}
	for _, s := range model.JobStatuses() {
		def("JOB_", string(s))
	}
	for _, s := range model.FlowStatuses() {
		def("FLOW_", string(s))
	}
	for _, s := range model.MessageStatuses() {
		def("MSG_", string(s))
	}
	for _, s := range model.NodeStatuses() {
		def("NODE_", string(s))
	}
	for _, e := range model.EventTypes() { // the value the stream stores (a short code for the frequent job events)
		fmt.Fprintf(&b, "local EV_%s = '%s'\n", strings.ToUpper(strings.NewReplacer(".", "_", ":", "_").Replace(string(e))), e.Stored())
	}
	for _, k := range luaKeys {
		fmt.Fprintf(&b, "local %s = '%s'\n", k.name, k.key)
	}
	// The event stream's cap (XADD MAXLEN ~), which scales with the jobs the context
	// keeps: EVENTS_CAP() of lua/lib_events.lua, its one line of code.
	fmt.Fprintf(&b, "local EVENTS_MAXLEN = %d\n", EventsMaxLen)
	fmt.Fprintf(&b, "local EVENTS_PER_JOB = %d\n", EventsPerJob)
	if src, err := luaFiles.ReadFile("lua/lib_events.lua"); err == nil {
		for _, l := range strings.SplitAfter(string(src), "\n") {
			if strings.HasPrefix(l, "local ") {
				b.WriteString(l)
			}
		}
	}
	fmt.Fprintf(&b, "local RELEASE_CHUNK = %s\n", strconv.Itoa(ReleaseChunk))
	fmt.Fprintf(&b, "local CASCADE_CHUNK = %s\n", strconv.Itoa(CascadeChunk))
	fmt.Fprintf(&b, "local WAKE_SPREAD = %s\n", strconv.Itoa(WakeSpread))
	fmt.Fprintf(&b, "local WAKE_CAP = %s\n", strconv.Itoa(WakeCap))
	fmt.Fprintf(&b, "local PRIORITY_AGE_MS = %s\n", strconv.Itoa(model.PriorityAgeMs))
	fmt.Fprintf(&b, "local PRIORITY_DEFAULT = '%s'\n", strconv.Itoa(model.PriorityDefault))
	return b.String()
}
