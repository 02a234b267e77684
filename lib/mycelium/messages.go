package mycelium

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Push submits a message (operation pushMessage, POST /api/v1/messages) to
// dst with an optional topic (at most MaxTopicLen bytes; nil or empty means
// none) and a payload.
//
// With replyTimeout nil the node queues the message and answers 201 with its
// id at once; the result has ID set and Reply nil.
//
// With replyTimeout set, the query parameter reply_timeout (whole seconds,
// rounded up) asks the node to wait for a reply:
//   - 200: a reply arrived; the result has ID (the reply's id, which is the id
//     of the pushed message) and Reply.
//   - 408: none arrived in time; Push returns the result with ID set together
//     with an error matching ErrReplyTimeout. A later reply lands in this
//     node's inbox.
//
// Any other status is an *APIError (the node answers 400 for a topic that is
// too long, for instance, and 413 for a body over its limit). A push whose body
// would be over MaxRequestBody is refused before sending, with an error matching
// ErrTooLarge (MaxPayloadLen says how large a payload fits).
func (c *Client) Push(ctx context.Context, dst Destination, topic, payload []byte, replyTimeout *time.Duration) (*PushResult, error) {
	if err := dst.Validate(); err != nil {
		return nil, err
	}
	if len(topic) > MaxTopicLen {
		return nil, fmt.Errorf("mycelium: topic is %d bytes, the limit is %d", len(topic), MaxTopicLen)
	}
	if payload == nil {
		payload = []byte{}
	}
	if n, limit := len(payload), MaxPayloadLen(dst, topic); n > limit {
		return nil, fmt.Errorf("%w: a payload of %d bytes is over the %d bytes that fit in a push (the node reads request bodies of at most %d bytes)",
			ErrTooLarge, n, limit, MaxRequestBody)
	}
	r := request{op: "pushMessage", method: http.MethodPost, segs: []string{"api", "v1", "messages"},
		body: pushBody{Dst: dst, Topic: topic, Payload: payload}}
	if replyTimeout != nil {
		secs := seconds(*replyTimeout)
		r.query = url.Values{"reply_timeout": {strconv.FormatInt(secs, 10)}}
		r.wait = time.Duration(secs) * time.Second
		if r.wait == 0 {
			r.wait = time.Nanosecond // still a waiting call: use the long-poll timeout
		}
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	switch resp.status {
	case http.StatusCreated:
		var id struct {
			ID string `json:"id"`
		}
		if err := c.decode(r, resp, &id); err != nil {
			return nil, err
		}
		return &PushResult{ID: id.ID}, nil
	case http.StatusOK:
		var m InboundMessage
		if err := c.decode(r, resp, &m); err != nil {
			return nil, err
		}
		return &PushResult{ID: m.ID, Reply: &m}, nil
	case http.StatusRequestTimeout:
		var id struct {
			ID string `json:"id"`
		}
		if err := c.decode(r, resp, &id); err != nil {
			return nil, err
		}
		return &PushResult{ID: id.ID}, fmt.Errorf("mycelium pushMessage: message %s: %w", id.ID, ErrReplyTimeout)
	default:
		return nil, c.apiError(r, resp)
	}
}

// Pop takes a message from the node's inbound queue (operation popMessage,
// GET /api/v1/messages?peek=…&timeout=…&topic=…).
//
// topic, when non-empty, filters messages by topic (sent standard-base64 and
// URL-escaped); see the package doc for prefix versus whole-topic matching.
// timeout is how long the node may hold the request open waiting for a
// message (whole seconds, rounded up; 0 returns at once); the HTTP request
// itself is allowed timeout plus Config.LongPollGrace. With peek the message
// stays queued.
//
// Pop returns (nil, nil) when the node answers 204: nothing arrived in time. On a
// v0.7.10 node timeout starts only once the pop holds the node's lock, which a long
// poll holds for its whole wait: a pop made during another client's long poll first
// waits for that poll to end (with timeout 0 too), then looks, and may answer a
// message. The HTTP timeout (timeout plus LongPollGrace, or RequestTimeout for 0)
// bounds the whole, so such a pop can fail with a timeout error. A 200 whose body
// is JSON but not a message is an error matching ErrMalformed; one that is not
// JSON, ErrNotJSON.
func (c *Client) Pop(ctx context.Context, topic []byte, timeout time.Duration, peek bool) (*InboundMessage, error) {
	secs := seconds(timeout)
	q := url.Values{
		"peek":    {strconv.FormatBool(peek)},
		"timeout": {strconv.FormatInt(secs, 10)},
	}
	if len(topic) > 0 {
		if len(topic) > MaxTopicLen {
			return nil, fmt.Errorf("mycelium: topic is %d bytes, the limit is %d", len(topic), MaxTopicLen)
		}
		q.Set("topic", b64(topic))
	}
	r := request{op: "popMessage", method: http.MethodGet, segs: []string{"api", "v1", "messages"},
		query: q, wait: time.Duration(secs) * time.Second, takes: !peek}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	switch resp.status {
	case http.StatusOK:
		var m InboundMessage
		if err := c.decode(r, resp, &m); err != nil {
			if json.Valid(resp.body) {
				// Whole JSON that is not a message (a payload that is not base64, …).
				return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			// The body was read whole (a cut-off one fails in do), so it is
			// not JSON at all.
			return nil, fmt.Errorf("%w: %v", ErrNotJSON, err)
		}
		return &m, nil
	case http.StatusNoContent:
		return nil, nil
	default:
		return nil, c.apiError(r, resp)
	}
}

// Reply answers the received message id (operation pushMessageReply,
// POST /api/v1/messages/reply/{id}); the node answers 204. The body is the
// spec's PushMessageBody, so the reply needs a destination: normally the
// sender of the message being answered (ReplyTo does that). Replies carry no
// topic.
func (c *Client) Reply(ctx context.Context, id string, dst Destination, payload []byte) error {
	if err := ValidateMessageID(id); err != nil {
		return err
	}
	if err := dst.Validate(); err != nil {
		return err
	}
	if payload == nil {
		payload = []byte{}
	}
	r := request{op: "pushMessageReply", method: http.MethodPost,
		segs: []string{"api", "v1", "messages", "reply", id},
		body: pushBody{Dst: dst, Payload: payload}}
	_, err := c.call(ctx, r, nil, http.StatusNoContent)
	return err
}

// ReplyTo replies to m, addressed to its sender's public key.
func (c *Client) ReplyTo(ctx context.Context, m *InboundMessage, payload []byte) error {
	return c.Reply(ctx, m.ID, ToPK(m.SrcPK), payload)
}

// Status returns what the node knows of an outbound message (operation
// getMessageInfo, GET /api/v1/messages/status/{id}). An unknown id (404) is an
// error matching ErrNotFound.
func (c *Client) Status(ctx context.Context, id string) (*MessageStatus, error) {
	if err := ValidateMessageID(id); err != nil {
		return nil, err
	}
	r := request{op: "getMessageInfo", method: http.MethodGet,
		segs: []string{"api", "v1", "messages", "status", id}}
	var st MessageStatus
	if _, err := c.call(ctx, r, &st, http.StatusOK); err != nil {
		return nil, err
	}
	return &st, nil
}

// Info returns the node's subnet, address, public key and start time
// (operation getInfo, GET /api/v1/admin). A successful call also shows the
// API is up, so it serves as a readiness probe.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	r := request{op: "getInfo", method: http.MethodGet, segs: []string{"api", "v1", "admin"}}
	var in Info
	if _, err := c.call(ctx, r, &in, http.StatusOK); err != nil {
		return nil, err
	}
	return &in, nil
}

// PublicKeyFromIP asks the node for the public key of the node owning the
// overlay address ip (operation getPublicKeyFromIp,
// GET /api/v1/pubkey/{mycelium_ip}). The spec names the response field
// "NodePubKey"; node releases have been seen to send "publicKey", so both are
// accepted. An unknown address (404) is an error matching ErrNotFound.
func (c *Client) PublicKeyFromIP(ctx context.Context, ip string) (string, error) {
	if err := ToIP(ip).Validate(); err != nil {
		return "", err
	}
	r := request{op: "getPublicKeyFromIp", method: http.MethodGet, segs: []string{"api", "v1", "pubkey", ip}}
	var out struct {
		NodePubKey string `json:"NodePubKey"`
		PublicKey  string `json:"publicKey"`
	}
	if _, err := c.call(ctx, r, &out, http.StatusOK); err != nil {
		return "", err
	}
	pk := out.NodePubKey
	if pk == "" {
		pk = out.PublicKey
	}
	if err := ValidatePublicKey(pk); err != nil {
		return "", &RequestError{Op: r.op, Method: r.method, Path: c.url(r.segs).EscapedPath(), Err: err}
	}
	return pk, nil
}
