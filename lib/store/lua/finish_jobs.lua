-- finish_jobs: records the ends of runs of one context and pushes their result
-- message(s). Only the run that holds the job's current claim can finish it; a second
-- finish changes nothing but the ack.
--
-- KEYS: [1] the processing list, [2] coord:leases, [3] msg_out, [4] coord:events.
-- ARGV: [1] now (s), [2] now (ms), [3] context id, [4] caller id, [5] log cap (bytes),
--   [6] grouped (1: one result message for all the runs that end here, runs of one flow;
--   0: one each, its text "result of job <ctx>:<caller>:<id>"), [7] now (µs), [8] n, then
--   n field/value items of the result message(s) (all but id, job and, when not grouped,
--   message),
--   then, when grouped, the message's job list (a JSON array), then per run 14 items:
--   job key, lease member, claim id, job id, flow id, status, error, exit code, result
--   JSON (the string map), the handler's result_json ("": none, the field is removed),
--   fatal, retry-after (ms), log chunk, and the run's entry of the message's job list
--   (for a job of this node a reference with the run's end — the result fields carry
--   job_ref "1" —, for a job from another node the finished job) for its own message
--   or, grouped, where it starts and ends in the list ("<start> <end>", 1-based).
-- Reply: per run 1 written, 2 written before by this claim (a retry after a lost
--   answer), 0 the claim is not the job's any more.
-- Derives: context DB: coord:log:<caller>:<id> of each run, coord:idx:jobs:<status>,
--   message:<caller>:<id> (fresh ids), coord:seq:message,
--   coord:jobmsgs:…/coord:flowmsgs:<flow>; DB 0 (SELECT 0, last): coord:wake:msg_out,
--   coord:busy.

local proc, leases, mo, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now_s, now_ms, ctx, caller, logmax, grouped, now_us = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7]
local nf = tonumber(ARGV[8])
local first, last = 9, 8 + nf
local runs = last + 1
local glist = ''
if grouped then glist = ARGV[runs]; runs = runs + 1 end
local out, done, ids = {}, {}, {}
local gflow -- the flow of the runs that share one message (one flow per call)
local pushed = 0
local function push(mk)
  redis.call('LPUSH', mo, mk)
  pushed = pushed + 1
end
for i = runs, #ARGV, 14 do
  local jk, member, claim, id, flow, status, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local code, result, rjson, fatal, retry_after, chunk = ARGV[i + 7], ARGV[i + 8], ARGV[i + 9], ARGV[i + 10], tonumber(ARGV[i + 11]), ARGV[i + 12]
  redis.call('LREM', proc, 1, jk)
  redis.call('ZREM', leases, member)
  local cur = redis.call('HMGET', jk, 'claim', 'status', 'error', 'fatal', 'retry_after_ms')
  if cur[1] == claim and (cur[2] == JOB_FINISHED or cur[2] == JOB_ERROR) then
    out[#out + 1] = 2 -- written already: a try whose answer was lost
  elseif cur[1] ~= claim or cur[2] ~= JOB_STARTED then
    out[#out + 1] = 0
  else
    local set = {'status', status, 'exit_code', code, 'result', result, 'finished_at', now_s, 'finished_at_ms', now_ms, 'finished_at_us', now_us, 'updated_at', now_s}
    local del = {}
    if rjson ~= '' then set[#set + 1] = 'result_json'; set[#set + 1] = rjson else del[#del + 1] = 'result_json' end
    if err ~= '' then set[#set + 1] = 'error'; set[#set + 1] = err elseif cur[3] then del[#del + 1] = 'error' end
    if fatal == '1' then set[#set + 1] = 'fatal'; set[#set + 1] = '1' elseif cur[4] then del[#del + 1] = 'fatal' end
    if retry_after and retry_after > 0 then set[#set + 1] = 'retry_after_ms'; set[#set + 1] = ARGV[i + 11] elseif cur[5] then del[#del + 1] = 'retry_after_ms' end
    redis.call('HSET', jk, unpack(set))
    if #del > 0 then redis.call('HDEL', jk, unpack(del)) end
    index_job(caller .. ':' .. id, JOB_STARTED, status)
    if chunk ~= '' then
      local lk = K_JOB_LOG .. caller .. ':' .. id
      local len = redis.call('STRLEN', lk)
      if len < logmax then
        if len + #chunk > logmax then chunk = string.sub(chunk, 1, logmax - len) .. '\n[log truncated at ' .. logmax .. ' bytes]\n' end
        redis.call('APPEND', lk, chunk)
      end
    end
    local ev = EV_JOB_FINISHED
    if status ~= JOB_FINISHED then ev = EV_JOB_FAILED end
    redis.call('XADD', ek, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'type', ev, 'actor', 'runner', 'time_ms', now_ms, 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', status, 'detail', err)
    if grouped then
      done[#done + 1] = ARGV[i + 13]
      ids[#ids + 1] = id
      gflow = flow
    else
      local mk = store_message(caller, first, now_ms, last, {'job', '[' .. ARGV[i + 13] .. ']', 'message', 'result of job ' .. ctx .. ':' .. caller .. ':' .. id})
      track_msg(caller, id, mk)
      push(mk)
    end
    out[#out + 1] = 1
  end
end
if #done > 0 then
  if #done < (#ARGV - runs + 1) / 14 then
    -- Some runs did not finish here: the list of those that did.
    local js = {}
    for k, span in ipairs(done) do
      local a, b = string.match(span, '^(%d+) (%d+)$')
      js[k] = string.sub(glist, tonumber(a), tonumber(b))
    end
    glist = '[' .. table.concat(js, ',') .. ']'
  end
  local mk = store_message(caller, first, now_ms, last, {'job', glist})
  track_msg(caller, ids[1], mk, gflow)
  push(mk)
end
wake_msg_out(ctx, pushed)
return out
