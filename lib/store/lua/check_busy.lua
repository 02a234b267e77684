-- check_busy: reads what a context has waiting or held, and with tidy keeps its
-- entry in coord:busy true.
--
-- KEYS:
--   msg_out  msg_out
--   msg_in   msg_in
--   leases   coord:leases
--   runners  coord:idx:runners
--   busy     coord:busy (DB 0, SELECT 0)
-- ARGV:
--   ctx    int       the context id
--   tidy   bool      remove the context from coord:busy when it has nothing waiting
--                    and no lease, add it when it has
--   types  []string  the script types
-- Reply: busy {lease count, {list, length…}} of the lists that are not empty
--   leases  int  the number of leases
--   lists   []raw  list, length, … of the lists that are not empty
-- Derives (context DB): queue:<type> of the script types (and its
--   coord:prio:queue:<type>, keys.Priority, counted with it) and the pinned queues
--   coord:rq:<runner>:<type> of the runners of coord:idx:runners (read here).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local tidy = ARGV[2] == '1'
local argi = 3
local types
local n_types = tonumber(ARGV[argi])
if n_types <= 7000 then types = {unpack(ARGV, argi + 1, argi + n_types)} else types = {}; for k = 1, n_types do types[k] = ARGV[argi + k] end end
argi = argi + 1 + n_types
-- luagen: end of the prologue

local out = {}
local function look(q, prio)
  local n = rcall('LLEN', q)
  if prio then n = n + rcall('ZCARD', K_PRIO .. q) end
  if n > 0 then out[#out + 1] = q; out[#out + 1] = n end
end
look(KEYS[1])
look(KEYS[2])
local runners = rcall('ZRANGE', KEYS[4], 0, -1)
for _, t in ipairs(types) do
  look(K_QUEUE .. t, true)
  for _, r in ipairs(runners) do look(K_PINNED_QUEUE .. r .. ':' .. t) end
end
local leases = rcall('ZCARD', KEYS[3])
if tidy then
  rcall('SELECT', '0')
  if #out == 0 and leases == 0 then
    rcall('ZREM', KEYS[5], ctx)
  else
    rcall('ZADD', KEYS[5], 'NX', 0, ctx)
  end
end
return {leases, out}
