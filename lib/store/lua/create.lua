-- create: stores new object hashes of one kind, one after the other, each unless its
-- key exists (one call for one object, or for a batch of jobs: the call's fixed
-- arguments and preparation shared). With id 0 an object takes the next free id from
-- the counter (skipping ids that callers chose). When the key exists and the compared
-- fields hold the same values, the stored object is kept and reported as such (a
-- retried create); otherwise the first differing field is returned.
--
-- KEYS: [1] coord:events (the context's; written only with an event type).
-- ARGV: [1] the objects' key prefix, [2] their id counter, [3] their index ("": none),
--   [4] the index member's prefix, [5] event type ("": none), [6] event actor, [7] a
--   DB-0 set ("": none; "%d" in it stands for the id), [8] that set's member, then per
--   object: its id (0: the next free one), now (ms), ncompare, the per-status index of
--   the status it is created with (coord:idx:jobs:<status>; "": none), n, then n
--   field/value items (the first ncompare pairs compared).
-- Reply: per object {status, id, field}: status 1 created, 2 the same content existed,
--   0 conflict (field names the first that differs), 3 the id space is exhausted.
-- Derives: the object keys <prefix><id>, the counter, the indexes and the DB-0 set are
--   named by the caller (lib/keys) in ARGV, because the ids are only known here; the
--   DB-0 set (SELECT 0, the server's, after every object: the script ends there) gets
--   the member of each object that exists after the call.

local prefix, seqkey, idxkey, member_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ev_type, ev_actor = ARGV[5], ARGV[6]
local reg, reg_member = ARGV[7], ARGV[8]
local out, registered = {}, nil
if reg ~= '' then registered = {} end
local i, nargs = 9, #ARGV
while i <= nargs do
  -- The id as a string: a Lua number in a key or an argument is formatted with
  -- sprintf("%.14g") at each use (a twentieth of this script's instructions).
  local id, now_ms, ncmp, stidx = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local first, last = i + 5, i + 4 + tonumber(ARGV[i + 4])
  i = last + 1
  local r -- this object's reply, once known
  if id == '0' then
    local n
    repeat
      n = redis.call('INCR', seqkey)
      id = string.format('%d', n)
    until redis.call('EXISTS', prefix .. id) == 0
    if n > 4294967295 then r = {3, 0, 'id space exhausted'} end
  elseif redis.call('EXISTS', prefix .. id) == 1 then
    local key = prefix .. id
    r = {2, tonumber(id), ''}
    for k = first, first + 2 * ncmp - 1, 2 do
      local v = redis.call('HGET', key, ARGV[k])
      if v == false then v = '' end
      local want = ARGV[k + 1]
      if v ~= want and not ((v == '' or v == '[]' or v == '{}') and (want == '' or want == '[]' or want == '{}')) then
        r = {0, tonumber(id), ARGV[k]}
        break
      end
    end
    if registered and r[1] == 2 then registered[#registered + 1] = id end
  end
  if not r then
    local key = prefix .. id
    -- straight from ARGV: copying ~30 field/value pairs into a Lua table first cost an
    -- eighth of the script
    redis.call('HSET', key, 'id', id, unpack(ARGV, first, last))
    if idxkey ~= '' then
      local member = member_prefix .. id
      redis.call('ZADD', idxkey, now_ms, member)
      if stidx ~= '' then redis.call('ZADD', stidx, now_ms, member) end
    end
    if ev_type ~= '' then
      redis.call('XADD', KEYS[1], 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', ev_type, 'actor', ev_actor, 'time_ms', now_ms, 'detail', key)
    end
    if registered then registered[#registered + 1] = id end
    r = {1, tonumber(id), ''}
  end
  out[#out + 1] = r
end
if registered and #registered > 0 then
  redis.call('SELECT', '0')
  for _, id in ipairs(registered) do redis.call('SADD', string.gsub(reg, '%%d', id), reg_member) end
end
return out
