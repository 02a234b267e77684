package remote

import (
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/mycelium"
)

func TestEnvelopeRoundTripAndRefusals(t *testing.T) {
	e := &Envelope{Kind: KindJobRequest, ContextID: 3, MsgKey: "message:1:2", Origin: "ab",
		Message: &model.Message{CallerID: 1, Job: []model.Job{{ID: 7, CallerID: 1, Script: "x", ScriptType: "sh"}}}}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || got.Message.Job[0].ID != 7 || got.V != Version {
		t.Fatalf("%+v %v", got, err)
	}
	for payload, want := range map[string]string{
		"not json":                                                  "not a JSON envelope",
		`{"v":2,"kind":"ack","context_id":1}`:                       "version 2",
		`{"v":1,"kind":"ack"}`:                                      "names no context",
		`{"v":1,"kind":"ack","context_id":1}`:                       "no msg_key",
		`{"v":1,"kind":"poke","context_id":1}`:                      "unknown envelope kind",
		`{"v":1,"kind":"job_request","context_id":1,"msg_key":"m"}`: "must carry a message",
		`{"v":1,"kind":"ack","context_id":1,"take_by_ms":-5}`:       "negative",
	} {
		if _, err := Decode([]byte(payload)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", payload, err, want)
		}
	}
}

// MaxPayload is what a node takes in one push, with room for any topic.
func TestMaxPayloadFitsANodesRequestLimit(t *testing.T) {
	want := mycelium.MaxPayloadLen(mycelium.ToPK(strings.Repeat("ab", 32)), make([]byte, mycelium.MaxTopicLen))
	if MaxPayload != want {
		t.Fatalf("MaxPayload %d, a node takes %d", MaxPayload, want)
	}
}

// A request must be taken a guard before its sender gives up on the acknowledgement:
// a quarter of the acknowledgement timeout, at most 5 s.
func TestTakeByLeavesAGuard(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for ack, want := range map[time.Duration]time.Duration{
		2 * time.Second:  1500 * time.Millisecond,
		30 * time.Second: 25 * time.Second,
		time.Minute:      55 * time.Second,
	} {
		if got := TakeBy(now, ack).Sub(now); got != want {
			t.Errorf("ack timeout %v: take by +%v, want +%v", ack, got, want)
		}
	}
	e := &Envelope{Kind: KindAck, ContextID: 1, MsgKey: "message:1:2", TakeByMs: TakeBy(now, time.Second).UnixMilli()}
	b, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(b); err != nil || got.TakeByMs != 1_000_750 {
		t.Fatalf("take_by_ms round trip: %+v %v", got, err)
	}
}
