-- release_identity: deletes a replica's identity key if it is still ours.
--
-- KEYS: [1] the identity key.
-- ARGV: [1] value.
-- Reply: 1 deleted, 0 not ours.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
