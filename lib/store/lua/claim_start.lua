-- claim_start: claims up to max jobs from the consuming end of a job queue and marks
-- each started, in one round trip.
--
-- The claim id is written into the job: only this run may finish it (a job queued again
-- while a first run of it ends is run anew). The reply holds the started jobs' hashes,
-- each one's DUMP (one string to Lua and back; moving a ~30-field hash through Lua as
-- HGETALL's field/value strings cost this script a third of its work), so that the
-- caller reads nothing after it, unless the call started more than INLINE_READS (32:
-- the caller then reads them). An item that is no job key, a job that is gone (code 1),
-- a job that already ended (code 2) and a job that runs under a claim that still holds
-- it (a duplicate queue entry: code 2) are taken off the queue and not put on the
-- processing list. A job started under a claim of this same worker that no longer
-- holds it (its lease expired and a sweep queued the job again, while the worker was
-- frozen or cut off from Redis) is not started again: its claim is taken back as it
-- was (code 4: onto the processing list, with a lease, the job unchanged), and the
-- caller checks that it still runs the job under that claim (else it releases the
-- claim: ReleaseClaims). A job that has a producer's traceparent keeps that trace. The
-- items are taken in one LRANGE and LTRIM, the started ones put on the processing list
-- and the lease set in one LPUSH and one ZADD, their status indexes and DAG nodes
-- moved once per call (an LMOVE, a lease, an index move and a node's read and write per
-- job were a third of this script's Redis calls).
--
-- Producers push up to WAKE_SPREAD tokens per push (lib_wake). After the claim the
-- context's tokens on the wake list are set anew: none when the queue is empty, else as
-- many as were left uncovered by the items claimed, at least one and at most
-- WAKE_SPREAD, at the list's tail: a context with jobs left always keeps a token, and
-- goes behind the other contexts waiting on the list (round-robin between the
-- contexts of a runner). A context of weight w (context:<ctx>'s weight, an operator's
-- setting; none: 1) makes w claims per round: while it has turns left in the round
-- (coord:turns, its claims this round per wake list) one of its tokens goes to the
-- head instead (docs/scheduling.md).
--
-- KEYS:
--   queue   the job queue
--   proc    the processing list (coord:proc:<worker>)
--   leases  coord:leases
--   events  coord:events
--   wake    the queue's wake list of the claiming runner id
--           (coord:wake:runner:<id>:<queue>, DB 0)
-- ARGV:
--   worker  string    the worker
--   qname   string    the queue's name
--   exp     int       the leases' expiry (ms)
--   now_ms  int       now (ms)
--   now_us  int       now (µs): the started jobs' started_at_us
--   now_s   int       now (s): their updated_at
--   max     num       the most jobs claimed (at most 255)
--   token   string    the wake token (the context id)
--   held    string    tokens held (0 or 1; "-": leave the tokens alone)
--   ctx     string    the context id
--   clears  view[]string  the fields a start clears
--   cnonce  string    the claim ids' stem: the k-th item's claim id is cnonce and k
--                     in two hex digits (ClaimStarts makes the same ids)
--   tnonce  string    the trace ids' stem, the same way ("": traces gives them; "=":
--                     each one its claim id's, derived when the job is read and not
--                     stored: lib/model TraceOfClaim)
--   traces  view[]string  the k-th item's trace id ("" or none given: none), when
--                     tnonce is ""
-- Libs: lib_busy lib_state lib_qpause lib_limit lib_claim
-- Reply: flat[]claimed  per item taken off the queue (a table an item cost ~3k instructions)
--   item     string  the queue item
--   code     int     0 started, 1 gone, 2 ended or a duplicate, 3 started with a stop
--                    requested, 4 taken back under the job's claim of this worker (x4:
--                    that claim's id), 5 held back by its concurrency key's rate
--                    (lib_limit: on coord:ckrate:<key>)
--   attempt  int     its attempt (0 for codes 1, 2 and 5)
--   x4       raw     a code 4's claim id; when the call started at most INLINE_READS
--                    (32) jobs, a started one's hash as it is after the start (its DUMP;
--                    lib/store HashFromDump: a claim saves the caller's read round
--                    trip); else false (nil in the reply)
--   x5       raw     with x4's hash, a script's (a job without function_name) start
--                    reads, {the context's job_defaults, job_max, the flow's env_vars,
--                    the results of the job's dependends in their order} ("" for each
--                    absent), so that no read follows; else false
-- Derives (context DB): coord:features (what the context uses: none, and the claim
--   reads neither the priority set nor the limits), coord:limits, coord:limrun:<scope>,
--   coord:limbucket:<scope>, coord:limpark, coord:leases (lib_limit: a context with
--   limits), context:<ctx> (its weight, read when the claim sets the
--   tokens: ctx is the token; its job_defaults and job_max, with the hashes
--   returned), flow:<flow> (env_vars) and the dependencies' job hashes (result) of the
--   started scripts whose hashes are returned, coord:turns (a weighted context's claims this round,
--   by wake list), coord:prio:<queue> (keys.Priority: the queue's jobs with a
--   priority, merged by score; read once per call), the claimed jobs' coord:dag:<flow> (its node goes running) and
--   coord:idx:jobs:<status>; coord:proc:<worker> of the job's previous worker (to tell
--   a duplicate entry): all named by the claimed items; coord:qpause (lib_qpause: a paused
--   queue's claim takes nothing and removes the context's tokens of the wake list); DB 0:
--   coord:delayed and coord:delayedwake (a queue parked until its rate limit's next
--   token, and a concurrency key's release at its rate's next token, lib_limit);
--   with a rate per concurrency key (coord:features "keyrate"): coord:ckrate:<key> and
--   coord:limbucket:key:<key> of the claimed jobs' keys.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local views = ARGV -- the view[] arguments' items, in place: views[<name>_at + k], k = 1 … <name>_n
local worker = ARGV[1]
local qname = ARGV[2]
local exp = ARGV[3]
local now_ms = ARGV[4]
local now_us = ARGV[5]
local now_s = ARGV[6]
local max = tonumber(ARGV[7])
local token = ARGV[8]
local held = ARGV[9]
local ctx = ARGV[10]
local clears_n = tonumber(ARGV[11])
local clears_at = 11
local argi = 12 + clears_n
local cnonce = ARGV[argi]
argi = argi + 1
local tnonce = ARGV[argi]
argi = argi + 1
local traces_n = tonumber(ARGV[argi])
local traces_at = argi
argi = argi + 1 + traces_n
-- luagen: end of the prologue

return claim_run(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], worker, qname, exp, now_ms, now_us, now_s, max, token, held, ctx,
  {unpack(views, clears_at + 1, clears_at + clears_n)}, cnonce, tnonce, {unpack(views, traces_at + 1, traces_at + traces_n)})
