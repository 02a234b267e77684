-- lib_events: defines EVENTS_CAP(), the cap of a context's event stream for an XADD
-- MAXLEN ~ (a string: a Lua number passed to redis.call is formatted with "%.17g",
-- thousands of instructions for every XADD): EVENTS_PER_JOB events for each job the
-- context keeps (coord:idx:jobs), never less than EVENTS_MAXLEN, so that the events of
-- a flow of 100,000 jobs stay while its watchers read them. Call it in the context's
-- DB. It is not listed in a script's Libs: the prelude takes its one line (buildPrelude
-- in lib/store/lua.go), given to the scripts that use it like the prelude's constants.
local EVENTS_CAP = function() local n = redis.call('ZCARD', K_JOB_INDEX) * EVENTS_PER_JOB; if n < EVENTS_MAXLEN then n = EVENTS_MAXLEN end; return string.format('%d', n) end
