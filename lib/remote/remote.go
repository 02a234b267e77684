// Package remote is what nodes say to each other over Mycelium: the envelope the
// mycelium-gateway pushes and pops, and the topics it uses. Three kinds travel:
//
//   - job_request: origin → runner's node, on the runner's topic (default runner<id>);
//     the message carries the whole job (environment merged with the flow's, the
//     dependencies' results), the origin (its node key, context and message key) and
//     the time by which the runner's node must take it (TakeByMs): the origin gives
//     up waiting for an acknowledgement soon after, so a request that arrives later
//     is dropped, not run.
//   - ack: runner's node → origin, on TopicAck, once the job is queued there — only
//     when its result does not follow within a short time (the router's
//     --remote-ack-delay): a job that ends quickly costs two messages, its request
//     and its result.
//   - job_result: runner's node → origin, on TopicResult, carrying the finished job.
//
// Nothing here waits for a Mycelium reply: a long job's result is pushed back to the
// origin's key when it ends.
package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
)

// Version of the envelope.
const Version = 1

// Kinds of envelopes.
const (
	KindJobRequest = "job_request"
	KindAck        = "ack"
	KindJobResult  = "job_result"
)

// Topics of acks and results. Runner topics are the runners' own (runner<id>); the
// gateway pops without a topic filter and dispatches on the exact topic, so no topic
// can shadow another by prefix.
const (
	TopicAck    = "hero.ack"
	TopicResult = "hero.result"
)

// MaxPayload bounds an envelope: the largest payload a Mycelium v0.7.10 node takes in
// one push (its request body limit is 2 MiB, and the payload travels base64-encoded
// in it) to a public key on a topic of the longest length,
// mycelium.MaxPayloadLen(ToPK(key), 255-byte topic). Larger envelopes are refused,
// never retried: at submission for a job pinned to a remote runner, at dispatch
// otherwise (docs/multinode.md).
const MaxPayload = 1572528

// Envelope is the JSON payload of every Mycelium message between nodes.
type Envelope struct {
	V         int            `json:"v"`
	Kind      string         `json:"kind"`
	ContextID uint32         `json:"context_id"`        // the context on the receiving node
	MsgKey    string         `json:"msg_key,omitempty"` // the origin's request message
	Origin    string         `json:"origin,omitempty"`  // the sending node's public key
	Message   *model.Message `json:"message,omitempty"` // job_request and job_result
	// TakeByMs (job_request; Unix ms, 0: no bound): the receiving node takes the job —
	// queues it for its runner — before this time or drops it. Its sender gives up
	// waiting for an acknowledgement a guard later (TakeBy) and retries or fails the
	// job itself, so a request that comes later (a node back from a partition or a
	// restart, Mycelium still delivering within its 5-minute send window) would run
	// the work a second time.
	TakeByMs int64 `json:"take_by_ms,omitempty"`
}

// TakeByGuard is how long before its sender gives up waiting for an acknowledgement
// a job request must have been taken: a quarter of the acknowledgement timeout, at
// most 5 s. It covers the acknowledgement's way back and the nodes' clocks
// disagreeing (the deadline is a wall-clock time read on the receiving node).
func TakeByGuard(ackTimeout time.Duration) time.Duration {
	return min(ackTimeout/4, 5*time.Second)
}

// TakeBy is the deadline a job request sent now carries when its sender waits
// ackTimeout for the acknowledgement.
func TakeBy(now time.Time, ackTimeout time.Duration) time.Time {
	return now.Add(ackTimeout - TakeByGuard(ackTimeout))
}

// Encode marshals an envelope.
func (e *Envelope) Encode() ([]byte, error) {
	e.V = Version
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxPayload {
		return nil, fmt.Errorf("envelope of %d bytes is over the %d-byte limit", len(b), MaxPayload)
	}
	return b, nil
}

// CheckJobSize refuses, with a clear error, a job that could never travel to a remote
// runner: its job request envelope alone (before the flow's environment and the
// dependencies' results are added at dispatch) is over MaxPayload.
func CheckJobSize(j *model.Job) error {
	e := &Envelope{Kind: KindJobRequest, ContextID: j.ContextID, MsgKey: "message:4294967295:4294967295",
		Message: &model.Message{ID: j.ID, CallerID: j.CallerID, ContextID: j.ContextID, Kind: KindJobRequest, Job: []model.Job{*j}}}
	e.V = Version
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if len(b) > MaxPayload {
		return fmt.Errorf("job %d is %d bytes as a message to a remote runner; a Mycelium node takes at most %d bytes in one message", j.ID, len(b), MaxPayload)
	}
	return nil
}

// Decode parses and checks an envelope; the error says what is wrong with it.
func Decode(b []byte) (*Envelope, error) {
	if len(b) > MaxPayload {
		return nil, fmt.Errorf("payload of %d bytes is over the %d-byte limit", len(b), MaxPayload)
	}
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("payload is not a JSON envelope: %v", err)
	}
	if e.V != Version {
		return nil, fmt.Errorf("envelope version %d, want %d", e.V, Version)
	}
	if e.ContextID == 0 {
		return nil, errors.New("envelope names no context")
	}
	if e.TakeByMs < 0 {
		return nil, fmt.Errorf("envelope's take_by_ms %d is negative", e.TakeByMs)
	}
	switch e.Kind {
	case KindJobRequest, KindJobResult:
		if e.Message == nil || len(e.Message.Job) != 1 {
			return nil, fmt.Errorf("%s envelope must carry a message with one job", e.Kind)
		}
		if e.MsgKey == "" {
			return nil, fmt.Errorf("%s envelope has no msg_key", e.Kind)
		}
	case KindAck:
		if e.MsgKey == "" {
			return nil, errors.New("ack envelope has no msg_key")
		}
	default:
		return nil, fmt.Errorf("unknown envelope kind %q", e.Kind)
	}
	return &e, nil
}
