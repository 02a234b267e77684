-- set_job_status: changes a job's status (and other fields), keeping the status
-- indexes right.
--
-- KEYS:
--   job  job:<caller>:<id>
-- ARGV:
--   caller  int    the caller id
--   id      int    the job id
--   st      string  the new status
--   fields  []raw  field/value pairs
-- Libs: lib_busy lib_state
-- Reply: int 1 set, 0 no such job.
-- Derives (context DB): coord:idx:jobs:<status> (set_job).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local id = ARGV[2]
local st = ARGV[3]
local argi = 4
local fields
local n_fields = tonumber(ARGV[argi])
if n_fields <= 7000 then fields = {unpack(ARGV, argi + 1, argi + n_fields)} else fields = {}; for k = 1, n_fields do fields[k] = ARGV[argi + k] end end
argi = argi + 1 + n_fields
-- luagen: end of the prologue

if rcall('EXISTS', KEYS[1]) == 0 then return 0 end
set_job(caller, id, st, unpack(fields))
return 1
