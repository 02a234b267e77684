package hero

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/auth"
)

// RPCError is a JSON-RPC error answer.
type RPCError struct {
	Method  string
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string {
	return fmt.Sprintf("%s: error %d: %s", e.Method, e.Code, e.Message)
}

// The JSON-RPC codes Call sends a call again after (docs/api.md, Errors).
const (
	rpcUnavailable = -32000 // Redis or a service behind the API cannot be reached now
	rpcTooMany     = -32029 // a per-caller limit: refused before anything was done
)

// retryAfter is the server's retry hint (data.retry_after_ms), if it gave one.
func (e *RPCError) retryAfter() (time.Duration, bool) {
	var d struct {
		RetryAfterMs *int64 `json:"retry_after_ms"`
	}
	if len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil || d.RetryAfterMs == nil {
		return 0, false
	}
	return time.Duration(*d.RetryAfterMs) * time.Millisecond, true
}

// idempotentMethods are the JSON-RPC methods Call sends again after a transient fault
// (the JSON-RPC names of idempotentCalls): reads, waits, and changes that a second
// time leave things as the first did.
var idempotentMethods = map[string]bool{
	"actor.load": true, "context.load": true, "runner.load": true, "runner.list": true, "job.load": true, "job.list": true,
	"job.logs": true, "flow.load": true, "flow.list": true, "flow.dag": true, "flow.wait": true, "flow.start": true,
	"flow.cancel": true, "dlq.list": true, "dlq.show": true, "message.load": true, "events.read": true, "secret.list": true,
	"dispatcher.list_jobs": true, "dispatcher.job_status": true, "dispatcher.job_logs": true, "rpc.discover": true,
}

// APIURL is the JSON-RPC endpoint: Config.APIURL, else Addr's host on port 9652
// (https://, or http:// with Plaintext). A plaintext URL needs Plaintext.
func (c *Client) APIURL() (string, error) {
	if u := c.cfg.APIURL; u != "" {
		if strings.HasPrefix(strings.ToLower(u), "http://") && !c.cfg.Plaintext {
			return "", fmt.Errorf("API URL %s is plaintext: use https:// (or Plaintext for an API without TLS)", u)
		}
		return u, nil
	}
	host, _, err := net.SplitHostPort(c.cfg.Addr)
	if err != nil {
		return "", fmt.Errorf("address %q is not host:port (or set the API URL)", c.cfg.Addr)
	}
	return apiURL(host, defaultHTTPPort, c.cfg.Plaintext), nil
}

// Call calls any JSON-RPC method (signed like every call of the client) and returns
// its result as the API sent it. An error answer is an *RPCError. Like the gRPC calls,
// an idempotent method (idempotentMethods) is sent again after a transient fault (the
// API unreachable, or answering -32000), and any method the API refused before doing
// anything (-32029 with its retry hint), until the call's deadline; each attempt is
// signed anew.
func (c *Client) Call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	if params == nil {
		params = struct{}{}
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		return nil, err
	}
	url, err := c.APIURL()
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	var res json.RawMessage
	err = c.retrying(ctx, idempotentMethods[method], func() error {
		var err error
		res, err = c.callOnce(ctx, url, method, body)
		return err
	})
	return res, err
}

// callOnce sends one JSON-RPC request.
func (c *Client) callOnce(ctx context.Context, url, method string, body []byte) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := c.authorize(req, body); err != nil {
		return nil, err
	}
	resp, err := c.httpClient.Do(req)
	if err != nil && tlsRefused(err) {
		return nil, fmt.Errorf("%w: %s: %v", ErrTLS, url, errors.Unwrap(err))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: cannot reach the JSON-RPC API at %s: %w", ErrUnavailable, url, errors.Unwrap(err))
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	var r struct {
		Result json.RawMessage `json:"result"`
		Error  *RPCError       `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s answered %s: %s", url, resp.Status, strings.TrimSpace(string(raw)))
	}
	if r.Error != nil {
		r.Error.Method = method
		return nil, r.Error
	}
	return r.Result, nil
}

// authorize signs a JSON-RPC request, or gives it the operator secret.
func (c *Client) authorize(req *http.Request, body []byte) error {
	if c.signer == nil {
		req.Header.Set("Authorization", "Bearer "+c.cfg.AdminSecret)
		if c.cfg.Actor != 0 {
			req.Header.Set(auth.HeaderActor, strconv.FormatUint(uint64(c.cfg.Actor), 10))
		}
		return nil
	}
	cr, err := c.signer.Sign(auth.JSONRPCTarget, auth.Digest(body))
	if err != nil {
		return err
	}
	req.Header.Set(auth.HeaderActor, cr.Actor)
	req.Header.Set(auth.HeaderTimestamp, cr.Timestamp)
	req.Header.Set(auth.HeaderNonce, cr.Nonce)
	req.Header.Set(auth.HeaderSignature, cr.Signature)
	return nil
}
