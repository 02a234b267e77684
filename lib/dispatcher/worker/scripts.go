package worker

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/dispatcher"
)

// Every transition of a job that involves more than one key is one Lua script, so that
// a crash between two commands cannot leave a job half-moved. Each is a file under
// lua/ whose header declares its interface (KEYS, ARGV with types, its reply, the
// library files it needs: lua/lib_end_stopped.lua for the ones that end a stopped
// job); make lua-gen writes from it the script's Lua prologue and its typed call in
// lua_gen.go (CONTRIBUTING.md). Job hash keys that a script derives from a job id
// (the requeue script) are built from the prefix given as an argument: the protocol
// runs on one Redis server, never a cluster. Each script starts with statusPrelude,
// so that none spells a status.

//go:embed lua/*.lua
var luaFiles embed.FS

// statusPrelude defines the job statuses (Status*, from lib/model) as the Lua locals
// ST_DISPATCHED, ST_STARTED, ST_ERROR and ST_FINISHED.
var statusPrelude = fmt.Sprintf("local ST_DISPATCHED, ST_STARTED, ST_ERROR, ST_FINISHED = '%s', '%s', '%s', '%s'\n",
	dispatcher.StatusDispatched, dispatcher.StatusStarted, dispatcher.StatusError, dispatcher.StatusFinished)

// luaScript makes the script lua/<name>: the status prelude, the library files libs
// (in order), then the file (run as EVALSHA, loaded on a miss). A name no lua/ file
// has (lua_gen.go, generated from lua/, passes none) makes a script that fails each
// call saying so.
func luaScript(name string, libs ...string) *redis.Script {
	var b strings.Builder
	b.WriteString(statusPrelude)
	for _, f := range append(libs, name) {
		src, err := luaFiles.ReadFile("lua/" + f)
		if err != nil {
			b.WriteString("return redis.error_reply('ERR lua/" + f + " is missing from the build')\n")
			break
		}
		b.Write(src)
		b.WriteString("\n")
	}
	return redis.NewScript(b.String())
}

// luaCall is one run of a script with its KEYS and ARGV (made by the generated calls).
type luaCall struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// luaRunner runs calls (the generated run methods).
type luaRunner interface {
	runLua(ctx context.Context, c luaCall) (any, error)
}

// clientRunner runs calls on a client (EVALSHA, EVAL on a miss).
type clientRunner struct{ c redis.Scripter }

func (r clientRunner) runLua(ctx context.Context, c luaCall) (any, error) {
	return c.Script.Run(ctx, r.c, c.Keys, c.Args...).Result()
}
