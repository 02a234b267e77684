package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/fault"
	"github.com/hero-coordinator/hero/lib/keys"
)

// Script is one of the store's Lua scripts. Each runs as a Redis function (FCALL) of a
// library of its own, which the server compiles and runs once, when loaded: the prelude
// and the library files it uses (head) make their closures then, and only the script's
// own file (body) runs on each call. Run as an EVAL script, the whole text runs on
// every call, and making the libraries' closures anew cost up to 76,000 instructions a
// call (finish_jobs; submit 42,000, claim_start 18,000): more than a job's own work for
// small calls. The function's name holds a hash of the library's whole text, so that
// services of two versions (a rolling upgrade) each call their own, and a name stands
// for one code.
//
// Who loads the libraries: a function runs with the rights of the service that calls
// it, whoever loaded it. So that no service can change the code another one runs, one
// service loads them — supervisor-daemon (Options.WaitScripts false), the only one
// whose Redis user may FUNCTION LOAD and FUNCTION DELETE, and whose rights include
// every other service's (lib/redisacl) — and the others wait until the libraries of
// their version are there (Store.WaitScripts). The loader keeps them loaded (after a
// Redis restarted without its data, a FUNCTION FLUSH: within scriptCheck) and deletes
// the libraries of other versions once no process has said for KeepOldScripts that it
// calls them (keys.Functions), so that the services of two versions each run their own
// during a rolling upgrade.
type Script struct {
	src  string // the whole text as an EVAL script (a transaction's: EnqueueManyOn)
	fn   string // the function's (and its library's) name: hero_<file>_<hash>
	lib  string // the library's code (FUNCTION LOAD)
	name string // its file under lua/, for errors
	err  error  // why it could not be made (Open reports it)
}

// scripts are every script made with luaScript (package variables, made at init): the
// loader loads them into each server, a waiting service waits for them.
var scripts []*Script

// funcPrefix begins the name of every library and function of the store; the name
// ends with "_" and hashBytes of its library's SHA-1 in hex.
const (
	funcPrefix = "hero_"
	hashBytes  = 6
)

// How the libraries are kept.
const (
	// OldScriptsKept is how long the libraries of another version stay after the last
	// process that calls them said so (Options.KeepOldScripts): long enough for a
	// process of that version to come back during an upgrade.
	OldScriptsKept = 24 * time.Hour
	// scriptCheck is how often the loader checks that every library is there.
	scriptCheck = 5 * time.Second
	// scriptMark is how often a process records that it calls its libraries (and the
	// loader deletes those of other versions no process called for KeepOldScripts).
	scriptMark = time.Minute
	// scriptPoll is how often a waiting process looks again; scriptLog how often it
	// says in the log what it waits for.
	scriptPoll = time.Second
	scriptLog  = 30 * time.Second
)

// resetName finds the functions a library file defines to reset its per-call state
// (lib_route's tables of what a call routed): the function calls them first.
var resetName = regexp.MustCompile(`(?m)^local function ([a-z_]+_reset)\(\)`)

// newScript makes the script name (a file under lua/) whose head runs once, when its
// library is loaded, and whose body runs on each call. The body sees the call's KEYS
// and ARGV as an EVAL script does; so do the head's functions (through the library's
// KEYS and ARGV, which each call sets: Redis runs one call at a time).
func newScript(name, head, body string) *Script {
	sum := sha1.Sum([]byte(libText("", head, body)))
	fn := funcPrefix + strings.NewReplacer(".lua", "", "-", "_").Replace(name) + "_" + hex.EncodeToString(sum[:hashBytes])
	src := rcallLine + head + body
	if usesCounts(body) {
		src = countTableLine + src // sent whole as an EVAL script (EnqueueOn)
	}
	sc := &Script{src: src, fn: fn, lib: libText(fn, head, body), name: name}
	scripts = append(scripts, sc)
	return sc
}

// rcall is redis.call as the scripts call it: a local of the library (an upvalue of
// its functions), set by each call (a library's load sees no redis.call: its redis
// is the loading API's), where redis.call is a global, looked up in the function's
// empty globals table and then, through its metatable, in Redis's (with the field
// call: ~200 instructions a call, ~12 calls a standalone job). An EVAL script's text
// sets it first (rcallLine).
const rcallLine = "local rcall = redis.call\n"

