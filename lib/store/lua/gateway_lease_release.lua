-- gateway_lease_release: deletes a gateway's lease if this replica's token holds it
-- and tells the standbys on the channel of the same name.
--
-- KEYS:
--   lease  coord:gateway:<pk> (keys.GatewayLease; primary server, DB 0; also the
--          pub/sub channel)
-- ARGV:
--   token  string  this replica's token
-- Reply: int 1 released, 0 not ours.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local token = ARGV[1]
-- luagen: end of the prologue

if rcall('GET', KEYS[1]) == token then
  rcall('DEL', KEYS[1])
  rcall('PUBLISH', KEYS[1], token)
  return 1
end
return 0
