package worker

import (
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/dispatcher"
)

// Every transition of a job that involves more than one key is one Lua script, so that
// a crash between two commands cannot leave a job half-moved. Each is a file under
// lua/ that opens with its header (what it does, its KEYS, ARGV and reply); the ones
// that end a stopped job include lua/lib_end_stopped.lua first. Job hash keys that a
// script derives from a job id (the requeue script) are built from the prefix given
// in ARGV: the protocol runs on one Redis server, never a cluster. The scripts that read
// or write a status start with statusPrelude, so that none spells one.

//go:embed lua/lib_end_stopped.lua
var endStoppedLua string

//go:embed lua/start.lua
var startLua string

//go:embed lua/finish.lua
var finishLua string

//go:embed lua/park.lua
var parkLua string

//go:embed lua/release.lua
var releaseLua string

//go:embed lua/stop.lua
var stopLua string

//go:embed lua/requeue.lua
var requeueLua string

//go:embed lua/heartbeat.lua
var heartbeatLua string

//go:embed lua/append_log.lua
var appendLogLua string

// statusPrelude defines the job statuses (Status*, from lib/model) as the Lua locals
// ST_DISPATCHED, ST_STARTED, ST_ERROR and ST_FINISHED.
var statusPrelude = fmt.Sprintf("local ST_DISPATCHED, ST_STARTED, ST_ERROR, ST_FINISHED = '%s', '%s', '%s', '%s'\n",
	dispatcher.StatusDispatched, dispatcher.StatusStarted, dispatcher.StatusError, dispatcher.StatusFinished)

var (
	startScript     = redis.NewScript(statusPrelude + endStoppedLua + startLua)
	finishScript    = redis.NewScript(statusPrelude + finishLua)
	parkScript      = redis.NewScript(statusPrelude + endStoppedLua + parkLua)
	releaseScript   = redis.NewScript(releaseLua)
	stopScript      = redis.NewScript(statusPrelude + endStoppedLua + stopLua)
	requeueScript   = redis.NewScript(statusPrelude + requeueLua)
	heartbeatScript = redis.NewScript(heartbeatLua)
	appendLogScript = redis.NewScript(appendLogLua)
)
