-- sched: a schedule's transitions (docs/scheduling.md). Each tick is handled once,
-- whatever the number of schedulers: op tick takes the tick given only while it is the
-- schedule's next_tick_ms, and moves next_tick_ms on in the same step, so a second
-- scheduler's attempt at the same (schedule, tick) finds it stale and changes nothing.
-- A fired tick stays pending (pending_tick_ms) until its run is created (op ran: the
-- run is a job.submit with the unique key of the (schedule, tick), or a flow's schedule's
-- flow begun under that key (sched_flow.lua), created once however often it is
-- tried); while a tick is pending or buffered the schedule is due
-- again soon (10 s, 1 s), so a scheduler that died before the run was made is
-- replaced. Every op ends by setting the schedule's entry in coord:sched_due (its next
-- fire time; none while paused).
--
-- KEYS:
--   sched  coord:sched:<id>
--   index  coord:scheds (the context's index of schedules)
-- ARGV:
--   ctx   string    the context id
--   id    string    the schedule id
--   op    string    the transition (below)
--   now   num       now (ms)
--   args  []string  the op's arguments:
--     tick: the tick (ms), the next tick (ms), its fire time (ms, with jitter),
--       "fire" or "missed" (outside the catch-up window);
--     ran: the tick (ms), the run's job "<caller>:<id>" ("" when it could not be
--       made, or the run is a flow), why not, the run's flow id ("" or absent: none);
--     buffer: none (fires the buffered tick if the last run has ended);
--     put: 1 to create (0: update), next tick (ms), its fire time, then field/value
--       items of the schedule;
--     pause: the note; resume: the note, the next tick, its fire time; delete: none.
-- Reply: raw tick: {"fired", the previous run's job to stop ("" none), the tick that fired:
--   this one, or under buffer_one the buffered one (this one is buffered then), the
--   previous run's flow to stop ("" none)}, {"skipped"},
--   {"buffered"}, {"missed"}, {"stale"} (another scheduler took it), {"paused"},
--   {"gone"}; ran: {"ok"} or {"stale"}; buffer: {"fired", tick}, {"wait"}, {"none"};
--   put: {"ok"}, {"exists"} (create) or {"gone"} (update); pause, resume: {"ok"} or
--   {"gone"}; delete: {1} or {0}.
-- Libs: lib_busy lib_state
-- Derives: context DB: job:<caller>:<id> or flow:<id> of the last run (read: its
--   status); DB 0
--   (SELECT 0, last): coord:sched_due, coord:delayedwake (PUBLISH: the fire time of a
--   created, updated or resumed schedule).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local id = ARGV[2]
local op = ARGV[3]
local now = tonumber(ARGV[4])
local argi = 5
local args
local n_args = tonumber(ARGV[argi])
if n_args <= 7000 then args = {unpack(ARGV, argi + 1, argi + n_args)} else args = {}; for k = 1, n_args do args[k] = ARGV[argi + k] end end
argi = argi + 1 + n_args
-- luagen: end of the prologue

local key, index = KEYS[1], KEYS[2]
local member = ctx .. ':' .. id

-- rearm sets the schedule's entry in coord:sched_due (returns its score, or nil).
local function rearm()
  local h = rcall('HMGET', key, 'paused', 'next_fire_ms', 'pending_tick_ms', 'buffered_tick_ms')
  rcall('SELECT', '0')
  if h[1] == '1' or not h[2] then
    rcall('ZREM', K_SCHED_DUE, member)
    return nil
  end
  local score = tonumber(h[2])
  if h[3] then score = math.min(score, now + 10000) end
  if h[4] then score = math.min(score, now + 1000) end
  rcall('ZADD', K_SCHED_DUE, score, member)
  return score
end

-- busy says whether the schedule's last run (its job, or its flow) has not ended (or
-- is not made yet).
local function busy(last, last_flow, pending)
  if pending then return true end
  if last_flow then
    local st = rcall('HGET', K_FLOW .. last_flow, 'status')
    return st ~= false and st ~= FLOW_FINISHED and st ~= FLOW_ERROR
  end
  if not last then return false end
  local st = rcall('HGET', K_JOB .. last, 'status')
  return st ~= false and st ~= JOB_FINISHED and st ~= JOB_ERROR
end

