-- apply_remote_result: writes the end of a job that ran on another node into the
-- origin's job, once, and only for the attempt the origin is waiting for.
--
-- KEYS:
--   job  job:<caller>:<id>
-- ARGV:
--   caller   int    the caller id
--   id       int    the job id
--   attempt  int    the attempt that ended
--   st       string  its status
--   fields   []raw  field/value pairs
-- Libs: lib_busy lib_state
-- Reply: int 1 written; 0 when the job is gone, has ended, or waits for another attempt.
-- Derives (context DB): coord:idx:jobs:<status> (set_job).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local id = ARGV[2]
local attempt = ARGV[3]
local st = ARGV[4]
local argi = 5
local fields
local n_fields = tonumber(ARGV[argi])
if n_fields <= 7000 then fields = {unpack(ARGV, argi + 1, argi + n_fields)} else fields = {}; for k = 1, n_fields do fields[k] = ARGV[argi + k] end end
argi = argi + 1 + n_fields
-- luagen: end of the prologue

local jk = KEYS[1]
local cur = rcall('HGET', jk, 'status')
if not cur or cur == JOB_FINISHED or cur == JOB_ERROR then return 0 end
if (rcall('HGET', jk, 'attempt') or '1') ~= attempt then return 0 end
set_job(caller, id, st, unpack(fields))
return 1
