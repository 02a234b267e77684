-- lib_qpause: paused job queues (queue.pause; docs/scheduling.md).
--
--   - queue_paused(q), called in the context's DB: whether job queue q is paused: its
--     own field in coord:qpause (queue:<type>, queue:exec:<executor>), or, for a
--     runner's pinned queue coord:rq:<runner>:<suffix>, queue:<suffix>'s. One HEXISTS
--     of a hash that does not exist while no queue of the context is paused.

local function queue_paused(q)
  local suffix = string.match(q, '^' .. K_PINNED_QUEUE .. '%d+:(.+)$')
  if suffix then q = K_QUEUE .. suffix end
  return rcall('HEXISTS', K_QPAUSE, q) == 1
end
