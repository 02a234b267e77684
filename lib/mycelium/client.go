package mycelium

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of a Mycelium node's API and of this client.
const (
	DefaultHost           = "127.0.0.1"
	DefaultPort           = 8989 // mycelium's --api-addr default port
	DefaultBaseURL        = "http://127.0.0.1:8989"
	DefaultRequestTimeout = 30 * time.Second
	DefaultLongPollGrace  = 10 * time.Second
	DefaultMaxBodyBytes   = 64 << 20
)

// Config configures a Client. The zero value talks to DefaultBaseURL.
type Config struct {
	// BaseURL is the node's API root, e.g. "http://127.0.0.1:8989" (no
	// "/api/v1"). Empty means DefaultBaseURL. BaseURLFromIPPort builds it from
	// the seeds' --mycelium-ip / --mycelium-port pair.
	BaseURL string
	// HTTPClient sends the requests. Nil means a client without an overall
	// timeout: bounds come from RequestTimeout and the long-poll rule below.
	// If the given client has a Timeout shorter than a long poll needs, a copy
	// with a longer Timeout is used for that request.
	HTTPClient *http.Client
	// RequestTimeout bounds every request that does not wait on the node
	// (everything except Pop with a timeout and Push with a reply timeout).
	// Zero means DefaultRequestTimeout; negative means no bound beyond ctx.
	RequestTimeout time.Duration
	// LongPollGrace is added to the node-side wait (Pop's timeout, Push's
	// reply timeout) to make the per-request HTTP timeout of a long poll, so
	// the node answers before the client gives up — unless the node's lock was
	// held by another client's long poll first (see Pop). Zero means
	// DefaultLongPollGrace.
	LongPollGrace time.Duration
	// MaxBodyBytes caps the size of a response body. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// UserAgent is sent with every request when set (e.g. to tell one
	// gateway replica's calls from another's in a node's logs).
	UserAgent string
}

// Client calls one Mycelium node's HTTP API. It is safe for concurrent use.
type Client struct {
	base  *url.URL
	hc    *http.Client
	reqTO time.Duration
	grace time.Duration
	max   int64
	ua    string
}

// New returns a Client for cfg.
func New(cfg Config) (*Client, error) {
	raw := cfg.BaseURL
	if raw == "" {
		raw = DefaultBaseURL
	}
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil {
		return nil, fmt.Errorf("mycelium: base url %q: %v", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("mycelium: base url %q: want http(s)://host:port", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("mycelium: base url %q: must not have a query or fragment", raw)
	}
	c := &Client{base: u, hc: cfg.HTTPClient, reqTO: cfg.RequestTimeout, grace: cfg.LongPollGrace, max: cfg.MaxBodyBytes, ua: cfg.UserAgent}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.reqTO == 0 {
		c.reqTO = DefaultRequestTimeout
	}
	if c.grace <= 0 {
		c.grace = DefaultLongPollGrace
	}
	if c.max <= 0 {
		c.max = DefaultMaxBodyBytes
	}
	return c, nil
}

// BaseURL returns the API root the client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// BaseURLFromIPPort builds a base URL from the seeds' --mycelium-ip and
// --mycelium-port flags: an empty ip means DefaultHost, port 0 means
// DefaultPort, and an IPv6 address is bracketed.
func BaseURLFromIPPort(ip string, port int) (string, error) {
	ip = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(ip), "["), "]")
	if ip == "" {
		ip = DefaultHost
	}
	if port == 0 {
		port = DefaultPort
	}
	if port < 0 || port > 65535 {
		return "", fmt.Errorf("mycelium: port %d out of range", port)
	}
	if strings.ContainsAny(ip, "/?#@ ") {
		return "", fmt.Errorf("mycelium: %q is not a host", ip)
	}
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)), nil
}

// seconds rounds d up to whole seconds, the unit of the API's timeouts.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// request describes one API call.
type request struct {
	op     string   // operationId
	method string   // HTTP method
	segs   []string // path segments after the base, unescaped
	query  url.Values
	body   any           // JSON-encoded when non-nil
	wait   time.Duration // node-side wait of a long poll; 0 for ordinary calls
	takes  bool          // the call changes the node's state though a GET (a pop that is not a peek)
}

