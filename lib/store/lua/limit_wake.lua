-- limit_wake: a scheduler's release of a job queue that a rate limit parked
-- (lib_limit: an entry "<ctx>:limit:<queue>" of coord:delayed at the time its next
-- token comes): while the entry is due, it goes and the queue's runners get a wake
-- token, so that one claims again (a claim still limited parks the queue anew). Two
-- schedulers releasing the same entry: the second changes nothing.
--
-- KEYS:
--   queue  the job queue (context DB)
-- ARGV:
--   ctx     string  the context id
--   member  string  the coord:delayed entry
--   now_ms  int     now (ms)
-- Libs: lib_busy lib_wake
-- Reply: int 1 woken, 0 the entry was not due (or gone).
-- Derives: context DB: coord:wakers:<queue> (lib_wake); DB 0 (SELECT 0, last):
--   coord:delayed, the runners' wake lists of the queue, coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local member = ARGV[2]
local now_ms = ARGV[3]
-- luagen: end of the prologue

local targets = wake_targets(KEYS[1])
rcall('SELECT', '0')
local due = tonumber(rcall('ZSCORE', K_DELAYED, member) or '')
if not due or due > tonumber(now_ms) then return 0 end
rcall('ZREM', K_DELAYED, member)
wake_runners(ctx, KEYS[1], targets, 1)
mark_busy(ctx)
return 1