// countTable is the table of small counts the scripts' prologues look a record's view
// count up in before a tonumber (a strtod in Redis's Lua, ~1.8k instructions; make
// lua-gen: luagen.PrologueCounts): the decimal strings of 0 … 255 to their numbers.
// A library makes it once, when it is loaded, in a function around the script's (a
// local of the library's main function would pass Lua's 200 in finish_jobs').
const countTable = "COUNT"

// usesCounts says whether a script's code looks counts up in countTable (its
// prologue's COUNT[...]; the word alone is also an option of Redis's commands).
func usesCounts(body string) bool { return strings.Contains(body, countTable+"[") }

// countTableLine is the Lua line that makes countTable.
var countTableLine = func() string {
	var b strings.Builder
	b.WriteString("local " + countTable + " = {")
	for i := 0; i < 256; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "['%d'] = %d", i, i)
	}
	b.WriteString("}\n")
	return b.String()
}()

// libText is the code of the library fn of a script: countTable made around the
// script's function when its code looks counts up in it (not for every library: a
// table of 256 entries each).
func libText(fn, head, body string) string {
	var lib strings.Builder
	counts := ""
	if usesCounts(body) {
		counts = countTableLine
	}
	fmt.Fprintf(&lib, "#!lua name=%s\nlocal KEYS, ARGV, EVENTS_CAP_N, rcall\n%s\nredis.register_function('%s', (function()\n%sreturn function(keys, args)\nKEYS, ARGV, EVENTS_CAP_N, rcall = keys, args, nil, redis.call\n", fn, head, fn, counts)
	for _, m := range resetName.FindAllStringSubmatch(head, -1) {
		lib.WriteString(m[1] + "()\n")
	}
	lib.WriteString(body)
	lib.WriteString("\nend end)())\n")
	return lib.String()
}

// checkScripts reports a script that could not be made (a file missing from lua/).
func checkScripts() error {
	for _, sc := range scripts {
		if sc.err != nil {
			return sc.err
		}
	}
	return nil
}

// libraries returns the names of the store's libraries (hero_*) the server has.
func (srv *Server) libraries(ctx context.Context) (map[string]bool, error) {
	libs, err := srv.fixed.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: funcPrefix + "*"}).Result()
	if err != nil {
		if strings.Contains(err.Error(), "unknown command") {
			return nil, fmt.Errorf("redis at %s: Redis 7.0 or later is needed (FUNCTION): %w", srv.Name, err)
		}
		return nil, fmt.Errorf("redis at %s: list the functions: %w", srv.Name, err)
	}
	out := make(map[string]bool, len(libs))
	for _, l := range libs {
		out[l.Name] = true
	}
	return out, nil
}

// missingScripts are this version's scripts whose library is not in have.
func missingScripts(have map[string]bool) []*Script {
	var out []*Script
	for _, sc := range scripts {
		if !have[sc.fn] {
			out = append(out, sc)
		}
	}
	return out
}

// loadScripts loads the libraries of list into the server, in one round trip.
func (srv *Server) loadScripts(ctx context.Context, list []*Script) error {
	cmds, err := srv.fixed.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sc := range list {
			p.FunctionLoad(ctx, sc.lib)
		}
		return nil
	})
	if len(cmds) == 0 && err != nil {
		return fmt.Errorf("redis at %s: load the store's functions: %w", srv.Name, err)
	}
	for i, cmd := range cmds {
		if e := cmd.Err(); e != nil && !isLoaded(e) {
			return fmt.Errorf("redis at %s: load the library of script %s: %w", srv.Name, list[i].name, e)
		}
	}
	return nil
}

// markScripts records in keys.Functions that this process calls this version's
// libraries (now).
func (srv *Server) markScripts(ctx context.Context) error {
	now := time.Now().UnixMilli()
	args := make([]any, 0, 2*len(scripts))
	for _, sc := range scripts {
		args = append(args, sc.fn, now)
	}
	if err := srv.fixed.HSet(ctx, keys.Functions, args...).Err(); err != nil {
		return fmt.Errorf("redis at %s: record the functions in use: %w", srv.Name, err)
	}
	return nil
}

