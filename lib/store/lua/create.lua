-- create: stores a new object hash unless its key exists. With id 0 it takes the next
-- free id from the counter (skipping ids that callers chose). When the key exists and
-- the compared fields hold the same values, the stored object is kept and reported as
-- such (a retried create); otherwise the first differing field is returned.
--
-- KEYS: [1] coord:events (the context's; written only with an event type).
-- ARGV: [1] the object's key prefix, [2] its id counter, [3] its index ("": none), [4] id
--   (0: the next free one), [5] the index member's prefix, [6] now (ms), [7] ncompare,
--   [8] event type ("": none), [9] event actor, [10] the per-status index of the
--   status the object is created with (coord:idx:jobs:<status>; "": none),
--   [11] a DB-0 set ("": none; "%d" in it stands for the id), [12] that set's member,
--   [13…] field/value pairs (the first ncompare compared).
-- Reply: {status, id, field}: status 1 created, 2 the same content existed, 0 conflict
--   (field names the first that differs). Error: ERR id space exhausted.
-- Derives: the object key <prefix><id>, the counter, the indexes and the DB-0 set are
--   named by the caller (lib/keys) in ARGV, because the id is only known here; the DB-0
--   set (SELECT 0, the server's) gets the member when the object exists after the call.

local prefix, seqkey, idxkey = ARGV[1], ARGV[2], ARGV[3]
-- The id as a string: a Lua number in a key or an argument is formatted with
-- sprintf("%.14g") at each use (a twentieth of this script's instructions).
local id = ARGV[4]
local member_prefix, now_ms, ncmp = ARGV[5], ARGV[6], tonumber(ARGV[7])
local ev_type, ev_actor, stidx = ARGV[8], ARGV[9], ARGV[10]
local reg, reg_member = ARGV[11], ARGV[12]
local first = 13
local function register()
  if reg == '' then return end
  redis.call('SELECT', '0')
  redis.call('SADD', string.gsub(reg, '%%d', id), reg_member)
end
if id == '0' then
  local n
  repeat
    n = redis.call('INCR', seqkey)
    id = string.format('%d', n)
  until redis.call('EXISTS', prefix .. id) == 0
  if n > 4294967295 then
    return redis.error_reply('ERR id space exhausted')
  end
else
  local key = prefix .. id
  if redis.call('EXISTS', key) == 1 then
    for i = first, first + 2 * ncmp - 1, 2 do
      local v = redis.call('HGET', key, ARGV[i])
      if v == false then v = '' end
      local want = ARGV[i + 1]
      if v ~= want and not ((v == '' or v == '[]' or v == '{}') and (want == '' or want == '[]' or want == '{}')) then
        return {0, tonumber(id), ARGV[i]}
      end
    end
    register()
    return {2, tonumber(id), ''}
  end
end
local key = prefix .. id
-- straight from ARGV: copying ~30 field/value pairs into a Lua table first cost an
-- eighth of the script
redis.call('HSET', key, 'id', id, unpack(ARGV, first, #ARGV))
if idxkey ~= '' then
  local member = member_prefix .. id
  redis.call('ZADD', idxkey, now_ms, member)
  if stidx ~= '' then redis.call('ZADD', stidx, now_ms, member) end
end
if ev_type ~= '' then
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'type', ev_type, 'actor', ev_actor, 'time_ms', now_ms, 'detail', key)
end
register()
return {1, tonumber(id), ''}
