-- revoke_secret: marks an operator secret's record revoked, or stores a revoked
-- record (a configured secret, which is stored only once revoked), and tells
-- supervisor-daemon's replicas (their open streams of that secret end).
--
-- KEYS:
--   secrets  coord:operator_secrets (primary server, DB 0)
-- ARGV:
--   fingerprint  string  the secret's fingerprint
--   record       json    the record to store when there is none
--   revoked_ms   num     when it is revoked (ms)
--   reason       string  why
-- Reply: int 1 revoked now, 0 revoked already.
-- Derives: K_AUTH_CHANGED, the pub/sub channel of credential changes; its message is
--   "secret:<fingerprint>".

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local fingerprint = ARGV[1]
local record = ARGV[2]
local revoked_ms = tonumber(ARGV[3])
local reason = ARGV[4]
-- luagen: end of the prologue

local cur = rcall('HGET', KEYS[1], fingerprint)
if not cur then
  rcall('HSET', KEYS[1], fingerprint, record)
  rcall('PUBLISH', K_AUTH_CHANGED, 'secret:' .. fingerprint)
  return 1
end
local r = cjson.decode(cur)
if r.revoked_ms and r.revoked_ms > 0 then return 0 end
r.revoked_ms = revoked_ms
r.reason = reason
rcall('HSET', KEYS[1], fingerprint, cjson.encode(r))
rcall('PUBLISH', K_AUTH_CHANGED, 'secret:' .. fingerprint)
return 1
