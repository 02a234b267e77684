-- gateway_lease_extend: renews a gateway's lease if this replica's token holds it.
--
-- KEYS:
--   lease  coord:gateway:<pk> (keys.GatewayLease; primary server, DB 0)
-- ARGV:
--   token   string  this replica's token
--   ttl_ms  int     TTL (ms)
-- Reply: int 1 renewed, 0 not ours.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local token = ARGV[1]
local ttl_ms = ARGV[2]
-- luagen: end of the prologue

if rcall('GET', KEYS[1]) == token then
  return rcall('PEXPIRE', KEYS[1], ttl_ms)
end
return 0
