-- lib_wake: the job queues' wake-ups.
--
--   - wake_targets(q), called in the context's DB: the runner ids whose wake lists get
--     a token for a job pushed onto job queue q: the runner of a pinned queue
--     (coord:rq:<runner>:<type>), else the members of coord:wakers:<q> (keys.Wakers).
--   - wake_runners(ctx, q, ids, n), called in DB 0, for n jobs pushed: min(n,
--     WAKE_SPREAD) tokens (the context id ctx) at the tail of the wake list of queue q
--     of each runner id of ids (keys.WakeRunner); over WAKE_CAP tokens, one only if the
--     list holds none of ctx. Needs lib_busy.

local function wake_targets(q)
  local r = string.match(q, '^' .. K_PINNED_QUEUE .. '(%d+):')
  if r then return {r} end
  return rcall('SMEMBERS', K_WAKERS .. q)
end
local function wake_runners(ctx, q, ids, n)
  for _, r in ipairs(ids) do
    local wk = K_WAKE_RUNNER .. r .. ':' .. q
    local k = math.min(n, WAKE_SPREAD, WAKE_CAP - rcall('LLEN', wk))
    if k <= 0 then
      if n > 0 and not rcall('LPOS', wk, ctx) then rcall('RPUSH', wk, ctx) end
    else
      local t = {}
      for i = 1, k do t[i] = ctx end
      rcall('RPUSH', wk, unpack(t))
    end
  end
end
