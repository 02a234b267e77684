package mycelium

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Destination is the receiver of a pushed message: exactly one of PK (the
// receiver node's public key, 64 hex characters) or IP (an overlay IPv6
// address in the receiver's subnet) is set. It is the spec's
// MessageDestination: on the wire {"pk": "…"} or {"ip": "…"}.
type Destination struct {
	PK string
	IP string
}

// ToPK returns the Destination of the node with public key pk.
func ToPK(pk string) Destination { return Destination{PK: pk} }

// ToIP returns the Destination of the node whose subnet holds ip.
func ToIP(ip string) Destination { return Destination{IP: ip} }

// Validate reports whether exactly one of PK and IP is set and well formed.
func (d Destination) Validate() error {
	switch {
	case d.PK != "" && d.IP != "":
		return errors.New("mycelium: destination: set pk or ip, not both")
	case d.PK != "":
		return ValidatePublicKey(d.PK)
	case d.IP != "":
		a, err := netip.ParseAddr(d.IP)
		if err != nil || !a.Is6() || a.Is4In6() {
			return fmt.Errorf("mycelium: destination ip %q is not an IPv6 address", d.IP)
		}
		return nil
	default:
		return errors.New("mycelium: destination: pk or ip is required")
	}
}

// String returns "pk:<key>" or "ip:<address>".
func (d Destination) String() string {
	if d.PK != "" {
		return "pk:" + d.PK
	}
	return "ip:" + d.IP
}

// MarshalJSON encodes the destination as the spec's one-key object.
func (d Destination) MarshalJSON() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	if d.PK != "" {
		return json.Marshal(struct {
			PK string `json:"pk"`
		}{d.PK})
	}
	return json.Marshal(struct {
		IP string `json:"ip"`
	}{d.IP})
}

