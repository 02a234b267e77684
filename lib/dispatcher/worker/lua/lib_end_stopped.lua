-- lib_end_stopped: defines end_stopped(job, reply, now, ttl), which ends a job that was
-- stopped before it started: status error, error "stopped", the reply pushed (and
-- given its TTL). Writing it twice changes nothing (no second reply): 1 ended now, 0
-- already.

local function end_stopped(job, reply, now, ttl)
  local st = redis.call('HMGET', job, 'status', 'error')
  if st[1] == ST_ERROR and st[2] == 'stopped' then return 0 end
  redis.call('HSET', job, 'status', ST_ERROR, 'error', 'stopped', 'updated_at', now)
  redis.call('LPUSH', reply, 'stopped')
  redis.call('PEXPIRE', reply, ttl)
  return 1
end
