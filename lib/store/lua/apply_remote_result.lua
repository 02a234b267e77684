-- apply_remote_result: writes the end of a job that ran on another node into the
-- origin's job, once, and only for the attempt the origin is waiting for.
--
-- KEYS: [1] job:<caller>:<id>.
-- ARGV: [1] caller id, [2] job id, [3] attempt, [4] status, [5…] field/value pairs.
-- Reply: 1 written; 0 when the job is gone, has ended, or waits for another attempt.
-- Derives (context DB): coord:idx:jobs:<status> (set_job).

local caller, id, attempt, st = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local jk = KEYS[1]
local cur = redis.call('HGET', jk, 'status')
if not cur or cur == JOB_FINISHED or cur == JOB_ERROR then return 0 end
if (redis.call('HGET', jk, 'attempt') or '1') ~= attempt then return 0 end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
set_job(caller, id, st, unpack(fields))
return 1
