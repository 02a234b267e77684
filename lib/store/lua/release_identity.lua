-- releaseScript: KEYS the identity key; ARGV value. Deletes it if it is ours.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
