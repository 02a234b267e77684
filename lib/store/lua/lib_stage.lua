-- lib_stage: a flow's creation as a unit (flow.begin; lib/store/stage.go).
--
--   - stage_begin(flow_seq, job_seq, caller, n, ttl_ms, now_ms), called in the
--     context's DB, with the keys coord:seq:flow and coord:seq:job:<caller>: reserves a
--     free flow id and a range of n job ids of the caller and records the stage
--     (coord:flowstage:<flow>: caller, first, last, ttl_ms, expires_ms, state open).
--     Returns flow (a string), first, last, expires (numbers), or nil and an error
--     message when the caller's job ids would pass 2^32-1 (nothing changed).
--   - stage_expire(ctx, flow, expires): enters the stage's expiry in coord:expire
--     (member <ctx>:stage:<flow>), in DB 0: it SELECTs 0, so it comes last.

local function stage_begin(flow_seq, job_seq, caller, n, ttl_ms, now_ms)
  local last = rcall('INCRBY', job_seq, n)
  if last > 4294967295 then
    rcall('INCRBY', job_seq, -n)
    return nil, 'CONFLICT the job ids of caller ' .. caller .. ' are exhausted'
  end
  local flow
  repeat
    flow = string.format('%d', rcall('INCR', flow_seq))
  until rcall('EXISTS', K_FLOW .. flow) == 0 and rcall('EXISTS', K_FLOW_STAGE .. flow) == 0
  local first = last - n + 1
  local expires = now_ms + tonumber(ttl_ms)
  rcall('HSET', K_FLOW_STAGE .. flow, 'caller', caller, 'first', string.format('%d', first), 'last', string.format('%d', last),
    'ttl_ms', ttl_ms, 'expires_ms', string.format('%d', expires), 'state', 'open')
  return flow, first, last, expires
end

local function stage_expire(ctx, flow, expires)
  rcall('SELECT', '0')
  rcall('ZADD', K_EXPIRE, string.format('%d', expires), ctx .. ':stage:' .. flow)
end