// UnmarshalJSON decodes {"pk": …} or {"ip": …}.
func (d *Destination) UnmarshalJSON(b []byte) error {
	var w struct {
		PK *string `json:"pk"`
		IP *string `json:"ip"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*d = Destination{}
	if w.PK != nil {
		d.PK = *w.PK
	}
	if w.IP != nil {
		d.IP = *w.IP
	}
	return d.Validate()
}

// ValidatePublicKey checks that pk is a Mycelium public key: 64 hex characters.
func ValidatePublicKey(pk string) error {
	if len(pk) != 64 {
		return fmt.Errorf("mycelium: public key must be 64 hex characters, got %d", len(pk))
	}
	if _, err := hex.DecodeString(pk); err != nil {
		return fmt.Errorf("mycelium: public key is not hex: %v", err)
	}
	return nil
}

// ValidateMessageID checks that id is a Mycelium message id: 16 hex characters.
func ValidateMessageID(id string) error {
	if len(id) != 16 {
		return fmt.Errorf("mycelium: message id must be 16 hex characters, got %d", len(id))
	}
	if _, err := hex.DecodeString(id); err != nil {
		return fmt.Errorf("mycelium: message id is not hex: %v", err)
	}
	return nil
}

// MaxTopicLen is the longest topic a node accepts, in bytes (340 base64
// characters in the spec).
const MaxTopicLen = 255

// InboundMessage is a message received by the node (the spec's
// InboundMessage). Topic and Payload are raw bytes; encoding/json writes them
// as standard base64, which is the spec's "format: byte". Topic is nil when
// the message had none (the node omits the field).
type InboundMessage struct {
	ID      string `json:"id"`
	SrcIP   string `json:"srcIp"`
	SrcPK   string `json:"srcPk"`
	DstIP   string `json:"dstIp"`
	DstPK   string `json:"dstPk"`
	Topic   []byte `json:"topic,omitempty"`
	Payload []byte `json:"payload"`
}

// pushBody is the spec's PushMessageBody (also the body of a reply).
// MaxRequestBody is the largest request body a Mycelium v0.7.10 node reads:
// axum's default body limit, 2 MiB. A larger one is answered 413.
const MaxRequestBody = 2 << 20

// MaxPayloadLen returns the largest payload a push to dst on topic can carry
// within MaxRequestBody: the payload travels base64-encoded (4 bytes for 3) in a
// JSON body with the destination and the topic.
func MaxPayloadLen(dst Destination, topic []byte) int {
	b, err := json.Marshal(pushBody{Dst: dst, Topic: topic, Payload: []byte{}})
	if err != nil {
		b, _ = json.Marshal(pushBody{Dst: ToPK(strings.Repeat("0", 64)), Topic: topic, Payload: []byte{}})
	}
	room := MaxRequestBody - len(b)
	if room < 0 {
		return 0
	}
	return room / 4 * 3
}

type pushBody struct {
	Dst     Destination `json:"dst"`
	Topic   []byte      `json:"topic,omitempty"`
	Payload []byte      `json:"payload"`
}

// PushResult is the outcome of Push. ID is always set: the id of the pushed
// message (a reply carries the same id). Reply is set when the push waited for
// a reply and one arrived in time (status 200).
type PushResult struct {
	ID    string
	Reply *InboundMessage
}

// MessageStatus is the spec's MessageStatusResponse: what the node knows of an
// outbound message.
type MessageStatus struct {
	Dst      string            `json:"dst"`      // receiver's overlay IP
	State    TransmissionState `json:"state"`    // see TransmissionState
	Created  int64             `json:"created"`  // Unix seconds
	Deadline int64             `json:"deadline"` // Unix seconds; the node gives up after it
	MsgLen   int               `json:"msgLen"`   // payload length in bytes
}

// Transmission states of an outbound message (the spec's TransmissionState).
const (
	StatePending  = "pending"  // the receiver has not acknowledged the message's start yet
	StateSending  = "sending"  // chunks are in flight; see Pending/Sent/Acked
	StateReceived = "received" // the receiver acknowledged full reception
	StateRead     = "read"     // an application on the receiver read it
	StateAborted  = "aborted"  // the sender gave up (deadline passed)
)

// TransmissionState is either one of the plain states ("pending", "received",
// "read", "aborted") or "sending" with chunk counters, which the spec encodes
// as {"sending": {"pending": n, "sent": n, "acked": n}}.
type TransmissionState struct {
	Name    string
	Pending int
	Sent    int
	Acked   int
}

// Final reports whether the state will not change any more as far as delivery
// is concerned (received, read or aborted).
func (s TransmissionState) Final() bool {
	return s.Name == StateReceived || s.Name == StateRead || s.Name == StateAborted
}

// MarshalJSON writes the spec's encoding.
func (s TransmissionState) MarshalJSON() ([]byte, error) {
	if s.Name == StateSending {
		type counters struct {
			Pending int `json:"pending"`
			Sent    int `json:"sent"`
			Acked   int `json:"acked"`
		}
		return json.Marshal(map[string]counters{StateSending: {s.Pending, s.Sent, s.Acked}})
	}
	return json.Marshal(s.Name)
}

// UnmarshalJSON reads a plain string state or the {"sending": {…}} object.
func (s *TransmissionState) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*s = TransmissionState{Name: name}
		return nil
	}
	var obj map[string]struct {
		Pending int `json:"pending"`
		Sent    int `json:"sent"`
		Acked   int `json:"acked"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("mycelium: transmission state: %v", err)
	}
	c, ok := obj[StateSending]
	if !ok || len(obj) != 1 {
		return fmt.Errorf("mycelium: transmission state: unexpected %s", b)
	}
	*s = TransmissionState{Name: StateSending, Pending: c.Pending, Sent: c.Sent, Acked: c.Acked}
	return nil
}

// Info is the spec's Info: general information about the node.
type Info struct {
	NodeSubnet    string `json:"nodeSubnet"`    // e.g. "54f:b680:ba6e:7ced::/64"
	NodeIP        string `json:"nodeIp"`        // the node's own overlay address
	NodePubkey    string `json:"nodePubkey"`    // 64 hex characters
	NodeStartTime int64  `json:"nodeStartTime"` // Unix seconds
}
