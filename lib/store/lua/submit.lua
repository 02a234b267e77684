-- submit: job.submit and job.submit_batch. Creates standalone jobs and dispatches
-- them in one step (the job hash, its indexes, job.created and job.dispatched events,
-- the job request message on msg_out and the router's wake token), so that a submitted
-- job is never stored without being dispatched, whatever process dies when.
-- Runs after the prelude and lib_state (index_job, event, store_message, track_msg,
-- wake_msg_out, int).
--
-- KEYS: per job i (1-based), KEYS[2i-1] the job's key (job:<caller>:<id>) and
--   KEYS[2i] its uniqueness key (keys.Unique, coord:unique:<unique_key>; "" for none).
-- ARGV: ctx, now_s, now_ms, actor, events maxlen, then per job:
--   chosen (1: the caller chose the id, 0: the id was reserved from coord:seq:job:<caller>),
--   caller, id, unique ttl ms, ncompare, nfields, nmsg, then nfields job field/value
--   items (the first ncompare are compared against an existing job of a chosen id),
--   then nmsg job request message field/value items.
-- Derived keys: job:<caller>:<id> of the job a uniqueness key names (its value is
--   "<caller>:<id>"), and lib_state's fixed keys (coord:events, coord:idx:jobs[:status],
--   coord:seq:message, message:<caller>:<n>,
--   coord:jobmsgs:<caller>:<id>, msg_out; DB 0: coord:wake:msg_out, coord:busy).
-- Reply: {'ok', per job {1, id} created and dispatched, or {2, "<caller>:<id>", the
--   existing job's hash as field/value items} the job a uniqueness key or a chosen id
--   already names}; nothing is written when the reply is {'conflict', job index, field}
--   (a chosen id names a job with different content) or {'taken', job index} (a
--   reserved id is held by a job whose caller chose it: reserve again).

local ctx, now_s, now_ms, actor, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local jobs = {}
local i = 6
while i <= #ARGV do
  local nf, nm = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6])
  local j = {chosen = ARGV[i] == '1', caller = ARGV[i + 1], id = ARGV[i + 2], ttl = ARGV[i + 3],
    ncmp = tonumber(ARGV[i + 4]), ffirst = i + 7, mfirst = i + 7 + nf}
  j.mlast = j.mfirst + nm - 1
  j.key, j.ukey = KEYS[2 * #jobs + 1], KEYS[2 * #jobs + 2]
  jobs[#jobs + 1] = j
  i = j.mlast + 1
end

local function existing(member)
  return {2, member, redis.call('HGETALL', K_JOB .. member)}
end

-- Pass 1: refusals, before anything is written.
for n, j in ipairs(jobs) do
  if redis.call('EXISTS', j.key) == 1 then
    if not j.chosen then return {'taken', n} end
    for f = j.ffirst, j.ffirst + 2 * j.ncmp - 1, 2 do
      local v = redis.call('HGET', j.key, ARGV[f]) or ''
      local want = ARGV[f + 1]
      if v ~= want and not ((v == '' or v == '[]' or v == '{}') and (want == '' or want == '[]' or want == '{}')) then
        return {'conflict', n, ARGV[f]}
      end
    end
    j.exists = true
  end
end

-- Pass 2: create and dispatch (a uniqueness key is read here, after the jobs before
-- it in the batch set theirs).
local out, pushed = {'ok'}, 0
for _, j in ipairs(jobs) do
  local member = j.caller .. ':' .. j.id
  local prev = false
  if j.ukey ~= '' then prev = redis.call('GET', j.ukey) end
  if prev and redis.call('EXISTS', K_JOB .. prev) == 1 then
    out[#out + 1] = existing(prev)
  elseif j.exists then
    out[#out + 1] = existing(member)
  else
    redis.call('HSET', j.key, 'id', j.id, unpack(ARGV, j.ffirst, j.mfirst - 1))
    redis.call('ZADD', K_JOB_INDEX, now_ms, member)
    redis.call('ZADD', K_JOB_INDEX .. ':' .. JOB_DISPATCHED, now_ms, member)
    -- The fields every job event has, in their order: a stream stores the names of an
    -- entry's fields only when they differ from its node's first entry's.
    redis.call('XADD', K_EVENTS, 'MAXLEN', '~', maxlen, '*', 'type', EV_JOB_CREATED, 'actor', actor, 'time_ms', now_ms,
      'flow_id', '0', 'job_id', j.id, 'caller_id', j.caller, 'status', '', 'detail', j.key)
    event(EV_JOB_DISPATCHED, actor, now_ms, '0', j.id, j.caller, JOB_DISPATCHED, 'attempt 1')
    local mk = store_message(j.caller, j.mfirst, now_ms, j.mlast)
    track_msg(j.caller, j.id, mk)
    redis.call('LPUSH', K_MSG_OUT, mk)
    pushed = pushed + 1
    if j.ukey ~= '' then redis.call('SET', j.ukey, member, 'PX', j.ttl) end
    out[#out + 1] = {1, member}
  end
end
wake_msg_out(ctx, pushed)
return out
