-- update_context: changes the fields of a context that a context.update names, and
-- only those (it wrote back every field of the context as it had read it: an update
-- racing another, or an operator's change of the context's admins or job_max, was
-- undone by a write of other fields), records the event and tells supervisor-daemon's
-- replicas (their open streams of the context are checked again against its roles).
-- A context deleted meanwhile is not made again.
--
-- KEYS:
--   context  context:<id> (the context's DB)
-- ARGV:
--   actor       string    who updates it
--   now_ms      int       now (ms)
--   updated_at  int       updated_at (s)
--   detail      string    the event's detail
--   set         []string  field/value pairs to set
--   del         []string  fields to remove (a value left empty)
-- Reply: int 1 updated, 0 no such context.
-- Libs: lib_busy lib_state
-- Derives: context DB: coord:events; K_AUTH_CHANGED, the pub/sub channel of credential
--   changes: its message is KEYS[1], "context:<id>".

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local actor = ARGV[1]
local now_ms = ARGV[2]
local updated_at = ARGV[3]
local detail = ARGV[4]
local argi = 5
local set
local n_set = tonumber(ARGV[argi])
if n_set <= 7000 then set = {unpack(ARGV, argi + 1, argi + n_set)} else set = {}; for k = 1, n_set do set[k] = ARGV[argi + k] end end
argi = argi + 1 + n_set
local del
local n_del = tonumber(ARGV[argi])
if n_del <= 7000 then del = {unpack(ARGV, argi + 1, argi + n_del)} else del = {}; for k = 1, n_del do del[k] = ARGV[argi + k] end end
argi = argi + 1 + n_del
-- luagen: end of the prologue

if rcall('EXISTS', KEYS[1]) == 0 then return 0 end
if #del > 0 then rcall('HDEL', KEYS[1], unpack(del)) end
rcall('HSET', KEYS[1], 'updated_at', updated_at, unpack(set))
event(EV_CONTEXT_UPDATED, actor, now_ms, '0', '0', '0', '', detail)
rcall('PUBLISH', K_AUTH_CHANGED, KEYS[1])
return 1
