-- setJobStatusScript: ARGV caller, id, status, then field/value pairs.

local caller, id, st = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', K_JOB .. caller .. ':' .. id) == 0 then return 0 end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
set_job(caller, id, st, unpack(fields))
return 1
