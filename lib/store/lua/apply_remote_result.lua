-- applyRemoteResultScript: ARGV caller, id, attempt, status, then field/value pairs.
-- Writes the end of a job that ran on another node into the origin's job, once, and
-- only for the attempt the origin is waiting for.

local caller, id, attempt, st = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local jk = K_JOB .. caller .. ':' .. id
local cur = redis.call('HGET', jk, 'status')
if not cur or cur == JOB_FINISHED or cur == JOB_ERROR then return 0 end
if (redis.call('HGET', jk, 'attempt') or '1') ~= attempt then return 0 end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
set_job(caller, id, st, unpack(fields))
return 1
