-- trim_events: drops a context's events older than the cutoff, and never those of a
-- flow or job still kept: the cutoff moves back to the creation of the oldest flow or
-- job in the indexes (a shortened retention must not take the events of flows retained
-- under the longer one).
--
-- KEYS:
--   events  coord:events
--   flows   coord:idx:flows
--   jobs    coord:idx:jobs
-- ARGV:
--   cutoff  num  cutoff (ms)
-- Reply: int the number of events dropped.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local cutoff = tonumber(ARGV[1])
-- luagen: end of the prologue

for i = 2, 3 do
  local oldest = rcall('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if oldest[2] and tonumber(oldest[2]) < cutoff then cutoff = tonumber(oldest[2]) end
end
return rcall('XTRIM', KEYS[1], 'MINID', string.format('%d', cutoff) .. '-0')
