-- enqueue: pushes items onto a job queue with their wake tokens.
--
-- KEYS:
--   queue  the job queue (queue:<type>, queue:exec:<executor> or coord:rq:<runner>:<type>)
-- ARGV:
--   ctx    int    the context id
--   items  []raw  the items (LPUSHed in this order)
-- Libs: lib_busy lib_wake
-- Reply: int the number of items pushed.
-- Derives: coord:wakers:<queue> (context DB), then in DB 0 (SELECT 0) the wake lists
--   coord:wake:runner:<id>:<queue> of each runner id that may take the items, and
--   coord:busy (lib_wake, lib_busy).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local argi = 2
local items
local n_items = tonumber(ARGV[argi])
if n_items <= 7000 then items = {unpack(ARGV, argi + 1, argi + n_items)} else items = {}; for k = 1, n_items do items[k] = ARGV[argi + k] end end
argi = argi + 1 + n_items
-- luagen: end of the prologue

local n = #items
for i = 1, n, 1000 do rcall('LPUSH', KEYS[1], unpack(items, i, math.min(i + 999, n))) end
local ids = wake_targets(KEYS[1])
rcall('SELECT', '0')
wake_runners(ctx, KEYS[1], ids, n)
mark_busy(ctx)
return n