// tendScripts is the loader's pass over a server: it loads this version's libraries
// the server does not have and, with retire, records them as in use and deletes the
// libraries of other versions no process has called for keep.
func (s *Store) tendScripts(ctx context.Context, srv *Server, retire bool) error {
	have, err := srv.libraries(ctx)
	if err != nil {
		return err
	}
	if missing := missingScripts(have); len(missing) > 0 {
		if err := srv.loadScripts(ctx, missing); err != nil {
			return err
		}
		s.log.Info().Str("redis", srv.Name).Int("loaded", len(missing)).Msg("loaded this version's Redis functions")
	}
	if !retire {
		return nil
	}
	if err := srv.markScripts(ctx); err != nil {
		return err
	}
	return s.retireScripts(ctx, srv, have)
}

// retireScripts deletes the libraries of have that are of no script of this version
// and that no process has said it calls for KeepOldScripts; one without a record is
// recorded as in use now (a library of an earlier version, seen for the first time).
// Records of libraries the server no longer has are removed.
func (s *Store) retireScripts(ctx context.Context, srv *Server, have map[string]bool) error {
	marks, err := srv.fixed.HGetAll(ctx, keys.Functions).Result()
	if err != nil {
		return fmt.Errorf("redis at %s: read the functions in use: %w", srv.Name, err)
	}
	mine := make(map[string]bool, len(scripts))
	for _, sc := range scripts {
		mine[sc.fn] = true
	}
	now := time.Now()
	var stale, forget []string
	var first []any
	for name := range have {
		ms, err := strconv.ParseInt(marks[name], 10, 64)
		switch {
		case mine[name]:
		case err != nil:
			first = append(first, name, now.UnixMilli())
		case now.Sub(time.UnixMilli(ms)) > s.keepOld:
			stale = append(stale, name)
		}
	}
	for name := range marks {
		if !have[name] && !mine[name] {
			forget = append(forget, name)
		}
	}
	if len(first)+len(stale)+len(forget) == 0 {
		return nil
	}
	sort.Strings(stale)
	_, err = srv.fixed.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(first) > 0 {
			p.HSet(ctx, keys.Functions, first...)
		}
		for _, name := range stale {
			p.FunctionDelete(ctx, name)
		}
		if gone := append(stale, forget...); len(gone) > 0 {
			p.HDel(ctx, keys.Functions, gone...)
		}
		return nil
	})
	if err != nil && !strings.Contains(err.Error(), "not exist") {
		return fmt.Errorf("redis at %s: delete the functions of other versions: %w", srv.Name, err)
	}
	if len(stale) > 0 {
		s.log.Info().Str("redis", srv.Name).Strs("libraries", stale).Dur("unused_for", s.keepOld).Msg("deleted the Redis functions of another version")
	}
	return nil
}

