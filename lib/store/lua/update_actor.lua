-- update_actor: changes an existing actor's fields.
--
-- KEYS: [1] actor:<id> (primary server, DB 0).
-- ARGV: [1] updated_at, [2…] field/value pairs.
-- Reply: 1 updated, 0 no such actor.

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1], unpack(ARGV, 2))
return 1
