// Package mycelium is a client for the HTTP API of a Mycelium node
// (github.com/threefoldtech/mycelium, API v1 as specified by the project's
// docs/api.yaml at v0.7.10). It covers the message subsystem — push, pop (long
// poll), reply, status — the topic configuration endpoints, the node info
// endpoint and the public-key lookup. Wire shapes follow the spec exactly:
// camelCase field names, binary topics and payloads as standard base64 with
// padding, message ids as 16 hex characters, public keys as 64 hex characters.
//
// Three behaviours of the API are worth knowing before building on it:
//
//   - The topic filter of popMessage is described by the spec as a prefix test
//     ("checks if the message has the given string at the start"); Mycelium
//     v0.7.10 compares the whole topic instead. Topics that are served must
//     therefore never be prefixes of one another, and a consumer should always
//     pop with the full topic. docs/mycelium.md gives the naming rule.
//   - A reply (POST /api/v1/messages/reply/{id}) reuses the id of the message it
//     answers and carries no topic. When the original sender waits for it
//     (Push with a reply timeout) the node hands it over directly; otherwise it
//     lands in the sender's inbox, where only a pop without a topic filter sees
//     it.
//   - A v0.7.10 node locks itself for every call and holds the lock for the
//     whole of a long poll; a pop's timeout starts only once it holds the lock
//     (a pop with timeout 0 made during another long poll waits for that poll).
//     It reads request bodies of at most 2 MiB (MaxRequestBody, MaxPayloadLen,
//     Permanent); docs/mycelium.md.
//
// The package uses only the standard library. lib/testutil/myceliumemu is a
// test emulator of the same API.
package mycelium
