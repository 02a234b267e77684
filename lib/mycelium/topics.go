package mycelium

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
)

// Topic configuration (the spec's "Topic" tag). A node accepts or rejects
// messages per topic: a topic on the whitelist accepts only senders whose
// address is in one of its source subnets (an empty source list blocks
// everyone); a topic not on the list gets the default action. Replies are not
// subject to this check. Topics in paths and bodies are standard base64.

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func topicSegs(topic []byte, more ...string) ([]string, error) {
	if len(topic) == 0 {
		return nil, errors.New("mycelium: topic is required")
	}
	if len(topic) > MaxTopicLen {
		return nil, fmt.Errorf("mycelium: topic is %d bytes, the limit is %d", len(topic), MaxTopicLen)
	}
	return append([]string{"api", "v1", "messages", "topics", b64(topic)}, more...), nil
}

// DefaultTopicAction reports whether topics that are not configured are
// accepted (operation getDefaultTopicAction, GET /api/v1/messages/topics/default).
func (c *Client) DefaultTopicAction(ctx context.Context) (accept bool, err error) {
	r := request{op: "getDefaultTopicAction", method: http.MethodGet,
		segs: []string{"api", "v1", "messages", "topics", "default"}}
	var out struct {
		Accept bool `json:"accept"`
	}
	if _, err := c.call(ctx, r, &out, http.StatusOK); err != nil {
		return false, err
	}
	return out.Accept, nil
}

// SetDefaultTopicAction sets whether topics that are not configured are
// accepted (operation setDefaultTopicAction, PUT /api/v1/messages/topics/default).
func (c *Client) SetDefaultTopicAction(ctx context.Context, accept bool) error {
	r := request{op: "setDefaultTopicAction", method: http.MethodPut,
		segs: []string{"api", "v1", "messages", "topics", "default"},
		body: struct {
			Accept bool `json:"accept"`
		}{accept}}
	_, err := c.call(ctx, r, nil, http.StatusNoContent)
	return err
}

// Topics lists the configured (whitelisted) topics (operation getTopics,
// GET /api/v1/messages/topics).
func (c *Client) Topics(ctx context.Context) ([][]byte, error) {
	r := request{op: "getTopics", method: http.MethodGet, segs: []string{"api", "v1", "messages", "topics"}}
	var out [][]byte // base64 strings decode into []byte
	if _, err := c.call(ctx, r, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out, nil
}

// AddTopic puts topic on the whitelist with no sources yet (operation
// addTopic, POST /api/v1/messages/topics with a JSON string body); the node
// answers 201. Until sources are added the topic accepts no sender.
func (c *Client) AddTopic(ctx context.Context, topic []byte) error {
	if _, err := topicSegs(topic); err != nil {
		return err
	}
	r := request{op: "addTopic", method: http.MethodPost, segs: []string{"api", "v1", "messages", "topics"},
		body: b64(topic)}
	_, err := c.call(ctx, r, nil, http.StatusCreated)
	return err
}

// RemoveTopic takes topic off the whitelist, so it falls back to the default
// action (operation removeTopic, DELETE /api/v1/messages/topics/{topic}).
func (c *Client) RemoveTopic(ctx context.Context, topic []byte) error {
	segs, err := topicSegs(topic)
	if err != nil {
		return err
	}
	r := request{op: "removeTopic", method: http.MethodDelete, segs: segs}
	_, err = c.call(ctx, r, nil, http.StatusNoContent)
	return err
}

// TopicSources lists the subnets (CIDR) allowed to send on topic (operation
// getTopicSources, GET /api/v1/messages/topics/{topic}/sources).
func (c *Client) TopicSources(ctx context.Context, topic []byte) ([]string, error) {
	segs, err := topicSegs(topic, "sources")
	if err != nil {
		return nil, err
	}
	r := request{op: "getTopicSources", method: http.MethodGet, segs: segs}
	var out []string
	if _, err := c.call(ctx, r, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out, nil
}

// AddTopicSource allows subnet (CIDR, e.g. "503:5478:df06:d79a::/64") to send
// on topic, whitelisting the topic if needed (operation addTopicSource,
// POST /api/v1/messages/topics/{topic}/sources).
func (c *Client) AddTopicSource(ctx context.Context, topic []byte, subnet string) error {
	segs, err := topicSegs(topic, "sources")
	if err != nil {
		return err
	}
	r := request{op: "addTopicSource", method: http.MethodPost, segs: segs,
		body: struct {
			Subnet string `json:"subnet"`
		}{subnet}}
	_, err = c.call(ctx, r, nil, http.StatusNoContent)
	return err
}

// RemoveTopicSource withdraws subnet from topic's sources (operation
// removeTopicSource, DELETE /api/v1/messages/topics/{topic}/sources/{subnet};
// the subnet's "/" is sent escaped as %2F).
func (c *Client) RemoveTopicSource(ctx context.Context, topic []byte, subnet string) error {
	if subnet == "" {
		return errors.New("mycelium: subnet is required")
	}
	segs, err := topicSegs(topic, "sources", subnet)
	if err != nil {
		return err
	}
	r := request{op: "removeTopicSource", method: http.MethodDelete, segs: segs}
	_, err = c.call(ctx, r, nil, http.StatusNoContent)
	return err
}

// TopicForwardSocket returns the Unix socket path messages on topic are
// forwarded to, or "" when none is set (operation getTopicForwardSocket,
// GET /api/v1/messages/topics/{topic}/forward; the body is a JSON string or
// null).
func (c *Client) TopicForwardSocket(ctx context.Context, topic []byte) (string, error) {
	segs, err := topicSegs(topic, "forward")
	if err != nil {
		return "", err
	}
	r := request{op: "getTopicForwardSocket", method: http.MethodGet, segs: segs}
	var out *string
	if _, err := c.call(ctx, r, &out, http.StatusOK); err != nil {
		return "", err
	}
	if out == nil {
		return "", nil
	}
	return *out, nil
}

// SetTopicForwardSocket makes the node forward messages on topic to the Unix
// socket at path instead of queueing them for Pop (operation
// setTopicForwardSocket, PUT /api/v1/messages/topics/{topic}/forward).
func (c *Client) SetTopicForwardSocket(ctx context.Context, topic []byte, path string) error {
	segs, err := topicSegs(topic, "forward")
	if err != nil {
		return err
	}
	r := request{op: "setTopicForwardSocket", method: http.MethodPut, segs: segs,
		body: struct {
			SocketPath string `json:"socket_path"`
		}{path}}
	_, err = c.call(ctx, r, nil, http.StatusNoContent)
	return err
}

// RemoveTopicForwardSocket stops forwarding topic to a socket (operation
// removeTopicForwardSocket, DELETE /api/v1/messages/topics/{topic}/forward).
func (c *Client) RemoveTopicForwardSocket(ctx context.Context, topic []byte) error {
	segs, err := topicSegs(topic, "forward")
	if err != nil {
		return err
	}
	r := request{op: "removeTopicForwardSocket", method: http.MethodDelete, segs: segs}
	_, err = c.call(ctx, r, nil, http.StatusNoContent)
	return err
}
