-- release_identity: deletes a replica's identity key if it is still ours.
--
-- KEYS:
--   identity  the identity key
-- ARGV:
--   value  string  this replica's value
-- Reply: int 1 deleted, 0 not ours.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local value = ARGV[1]
-- luagen: end of the prologue

if rcall('GET', KEYS[1]) == value then return rcall('DEL', KEYS[1]) end
return 0
