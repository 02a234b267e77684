-- standalone_done: applies the end of a standalone job (one of no flow): a retry is
-- scheduled while attempts are left; else a failed job goes to the DLQ, and the job's
-- retention starts and its waiters are told.
--
-- KEYS: [1] job:<caller>:<id>, [2] coord:events.
-- ARGV: [1] context id, [2] caller id, [3] job id, [4] attempt, [5] status, [6] error,
--   [7] fatal (1/0), [8] retries (-1: the job's own), [9] backoff (ms), [10] now (s),
--   [11] now (ms), [12] actor, [13] retention (ms; context:<ctx>.retention_seconds wins).
-- Reply: {code, "", retry due (ms)}: code 0 nothing changed (a stale or repeated end),
--   1 applied, 2 retry scheduled.
-- Derives: context DB: context:<ctx>, coord:dlq (dead_letter); DB 0 (SELECT 0): coord:due,
--   coord:expire, coord:jobdone (PUBLISH).

local jk, ek = KEYS[1], KEYS[2]
local ctx, caller, id, attempt, status, err = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[6]
local fatal, retries, backoff, now_s, now_ms, actor = ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10], ARGV[11], ARGV[12]
return standalone_end(jk, ek, ctx, caller, id, attempt, status, err, fatal, retries, backoff, now_s, now_ms, actor, tonumber(ARGV[13]) or 0)
