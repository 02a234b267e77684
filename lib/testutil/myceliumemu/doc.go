// Package myceliumemu is a TEST FIXTURE: an in-process emulator of Mycelium
// nodes' HTTP message API, for tests and local compose examples on machines
// without Mycelium. It is not a Mycelium replacement — there is no routing,
// encryption, peering or wire protocol, and nothing leaves the process.
//
// A Network holds named nodes. Each Node has its own x25519 public key (64 hex
// characters, derived from the network's seed and the node's name, see
// DeriveIdentity), an overlay address in 400::/7 with its /64 subnet, and
// serves the API on its own 127.0.0.1 port (Node.URL). The API is the subset
// of Mycelium's api.yaml (v0.7.10, copied in testdata/api.yaml) that the
// coordinator uses:
//
//	GET    /api/v1/admin                                   node info
//	GET    /api/v1/pubkey/{mycelium_ip}                    key of an address
//	POST   /api/v1/messages[?reply_timeout=s]              push (201 id; 200 reply / 408 id when waiting)
//	GET    /api/v1/messages?peek&timeout&topic             pop, long poll (200 message, 204 nothing)
//	POST   /api/v1/messages/reply/{id}                     reply (204)
//	GET    /api/v1/messages/status/{id}                    outbound status (200, 404)
//	GET|PUT /api/v1/messages/topics/default                default topic action
//	GET|POST /api/v1/messages/topics                       whitelisted topics
//	DELETE /api/v1/messages/topics/{topic}
//	GET|POST /api/v1/messages/topics/{topic}/sources       allowed source subnets
//	DELETE /api/v1/messages/topics/{topic}/sources/{subnet}
//	GET|PUT|DELETE /api/v1/messages/topics/{topic}/forward forward socket (stored, not used)
//
// Semantics, following the spec (and Mycelium's behaviour where the spec is
// silent):
//
//   - A push to a destination (by key or by any address in its subnet) is
//     delivered to that node's inbox with srcIp/srcPk set to the sender's:
//     the network authenticates the source. With no delay set, delivery
//     happens before the push returns.
//   - Pop with a topic selects by the WHOLE topic, as Mycelium v0.7.10 does
//     (api.yaml's prose says prefix; no release does that);
//     Options.TopicMatch / SetTopicMatch switch to prefix matching. It
//     long-polls up to timeout seconds and answers 204 when nothing matched.
//     Popped messages leave the inbox unless peek is set.
//   - Every call takes the node's node-wide lock, first come first served, as
//     v0.7.10's API does, and popMessage holds it for the whole of its long
//     poll: while a pop waits for a message, every push, reply, status or admin
//     call on that node waits for the pop to end (or for its client to go
//     away). A pop's timeout starts once it holds the lock: a pop with timeout
//     0 made during another long poll waits for that poll, then looks at the
//     inbox once (and may answer a message). A push waiting for a reply holds
//     the lock only to push. A topic over 255 bytes gets 400 with an empty body.
//   - Request bodies over MaxBodyBytes (2 MiB, axum's default limit) are
//     refused with 413, before anything is pushed.
//   - A reply reuses the message's id and has no topic. A push waiting for it
//     (reply_timeout) receives it as the 200 body; otherwise it goes to the
//     original sender's inbox (visible only to pops without a topic filter).
//   - Messages travel in chunks of ChunkSize (1,300) bytes between an INIT and
//     a DONE. With a transfer time (SetTransferTime) the receiver holds a
//     message as a pending transfer meanwhile and the sender reports it
//     "sending"; a receiver that restarts then loses it for good (its sender
//     resends only chunks, which the restarted node ignores, until its window
//     ends), as a v0.7.10 node does.
//   - Status moves pending → (sending →) received (delivered) → read (popped or
//     peeked), or to aborted when the send window (default 5 min, as Mycelium)
//     ends without delivery.
//   - Topic rules are applied on delivery as a node applies them: a
//     whitelisted topic admits only its source subnets, other topics get the
//     default action; replies bypass them. A refused message stays pending for
//     its sender and is aborted at the end of the window.
//
// Switches for tests (on Network): SetDelay, SetDropRate, DropNext, Duplicate,
// Partition/Heal (messages between partitioned nodes are HELD and delivered
// on Heal if their send window has not ended, otherwise aborted),
// SetSendWindow, SetTopicMatch, SetTransferTime; on Node: StopAPI/StartAPI (API
// down, node still receiving), Restart (process restart: in-memory state lost),
// RestartWithoutKeyFile (the same, with a new identity),
// GarbageNext (popMessage answers 200 with a body that is not JSON), LockWaits
// (calls that waited for the node's lock), PollClients, MaxPollClients and PollsBy
// (popMessage requests in progress and made, by client: its User-Agent). Stats
// and WaitUntil let tests wait for events with a deadline instead of
// sleeping.
//
// The command cmd/mycelium-emulator runs a Network as a process for compose
// examples; see docs/mycelium.md.
package myceliumemu
