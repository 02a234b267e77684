-- set_job_status: changes a job's status (and other fields), keeping the status
-- indexes right.
--
-- KEYS: [1] job:<caller>:<id>.
-- ARGV: [1] caller id, [2] job id, [3] status, [4…] field/value pairs.
-- Reply: 1 set, 0 no such job.
-- Derives (context DB): coord:idx:jobs:<status> (set_job).

local caller, id, st = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
set_job(caller, id, st, unpack(fields))
return 1
