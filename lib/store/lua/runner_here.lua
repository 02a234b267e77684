-- runner_here: says whether a runner record exists in this context and keeps the
-- server's index of the runner's contexts true for it, in one step.
--
-- KEYS:
--   runner    runner:<id> (context DB)
--   contexts  coord:runner:<id>:contexts (DB 0, SELECT 0)
-- ARGV:
--   runner_id  int     the runner's id
--   ctx        int     the context id
-- Reply: int 1 when the runner exists (the context is then in the index), 0 when not (it is
--   not).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local runner_id = ARGV[1]
local ctx = ARGV[2]
-- luagen: end of the prologue

local here = rcall('EXISTS', KEYS[1])
rcall('SELECT', '0')
if here == 1 then
  rcall('SADD', KEYS[2], ctx)
else
  rcall('SREM', KEYS[2], ctx)
end
return here
