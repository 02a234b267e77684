-- split_request: replaces a claimed job request of several jobs by one request each.
-- The new messages go on msg_out (a wake token each); the claimed one is marked
-- processed and its claim released, only while the claim holds it.
--
-- KEYS:
--   msg_out  msg_out
--   proc     the processing list
--   leases   coord:leases
-- ARGV:
--   ctx     int     the context id
--   caller  int     the caller id
--   now_s   int     now (s)
--   now_ms  int     now (ms)
--   item    string  the claimed message's key
--   member  string  its lease member
--   flow    int     the flow id
--   jobs    []part  one request each
--     id      int    the job id
--     fields  []raw  its message's field/value pairs
-- Libs: lib_busy lib_state
-- Reply: int the number of messages pushed (0: the claim no longer held the message).
-- Derives: context DB: message:<caller>:<id> (fresh ids), coord:seq:message,
--   coord:flowmsgs:<flow>; DB 0 (SELECT 0, last): coord:wake:msg_out,
--   coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local now_s = ARGV[3]
local now_ms = ARGV[4]
local item = ARGV[5]
local member = ARGV[6]
local flow = ARGV[7]
local argi = 8
local jobs
local n_jobs = tonumber(ARGV[argi])
jobs = {}
argi = argi + 1
for k = 1, n_jobs do
  local e_jobs = {id = ARGV[argi], fields = false}
  argi = argi + 1
  local n_e_jobs_fields = tonumber(ARGV[argi])
  if n_e_jobs_fields <= 7000 then e_jobs.fields = {unpack(ARGV, argi + 1, argi + n_e_jobs_fields)} else e_jobs.fields = {}; for k = 1, n_e_jobs_fields do e_jobs.fields[k] = ARGV[argi + k] end end
  argi = argi + 1 + n_e_jobs_fields
  jobs[k] = e_jobs
end
-- luagen: end of the prologue

local mo, proc, leases = KEYS[1], KEYS[2], KEYS[3]
-- Only while the claim holds the message: a second run of this script (a retry after
-- a lost answer) or a claim lost meanwhile splits nothing again.
if rcall('LREM', proc, '1', item) == 0 then return 0 end
local pushed = 0
for _, j in ipairs(jobs) do
  local mk = store_message(caller, j.fields, now_ms)
  track_msg(caller, j.id, mk, flow)
  rcall('LPUSH', mo, mk)
  pushed = pushed + 1
end
rcall('HSET', item, 'status', MSG_PROCESSED, 'updated_at', now_s)
rcall('ZREM', leases, member)
wake_msg_out(ctx, pushed)
return pushed
