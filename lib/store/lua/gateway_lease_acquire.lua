-- gateway_lease_acquire: takes a mycelium-gateway's lease when nobody holds it, or
-- extends it when this replica's token still holds it (a holder that stopped because
-- its renewals failed, and whose key survived).
--
-- KEYS:
--   lease  coord:gateway:<pk> (keys.GatewayLease; primary server, DB 0)
-- ARGV:
--   token   string  this replica's token
--   ttl_ms  int     TTL (ms)
-- Reply: []int {1} held, or {0, the key's PTTL in ms}.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local token = ARGV[1]
local ttl_ms = ARGV[2]
-- luagen: end of the prologue

if rcall('SET', KEYS[1], token, 'NX', 'PX', ttl_ms) then
  return {1}
end
if rcall('GET', KEYS[1]) == token then
  rcall('PEXPIRE', KEYS[1], ttl_ms)
  return {1}
end
return {0, rcall('PTTL', KEYS[1])}
