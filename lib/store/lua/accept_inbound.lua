-- accept_inbound: stores a message that came from another node and queues it on
-- msg_in for the router, unless its dedup key says it came already.
--
-- KEYS:
--   msg_in   msg_in
--   wake_in  coord:wake:msg_in (DB 0, SELECT 0)
-- ARGV:
--   ctx     int       the context id
--   dedup   string    the dedup key ("": none)
--   ttl     num       the dedup key's TTL (s)
--   caller  int       the caller id
--   now_ms  int       now (ms)
--   fields  []raw     the message's field/value pairs (without its id)
-- Libs: lib_busy lib_state
-- Reply: accepted {1, message key}, or {0, ""} for a duplicate
--   stored  int     1 stored, 0 a duplicate
--   key     string  the message's key
-- Derives: context DB: the dedup key (dedup: keys.Inbound, named by the router),
--   message:<caller>:<id> (a fresh id from coord:seq:message: only known here),
--   then DB 0 (SELECT 0, the context's server): coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local dedup = ARGV[2]
local ttl = tonumber(ARGV[3])
local caller = ARGV[4]
local now_ms = ARGV[5]
local argi = 6
local fields
local n_fields = tonumber(ARGV[argi])
if n_fields <= 7000 then fields = {unpack(ARGV, argi + 1, argi + n_fields)} else fields = {}; for k = 1, n_fields do fields[k] = ARGV[argi + k] end end
argi = argi + 1 + n_fields
-- luagen: end of the prologue

if dedup ~= '' then
  if rcall('SET', dedup, '1', 'NX', 'EX', ttl) == false then return {0, ''} end
end
local mk = store_message(caller, fields, now_ms)
rcall('LPUSH', KEYS[1], mk)
rcall('SELECT', '0')
rcall('LPUSH', KEYS[2], ctx)
mark_busy(ctx)
return {1, mk}
