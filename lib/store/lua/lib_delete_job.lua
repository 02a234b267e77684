-- lib_delete_job: defines delete_job(caller, id), which removes a job and everything
-- it owns (its log, its messages and their places on msg_out/msg_in, its queue entries,
-- its index and DLQ entries), and delete_messages(set, caller), which removes the
-- messages a set lists, and the set.

-- delete_message removes message mk and its places (coord:idx:messages, msg_out,
-- msg_in).
local function delete_message(mk)
  rcall('UNLINK', mk)
  local mc, mi = string.match(mk, '^' .. K_MESSAGE .. '(%d+):(%d+)$')
  if mc then rcall('ZREM', K_MESSAGE_INDEX, mc .. ':' .. mi) end
  rcall('LREM', K_MSG_OUT, '0', mk)
  rcall('LREM', K_MSG_IN, '0', mk)
end
-- delete_messages removes the messages listed in the set key (and the set): their
-- keys, or (a job's set as written before its hash's msgs, given its caller) their
-- numbers n of message:<caller>:<n>.
local function delete_messages(key, caller)
  for _, mk in ipairs(rcall('SMEMBERS', key)) do
    if caller and string.match(mk, '^%d+$') then mk = K_MESSAGE .. caller .. ':' .. mk end
    delete_message(mk)
  end
  rcall('UNLINK', key)
end
local function delete_job(caller, id)
  local jk = K_JOB .. caller .. ':' .. id
  local st = rcall('HGET', jk, 'status')
  local stype = rcall('HGET', jk, 'script_type')
  local runner = rcall('HGET', jk, 'runner_id')
  local m = caller .. ':' .. id
  -- its own messages: the numbers in its hash's msgs (track_msg), and the set that
  -- listed them before
  for n in string.gmatch(rcall('HGET', jk, 'msgs') or '', '%d+') do delete_message(K_MESSAGE .. caller .. ':' .. n) end
  delete_messages(K_JOB_MESSAGES .. m, caller)
  local fn = rcall('HGET', jk, 'function_name')
  local exec = fn and string.match(fn, '^([^#]+)#')
  if exec then stype = 'exec:' .. exec end -- an executor's handler job: its queue
  if stype then
    rcall('LREM', K_QUEUE .. stype, '0', jk)
    rcall('ZREM', K_PRIO .. K_QUEUE .. stype, jk)
    if runner and runner ~= '0' then rcall('LREM', K_PINNED_QUEUE .. runner .. ':' .. stype, '0', jk) end
  end
  rcall('UNLINK', jk, K_JOB_LOG .. m)
  rcall('ZREM', K_JOB_INDEX, m)
  if st then rcall('ZREM', K_JOB_INDEX .. ':' .. st, m) end
  rcall('ZREM', K_DLQ, m)
end
