-- append_log: appends a chunk to a job's log within a size cap; while someone tails
-- the log (its watch key exists), tells them on coord:logappend.
--
-- KEYS:
--   log    coord:log:<caller>:<id>
--   watch  coord:logwatch:<caller>:<id>
-- ARGV:
--   chunk  string  the chunk
--   max    num     the cap (bytes)
--   ref    string  the job's "<ctx>:<caller>:<id>" (the notice's payload)
-- Reply: int the log's new length. Past the cap one truncation note is written, then nothing.
-- Derives: coord:logappend (a channel) where ref is published while the watch key exists.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local chunk = ARGV[1]
local max = tonumber(ARGV[2])
local ref = ARGV[3]
-- luagen: end of the prologue

local len = rcall('STRLEN', KEYS[1])
if len >= max then return len end
if len + #chunk > max then
  chunk = string.sub(chunk, 1, max - len) .. '\n[log truncated at ' .. max .. ' bytes]\n'
end
len = rcall('APPEND', KEYS[1], chunk)
if rcall('EXISTS', KEYS[2]) == 1 then
  rcall('PUBLISH', K_LOG_APPENDED, ref)
end
return len
