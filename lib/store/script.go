package store

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Script is one of the store's Lua scripts. Each runs as a Redis function (FCALL) of a
// library of its own, which the server compiles and runs once, when loaded: the prelude
// and the library files it uses (head) make their closures then, and only the script's
// own file (body) runs on each call. Run as an EVAL script, the whole text runs on
// every call, and making the libraries' closures anew cost up to 76,000 instructions a
// call (finish_jobs; submit 42,000, claim_start 18,000): more than a job's own work for
// small calls. The function's name holds a hash of the text, so that services of two
// versions (a rolling upgrade) each call their own.
type Script struct {
	src  string // the whole text as an EVAL script (a transaction's: EnqueueManyOn)
	fn   string // the function's (and its library's) name: hero_<file>_<hash>
	lib  string // the library's code (FUNCTION LOAD)
	name string // its file under lua/, for errors
	err  error  // why it could not be made (Open reports it)
}

// scripts are every script made with NewScript or luaScript (package variables, made at
// init): Open loads them into each server.
var scripts []*Script

// NewScript prepares a script of one piece (all of it runs on each call) named name
// (letters, digits and "_"; its function is hero_<name>_<hash>).
func NewScript(name, src string) *Script { return newScript(name, "", src) }

// funcPrefix begins the name of every library and function of the store; the name
// ends with "_" and hashBytes of its text's SHA-1 in hex.
const (
	funcPrefix = "hero_"
	hashBytes  = 6
)

// resetName finds the functions a library file defines to reset its per-call state
// (lib_route's tables of what a call routed): the function calls them first.
var resetName = regexp.MustCompile(`(?m)^local function ([a-z_]+_reset)\(\)`)

// newScript makes the script name (a file under lua/, or NewScript's name) whose head
// runs once, when its library is loaded, and whose body runs on each call. The body
// sees the call's KEYS and ARGV as an EVAL script does; so do the head's functions
// (through the library's KEYS and ARGV, which each call sets: Redis runs one call at a
// time).
func newScript(name, head, body string) *Script {
	src := head + body
	sum := sha1.Sum([]byte(src))
	fn := funcPrefix + strings.NewReplacer(".lua", "", "-", "_").Replace(name) + "_" + hex.EncodeToString(sum[:hashBytes])
	var lib strings.Builder
	fmt.Fprintf(&lib, "#!lua name=%s\nlocal KEYS, ARGV\n%s\nredis.register_function('%s', function(keys, args)\nKEYS, ARGV = keys, args\n", fn, head, fn)
	for _, m := range resetName.FindAllStringSubmatch(head, -1) {
		lib.WriteString(m[1] + "()\n")
	}
	lib.WriteString(body)
	lib.WriteString("\nend)\n")
	sc := &Script{src: src, fn: fn, lib: lib.String(), name: name}
	scripts = append(scripts, sc)
	return sc
}

// loadScripts loads every script's library into a server (FUNCTION LOAD), in one round
// trip, and deletes the libraries of other versions of the same scripts (the services
// of another version load theirs again when they call: Function not found). Libraries
// of scripts this process does not have (another service's) are left alone.
func loadScripts(ctx context.Context, c *redis.Client) error {
	want := map[string]bool{}
	mine := map[string]bool{} // the names without their hash: hero_<name>_
	for _, sc := range scripts {
		if sc.err != nil {
			return sc.err
		}
		want[sc.fn] = true
		mine[sc.fn[:len(sc.fn)-2*hashBytes]] = true
	}
	cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, sc := range scripts {
			p.FunctionLoad(ctx, sc.lib)
		}
		return nil
	})
	for i, cmd := range cmds {
		if e := cmd.Err(); e != nil && !isLoaded(e) {
			if strings.Contains(e.Error(), "unknown command") {
				return fmt.Errorf("Redis 7.0 or later is needed (FUNCTION LOAD): %w", e)
			}
			return fmt.Errorf("load the library of script %s: %w", scripts[i].name, e)
		}
	}
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: funcPrefix + "*"}).Result()
	if err != nil {
		return err
	}
	var stale []string
	for _, l := range libs {
		if n := len(l.Name) - 2*hashBytes; n > 0 && mine[l.Name[:n]] && !want[l.Name] {
			stale = append(stale, l.Name)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, name := range stale {
			p.FunctionDelete(ctx, name)
		}
		return nil
	})
	if err != nil && !strings.Contains(err.Error(), "not exist") {
		return fmt.Errorf("delete the libraries of other versions: %w", err)
	}
	return nil
}

// Run runs a script on a client (its DB 0).
func (sc *Script) Run(ctx context.Context, c redis.Cmdable, keys []string, args ...any) *redis.Cmd {
	r := c.FCall(ctx, sc.fn, keys, args...)
	if isNoFunction(r.Err()) {
		// loaded by another client meanwhile: the call's own error is what counts
		_ = c.FunctionLoad(ctx, sc.lib).Err()
		return c.FCall(ctx, sc.fn, keys, args...)
	}
	return r
}

// isNoFunction: the server does not know the function (a restart without its data, a
// FUNCTION FLUSH, or another version's services deleted it).
func isNoFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// isLoaded: a FUNCTION LOAD refused because the library is there already (its name
// holds its text's hash: the same code).
func isLoaded(err error) bool { return err != nil && strings.Contains(err.Error(), "already exists") }