if op == 'tick' then
  local tick, next_tick, next_fire, mode = args[1], args[2], args[3], args[4]
  local h = rcall('HMGET', key, 'next_tick_ms', 'paused', 'overlap', 'last_run', 'pending_tick_ms', 'buffered_tick_ms', 'last_flow')
  if not h[1] then return {'gone'} end
  if h[1] ~= tick then return {'stale'} end
  if h[2] == '1' then return {'paused'} end
  rcall('HSET', key, 'next_tick_ms', next_tick, 'next_fire_ms', next_fire, 'updated_at_ms', now)
  local out
  if mode == 'missed' then
    rcall('HINCRBY', key, 'missed', 1)
    out = {'missed'}
  else
    local running = busy(h[4], h[7], h[5])
    if not running and h[6] then
      -- buffer_one: the run the buffered tick waited for has ended; the buffered tick
      -- runs first, and this one waits in its place.
      rcall('HSET', key, 'pending_tick_ms', h[6], 'last_tick_ms', h[6], 'buffered_tick_ms', tick)
      rcall('HINCRBY', key, 'fired', 1)
      rearm()
      return {'fired', '', h[6], ''}
    end
    if running and h[3] == 'skip' then
      rcall('HINCRBY', key, 'skipped', 1)
      out = {'skipped'}
    elseif running and h[3] == 'buffer_one' then
      if h[6] then
        rcall('HINCRBY', key, 'skipped', 1)
        out = {'skipped'}
      else
        rcall('HSET', key, 'buffered_tick_ms', tick)
        out = {'buffered'}
      end
    else
      local prev, prev_flow = '', ''
      if running and h[3] == 'cancel_previous' then prev, prev_flow = h[4] or '', h[7] or '' end
      rcall('HSET', key, 'pending_tick_ms', tick, 'last_tick_ms', tick)
      rcall('HINCRBY', key, 'fired', 1)
      out = {'fired', prev, tick, prev_flow}
    end
  end
  rearm()
  return out
elseif op == 'ran' then
  local tick, run, why, flow = args[1], args[2], args[3], args[4] or ''
  if rcall('HGET', key, 'pending_tick_ms') ~= tick then return {'stale'} end
  rcall('HDEL', key, 'pending_tick_ms')
  if flow ~= '' then
    rcall('HSET', key, 'last_flow', flow)
    rcall('HDEL', key, 'last_run', 'last_error')
  elseif run ~= '' then
    rcall('HSET', key, 'last_run', run)
    rcall('HDEL', key, 'last_flow', 'last_error')
  else
    rcall('HSET', key, 'last_error', why)
  end
  rearm()
  return {'ok'}
elseif op == 'buffer' then
  local h = rcall('HMGET', key, 'buffered_tick_ms', 'last_run', 'pending_tick_ms', 'paused', 'last_flow')
  if not h[1] or h[4] == '1' then return {'none'} end
  if busy(h[2], h[5], h[3]) then
    rearm()
    return {'wait'}
  end
  rcall('HSET', key, 'pending_tick_ms', h[1], 'last_tick_ms', h[1])
  rcall('HDEL', key, 'buffered_tick_ms')
  rcall('HINCRBY', key, 'fired', 1)
  rearm()
  return {'fired', h[1]}
elseif op == 'put' then
  local create = args[1] == '1'
  local exists = rcall('EXISTS', key) == 1
  if create and exists then return {'exists'} end
  if not create and not exists then return {'gone'} end
  rcall('HSET', key, 'next_tick_ms', args[2], 'next_fire_ms', args[3], 'updated_at_ms', now, unpack(args, 4))
  if create then
    rcall('HSET', key, 'created_at_ms', now)
    rcall('ZADD', index, now, id)
  end
  local score = rearm()
  if score then rcall('PUBLISH', K_DELAYED_WAKE, score) end
  return {'ok'}
elseif op == 'pause' or op == 'resume' then
  if rcall('EXISTS', key) == 0 then return {'gone'} end
  if op == 'pause' then
    rcall('HSET', key, 'paused', '1', 'note', args[1], 'updated_at_ms', now)
  else
    -- The ticks of the pause are not caught up: the next is the first after now.
    rcall('HDEL', key, 'paused', 'buffered_tick_ms')
    rcall('HSET', key, 'note', args[1], 'next_tick_ms', args[2], 'next_fire_ms', args[3], 'updated_at_ms', now)
  end
  local score = rearm()
  if score then rcall('PUBLISH', K_DELAYED_WAKE, score) end
  return {'ok'}
elseif op == 'delete' then
  local n = rcall('DEL', key)
  rcall('ZREM', index, id)
  rcall('SELECT', '0')
  rcall('ZREM', K_SCHED_DUE, member)
  return {n}
end
return redis.error_reply('sched: unknown op ' .. op)
