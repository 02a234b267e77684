-- update_actor: changes an existing actor's fields, and tells supervisor-daemon's
-- replicas (their open streams of the actor are checked again against its key).
--
-- KEYS:
--   actor  actor:<id> (primary server, DB 0)
-- ARGV:
--   updated_at  int       updated_at (s)
--   fields      []string  field/value pairs
-- Reply: int 1 updated, 0 no such actor.
-- Derives: K_AUTH_CHANGED, the pub/sub channel of credential changes; its message is
--   KEYS[1], "actor:<id>".

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local updated_at = ARGV[1]
local argi = 2
local fields
local n_fields = tonumber(ARGV[argi])
if n_fields <= 7000 then fields = {unpack(ARGV, argi + 1, argi + n_fields)} else fields = {}; for k = 1, n_fields do fields[k] = ARGV[argi + k] end end
argi = argi + 1 + n_fields
-- luagen: end of the prologue

if rcall('EXISTS', KEYS[1]) == 0 then return 0 end
rcall('HSET', KEYS[1], 'updated_at', updated_at, unpack(fields))
rcall('PUBLISH', K_AUTH_CHANGED, KEYS[1])
return 1
