-- lib_busy: defines mark_busy(ctx), which adds context ctx to coord:busy (K_BUSY,
-- keys.Busy) with the server's time. Call it in DB 0, in the step that pushes an item
-- onto one of the context's queues.

local function mark_busy(ctx)
  local t = rcall('TIME')
  rcall('ZADD', K_BUSY, t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)), ctx)
end
