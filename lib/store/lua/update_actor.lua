-- update_actor: changes an existing actor's fields, and tells supervisor-daemon's
-- replicas (their open streams of the actor are checked again against its key).
--
-- KEYS: [1] actor:<id> (primary server, DB 0).
-- ARGV: [1] updated_at, [2…] field/value pairs.
-- Reply: 1 updated, 0 no such actor.
-- Derives: K_AUTH_CHANGED, the pub/sub channel of credential changes; its message is
--   KEYS[1], "actor:<id>".

if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1], unpack(ARGV, 2))
redis.call('PUBLISH', K_AUTH_CHANGED, KEYS[1])
return 1