// resendable: sending r a second time changes nothing on the node (a GET that reads,
// a peek), so a call failed by another request's cancellation may be sent again.
func (r request) resendable() bool { return r.method == http.MethodGet && !r.takes }

// response is a received answer, any status.
type response struct {
	status int
	body   []byte
}

func (c *Client) url(segs []string) *url.URL {
	u := *c.base
	var p, rp strings.Builder
	p.WriteString(c.base.Path)
	rp.WriteString(c.base.EscapedPath())
	for _, s := range segs {
		p.WriteString("/" + s)
		rp.WriteString("/" + url.PathEscape(s))
	}
	u.Path, u.RawPath = p.String(), rp.String()
	return &u
}

// do sends r and reads the answer whole.
//
// A call whose context ends while it is in flight may end another call: Go's HTTP
// client puts the connection of an answer without a body (a pop's 204) back into its
// pool before it hands the answer over, and a call cancelled in that moment closes
// the connection, which the next call may have taken already; that call then fails
// with the cancelled call's "context canceled". Long polls, which callers cancel by
// design (the gateway cuts its poll short for each of its other calls), therefore
// use a connection of their own (closed after the answer, never pooled). A call that
// fails with "context canceled" although its own context is live was failed that way
// by another one; it is sent once more when that changes nothing on the node
// (resendable).
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	resp, err := c.send(ctx, r)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil && r.resendable() {
		resp, err = c.send(ctx, r)
	}
	return resp, err
}

// send makes one attempt at r (do).
func (c *Client) send(ctx context.Context, r request) (*response, error) {
	u := c.url(r.segs)
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	fail := func(err error) error {
		return &RequestError{Op: r.op, Method: r.method, Path: u.EscapedPath(), Err: err}
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fail(err)
		}
		body = bytes.NewReader(b)
	}
	hc := c.hc
	timeout := c.reqTO
	if r.wait > 0 {
		timeout = r.wait + c.grace
		if hc.Timeout > 0 && hc.Timeout < timeout {
			cp := *hc
			cp.Timeout = timeout
			hc = &cp
		}
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, fail(err)
	}
	// A long poll's connection serves it alone: cancelling the poll (its caller's
	// way to cut it short) can then close no connection another call has taken.
	req.Close = r.wait > 0
	req.Header.Set("Accept", "application/json")
	if c.ua != "" {
		req.Header.Set("User-Agent", c.ua)
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fail(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.max+1))
	if err != nil {
		return nil, fail(fmt.Errorf("reading %d response: %w", resp.StatusCode, err))
	}
	if int64(len(b)) > c.max {
		return nil, fail(fmt.Errorf("response body larger than %d bytes", c.max))
	}
	return &response{status: resp.StatusCode, body: b}, nil
}

// apiError builds the APIError for an unexpected status.
func (c *Client) apiError(r request, resp *response) error {
	msg := strings.TrimSpace(string(resp.body))
	if len(msg) > 1024 {
		msg = msg[:1024] + "…"
	}
	return &APIError{Op: r.op, Method: r.method, Path: c.url(r.segs).EscapedPath(),
		StatusCode: resp.status, Message: msg}
}

// decode unmarshals a JSON response body, naming the operation on failure.
func (c *Client) decode(r request, resp *response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return &RequestError{Op: r.op, Method: r.method, Path: c.url(r.segs).EscapedPath(),
			Err: fmt.Errorf("decoding %d response: %w", resp.status, err)}
	}
	return nil
}

// call performs r and requires one of the ok statuses; out (if non-nil)
// receives the decoded body of a successful response.
func (c *Client) call(ctx context.Context, r request, out any, ok ...int) (int, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return 0, err
	}
	for _, s := range ok {
		if resp.status == s {
			if out != nil {
				if err := c.decode(r, resp, out); err != nil {
					return resp.status, err
				}
			}
			return resp.status, nil
		}
	}
	return resp.status, c.apiError(r, resp)
}
