-- lib_finalize: defines finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor,
-- retention_ms), which ends a flow whose nodes are all final: result map, status
-- (finished, or error when a node failed or the flow was cancelled), event, the
-- flow's cascade list gone (coord:cascade:<flow>: what it held is final), then in
-- DB 0 (SELECT 0) its leaving coord:flows:active, its retention (coord:expire) and the
-- waiters' notice (coord:flowdone), and back to the context's DB. Needs lib_state.

local function finalize(dag, fk, rk, flow, caller, ctx, now_s, now_ms, actor, retention_ms)
  local failed = tonumber(rcall('HGET', dag, 'failed') or '0')
  local fst, ev = FLOW_FINISHED, EV_FLOW_FINISHED
  if failed > 0 or rcall('HGET', fk, 'cancelled_by') then fst, ev = FLOW_ERROR, EV_FLOW_ERROR end
  local flat = rcall('HGETALL', rk)
  local result = '{}'
  if #flat > 0 then
    local m = {}
    for j = 1, #flat, 2 do m[flat[j]] = flat[j + 1] end
    m['~'] = nil -- (lib_complete's RESULTS_MARK: no result)
    if next(m) then result = cjson.encode(m) end
  end
  set_flow(flow, fst, 'result', result, 'finished_at', now_s, 'finished_at_ms', now_ms, 'updated_at', now_s)
  rcall('DEL', rk, K_FLOW_CASCADE .. flow) -- every node final: nothing left to cancel
  event(ev, actor, now_ms, flow, '0', caller, fst, rcall('HGET', fk, 'error') or '')
  local keep = tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0
  if keep > 0 then retention_ms = keep * 1000 end
  rcall('SELECT', '0')
  rcall('SREM', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
  if tonumber(retention_ms) > 0 then
    rcall('ZADD', K_EXPIRE, tonumber(now_ms) + tonumber(retention_ms), ctx .. ':flow:' .. flow)
  end
  rcall('PUBLISH', K_FLOW_DONE, ctx .. ':' .. flow)
  rcall('SELECT', ctx)
  return fst
end