// WaitScripts waits until every server has the libraries of this version's scripts,
// which the loader (supervisor-daemon) loads: it says in the log what it waits for
// (every scriptLog) and calls note with it (a readiness probe's "starting" text; ""
// once there). It returns at once in the loader, and ctx's error when ctx ends first.
func (s *Store) WaitScripts(ctx context.Context, note func(string)) error {
	if s.loader {
		return nil
	}
	var since, logged time.Time
	for {
		missing, srv, err := s.missingSomewhere(ctx)
		switch {
		case err != nil && !fault.Transient(err):
			return err
		case err == nil && len(missing) == 0:
			if !since.IsZero() {
				s.log.Info().Dur("waited", time.Since(since)).Msg("this version's Redis functions are loaded; starting")
			}
			note("")
			return nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		what := waitingFor(missing, srv, err)
		note(what)
		if time.Since(logged) >= scriptLog {
			logged = time.Now()
			ev := s.log.Warn()
			if srv != nil {
				ev = ev.Str("redis", srv.Name).Int("missing", len(missing)).Strs("functions", missing[:min(3, len(missing))])
			}
			ev.Err(err).Msg(what)
		}
		if !fault.Sleep(ctx, scriptPoll) {
			return ctx.Err()
		}
	}
}

// missingSomewhere returns the names of this version's libraries that the first
// server lacking some lacks (nil when every server has all of them).
func (s *Store) missingSomewhere(ctx context.Context) ([]string, *Server, error) {
	if err := checkScripts(); err != nil {
		return nil, nil, err
	}
	for _, srv := range s.servers {
		have, err := srv.libraries(ctx)
		if err != nil {
			return nil, srv, err
		}
		if missing := missingScripts(have); len(missing) > 0 {
			names := make([]string, len(missing))
			for i, sc := range missing {
				names[i] = sc.fn
			}
			return names, srv, nil
		}
	}
	return nil, nil, nil
}

// waitingFor says what WaitScripts waits for.
func waitingFor(missing []string, srv *Server, err error) string {
	if err != nil {
		return fmt.Sprintf("waiting for Redis to list its functions: %v", err)
	}
	return fmt.Sprintf("waiting for %d Redis functions of this version (%s, …) on redis at %s: supervisor-daemon of this version loads them (only its Redis user may)",
		len(missing), missing[0], srv.Name)
}

// tend runs until ctx ends: the loader checks every scriptCheck that each server has
// its libraries (and every scriptMark retires other versions'); a waiting process
// records every scriptMark that it calls its libraries. A failed pass is logged and
// tried again at the next tick.
func (s *Store) tend(ctx context.Context) {
	every := scriptMark
	if s.loader {
		every = scriptCheck
	}
	t := time.NewTicker(every)
	defer t.Stop()
	lastMark := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mark := time.Since(lastMark) >= scriptMark-every/2
		if mark {
			lastMark = time.Now()
		}
		for _, srv := range s.servers {
			var err error
			switch {
			case s.loader:
				err = s.tendScripts(ctx, srv, mark)
			case mark:
				err = srv.markScripts(ctx)
			}
			if err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Str("redis", srv.Name).Msg("keeping the store's Redis functions: retried at the next check")
			}
		}
	}
}

// Run runs a script on a client (its DB 0). A function the server does not know (a
// Redis restarted without its data, a replica promoted without it, before the
// loader's next check) is an error, "Function not found", which fault.Transient
// counts as passing: the caller tries again once the loader has loaded it.
func (sc *Script) Run(ctx context.Context, c redis.Cmdable, keys []string, args ...any) *redis.Cmd {
	return c.FCall(ctx, sc.fn, keys, args...)
}

// run runs a script in the server's DB 0; in the loader, a function the server does
// not know is loaded and the call run again.
func (srv *Server) run(ctx context.Context, sc *Script, keys []string, args ...any) *redis.Cmd {
	r := sc.Run(ctx, srv.fixed, keys, args...)
	if srv.loader && isNoFunction(r.Err()) {
		// loaded by another replica meanwhile: the call's own error is what counts
		_ = srv.fixed.FunctionLoad(ctx, sc.lib).Err()
		return sc.Run(ctx, srv.fixed, keys, args...)
	}
	return r
}

// isNoFunction: the server does not know the function (a restart without its data, a
// FUNCTION FLUSH, or the loader of another version deleted it).
func isNoFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// isLoaded: a FUNCTION LOAD refused because the library is there already (its name
// holds its text's hash: the same code).
func isLoaded(err error) bool { return err != nil && strings.Contains(err.Error(), "already exists") }

// luaRunner runs one call of a script (the generated calls of lua_gen.go run through
// it): a context's DB (*DB), a server's DB 0 (*Server) or a client (cmdRunner).
type luaRunner interface {
	runLua(ctx context.Context, c Call) (any, error)
}

// runLua runs c in the server's DB 0 (run).
func (srv *Server) runLua(ctx context.Context, c Call) (any, error) {
	return srv.run(ctx, c.Script, c.Keys, c.Args...).Result()
}

// cmdRunner runs calls on a client (its DB 0), as Script.Run does.
type cmdRunner struct{ c redis.Cmdable }

func (r cmdRunner) runLua(ctx context.Context, c Call) (any, error) {
	return c.Script.Run(ctx, r.c, c.Keys, c.Args...).Result()
}
