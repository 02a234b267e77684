-- standalone_done: applies the end of a standalone job (one of no flow): a retry is
-- scheduled while attempts are left; else a failed job goes to the DLQ, and the job's
-- retention starts and its waiters are told.
--
-- KEYS:
--   job     job:<caller>:<id>
--   events  coord:events
-- ARGV:
--   ctx           int     the context id
--   caller        int     the caller id
--   id            int     the job id
--   attempt       num     the attempt that ended
--   status        string  its status
--   err           string  its error
--   fatal         bool    no retry
--   retries       num     retries (-1: the job's own; lib/retry decides)
--   backoff       num     the delay of a retry (ms; lib/retry's Policy)
--   now_s         int     now (s)
--   now_ms        int     now (ms)
--   actor         string  who applies the end
--   retention_ms  num     retention (ms; context:<ctx>.retention_seconds wins)
-- Libs: lib_busy lib_state lib_finalize lib_complete
-- Reply: done code 0 nothing changed (a stale or repeated end), 1 applied, 2 retry scheduled
--   code    int     0, 1 or 2
--   status  string  ""
--   due     int     when the retry is due (ms)
-- Derives: context DB: context:<ctx>, coord:dlq (dead_letter); DB 0 (SELECT 0): coord:due,
--   coord:expire, coord:jobdone (PUBLISH).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local id = ARGV[3]
local attempt = tonumber(ARGV[4])
local status = ARGV[5]
local err = ARGV[6]
local fatal = ARGV[7] == '1'
local retries = tonumber(ARGV[8])
local backoff = tonumber(ARGV[9])
local now_s = ARGV[10]
local now_ms = ARGV[11]
local actor = ARGV[12]
local retention_ms = tonumber(ARGV[13])
-- luagen: end of the prologue

local jk, ek = KEYS[1], KEYS[2]
return standalone_end(jk, ek, ctx, caller, id, attempt, status, err, fatal, retries, backoff, now_s, now_ms, actor, retention_ms or 0)
