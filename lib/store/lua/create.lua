-- create: stores new object hashes of one kind, one after the other, each unless its
-- key exists (one call for one object, or for a batch of jobs: the call's fixed
-- arguments and preparation shared). With id 0 an object takes the next free id from
-- the counter (skipping ids that callers chose). When the key exists and the compared
-- fields hold the same values, the stored object is kept and reported as such (a
-- retried create); otherwise the first differing field is returned. The ids of the
-- objects with id 0 are taken together when none of them is taken (one INCRBY and one
-- EXISTS); the index entries go in one ZADD per index, and the events (one per object
-- created, its key as detail) in two stream entries for the call (lib_state's ev_later
-- and ev_flush, read back as one event each).
--
-- KEYS:
--   events   coord:events (the context's; written only with an event type)
-- ARGV:
--   prefix         string  the objects' key prefix
--   seqkey         string  their id counter
--   idxkey         string  their index ("": none)
--   member_prefix  string  the index member's prefix
--   ev_type        string  the event type ("": none)
--   ev_actor       string  the event's actor
--   reg            string  a DB-0 set ("": none; "%d" in it stands for the id)
--   reg_member     string  that set's member
--   objects        []object  the objects, in order
--     id      int     its id (0: the next free one)
--     now_ms  int     now (ms): its index entries' score
--     ncmp    num     how many of its field/value pairs (the first) are compared
--     stidx   string  the per-status index of the status it is created with
--                     (coord:idx:jobs:<status>; "": none)
--     fields  view[]raw  its field/value items (read in place, not copied)
-- Libs: lib_busy lib_state
-- Reply: flat[]outcome  each object's, in order (a table an object cost ~5k instructions)
--   status  int     1 created, 2 the same content existed, 0 conflict, 3 the id space
--                   is exhausted
--   id      int     its id
--   field   string  a conflict's first differing field; why, for 3
-- Derives: the object keys <prefix><id>, the counter, the indexes and the DB-0 set are
--   named by the caller (lib/keys) in ARGV, because the ids are only known here; the
--   DB-0 set (SELECT 0, the server's, after every object: the script ends there) gets
--   the member of each object that exists after the call.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local views = ARGV -- the view[] arguments' items, in place: views[<name>_at + k], k = 1 … <name>_n
local prefix = ARGV[1]
local seqkey = ARGV[2]
local idxkey = ARGV[3]
local member_prefix = ARGV[4]
local ev_type = ARGV[5]
local ev_actor = ARGV[6]
local reg = ARGV[7]
local reg_member = ARGV[8]
local argi = 9
local objects
local n_objects = tonumber(ARGV[argi])
objects = {}
argi = argi + 1
for k = 1, n_objects do
  local e_objects = {id = ARGV[argi], now_ms = ARGV[argi + 1], ncmp = tonumber(ARGV[argi + 2]), stidx = ARGV[argi + 3], fields_n = COUNT[ARGV[argi + 4]] or tonumber(ARGV[argi + 4]), fields_at = argi + 4}
  argi = argi + 5 + e_objects.fields_n
  objects[k] = e_objects
end
-- luagen: end of the prologue

local out, registered = {}, nil
if reg ~= '' then registered = {} end
-- The ids of the objects with id 0, taken together (one INCRBY, one EXISTS of their
-- keys: keys_free) when there are several and none of them is taken; else one INCR
-- (and one EXISTS) each, skipping the ids taken. fresh: their ids and keys, in order,
-- and the first id (a number: the replies' ids, no string read as a number a reply).
local fresh, nfresh = nil, 0
do
  local z = 0
  for _, o in ipairs(objects) do
    if o.id == '0' then z = z + 1 end
  end
  if z > 1 then
    local last = rcall('INCRBY', seqkey, z)
    if last <= 4294967295 then
      local ids, ks = keys_free(prefix, last - z + 1, last)
      if ids then fresh = {ids = ids, ks = ks, first = last - z + 1} end
    end
    if not fresh then rcall('INCRBY', seqkey, -z) end -- one at a time, below
  end
end
-- several objects: the index entries (score, member) and the per-status ones (by
-- key), added together (one object: at once, no table of them: each table a call
-- makes costs it ~2k instructions, its allocation and its collection)
local many = n_objects > 1
local idx, stidx, stkeys
if many then idx, stidx, stkeys = {}, {}, {} end
for _, o in ipairs(objects) do
  -- The id as a string: a Lua number in a key or an argument is formatted with
  -- sprintf("%.14g") at each use (a twentieth of this script's instructions).
  local id, now_ms, fields_at = o.id, o.now_ms, o.fields_at
  local r, rid, rf -- this object's reply (status, id, field), once known
  local key, num -- num: its id as a number, when known
  if id == '0' and fresh then
    nfresh = nfresh + 1
    id, key, num = fresh.ids[nfresh], fresh.ks[nfresh], fresh.first + nfresh - 1
  elseif id == '0' then
    local n
    repeat
      n = rcall('INCR', seqkey)
      id = string.format('%d', n)
    until rcall('EXISTS', prefix .. id) == 0
    if n > 4294967295 then r, rid, rf = 3, 0, 'id space exhausted' end
  elseif rcall('EXISTS', prefix .. id) == 1 then
    key = prefix .. id
    r, rid, rf = 2, tonumber(id), ''
    for k = 1, 2 * o.ncmp - 1, 2 do
      local v = rcall('HGET', key, views[fields_at + k])
      if v == false then v = '' end
      local want = views[fields_at + k + 1]
      if v ~= want and not ((v == '' or v == '[]' or v == '{}') and (want == '' or want == '[]' or want == '{}')) then
        r, rf = 0, views[fields_at + k]
        break
      end
    end
    if registered and r == 2 then registered[#registered + 1] = id end
  end
  if not r then
    key = key or prefix .. id
    rcall('HSET', key, 'id', id, unpack(views, fields_at + 1, fields_at + o.fields_n))
    if idxkey ~= '' and not many then
      local member = member_prefix .. id
      rcall('ZADD', idxkey, now_ms, member)
      if o.stidx ~= '' then rcall('ZADD', o.stidx, now_ms, member) end
    elseif idxkey ~= '' then
      local member = member_prefix .. id
      idx[#idx + 1], idx[#idx + 2] = now_ms, member
      if o.stidx ~= '' then
        local st = stidx[o.stidx]
        if not st then
          st = {}
          stidx[o.stidx] = st
          stkeys[#stkeys + 1] = o.stidx
        end
        st[#st + 1], st[#st + 2] = now_ms, member
      end
    end
    -- one object: its event as before; several: held, and written as one entry for
    -- the call's objects but the first (lib_state's ev_later, ev_flush): the same
    -- event each, read back one by one
    if ev_type ~= '' and not many then
      rcall('XADD', KEYS[1], 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', ev_type, 'actor', ev_actor, 'detail', key)
    elseif ev_type ~= '' then
      ev_later(ev_type, ev_actor, '', '', '', key)
    end
    if registered then registered[#registered + 1] = id end
    r, rid, rf = 1, num or tonumber(id), ''
  end
  local no = #out
  out[no + 1], out[no + 2], out[no + 3] = r, rid, rf
end
if many then
  if #idx > 0 then call_each('ZADD', idxkey, idx, 2) end
  for _, k in ipairs(stkeys) do call_each('ZADD', k, stidx[k], 2) end
  ev_flush()
end
if registered and #registered > 0 then
  rcall('SELECT', '0')
  for _, id in ipairs(registered) do rcall('SADD', string.gsub(reg, '%%d', id), reg_member) end
end
return out
