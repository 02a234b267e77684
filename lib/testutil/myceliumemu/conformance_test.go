package myceliumemu_test

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/mycelium"
	"github.com/hero-coordinator/hero/lib/testutil/myceliumemu"
)

const specPath = "testdata/api.yaml"

func mustSpec(t *testing.T) *apiSpec {
	t.Helper()
	s, err := loadSpec(specPath)
	if err != nil {
		t.Fatalf("loading %s: %v", specPath, err)
	}
	return s
}

// TestSpecReader checks the YAML-subset reader on the parts of api.yaml the
// checker relies on.
func TestSpecReader(t *testing.T) {
	t.Parallel()
	s := mustSpec(t)
	if s.root["openapi"] != "3.0.2" {
		t.Fatalf("openapi %v", s.root["openapi"])
	}
	for _, p := range []string{"/api/v1/admin", "/api/v1/messages", "/api/v1/messages/reply/{id}",
		"/api/v1/messages/status/{id}", "/api/v1/messages/topics/{topic}/sources/{subnet}"} {
		if s.paths[p] == nil {
			t.Errorf("path %s missing", p)
		}
	}
	push := s.paths["/api/v1/messages"]["POST"].(map[string]any)
	if push["operationId"] != "pushMessage" {
		t.Fatal(push["operationId"])
	}
	param := push["parameters"].([]any)[0].(map[string]any)
	if param["name"] != "reply_timeout" || param["in"] != "query" || param["schema"].(map[string]any)["minimum"] != int64(0) {
		t.Fatalf("reply_timeout parameter %v", param)
	}
	desc := s.paths["/api/v1/messages"]["GET"].(map[string]any)["description"].(string)
	if !strings.HasPrefix(desc, "Get a message from the inbound message queue.") || !strings.HasSuffix(desc, "unless a message is received\n") {
		t.Fatalf("block scalar %q", desc)
	}
	enum := s.resolve(map[string]any{"$ref": "#/components/schemas/TransmissionState"})["oneOf"].([]any)[0].(map[string]any)["enum"]
	if len(enum.([]any)) != 4 {
		t.Fatalf("flow sequence %v", enum)
	}
	for _, bad := range []string{"a: &x 1\n", "a:\n\tb: 1\n", "a: {b: 1}\n", "a: b\n  c\n"} {
		if _, err := parseYAML(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestSpecCheckerCatchesViolations makes sure the checker is not vacuous.
func TestSpecCheckerCatchesViolations(t *testing.T) {
	t.Parallel()
	s := mustSpec(t)
	okMsg := `{"id":"0123456789abcdef","srcIp":"449::1","srcPk":"` + strings.Repeat("ab", 32) +
		`","dstIp":"449::2","dstPk":"` + strings.Repeat("cd", 32) + `","topic":"aGk=","payload":"aGk="}`
	good := exchange{Method: "GET", Path: "/api/v1/messages", RawQuery: "peek=false&timeout=0&topic=aGk%3D",
		Status: 200, RespType: "application/json", RespBody: []byte(okMsg)}
	if _, errs := s.check(good); len(errs) > 0 {
		t.Fatalf("good exchange rejected: %v", errs)
	}
	for name, mutate := range map[string]func(*exchange){
		"unknown path":      func(e *exchange) { e.Path = "/api/v1/message" },
		"unknown method":    func(e *exchange) { e.Method = "PATCH" },
		"undeclared status": func(e *exchange) { e.Status = 201 },
		"undeclared query":  func(e *exchange) { e.RawQuery = "wait=1" },
		"bad boolean":       func(e *exchange) { e.RawQuery = "peek=yes" },
		"bad integer":       func(e *exchange) { e.RawQuery = "timeout=-1" },
		"bad base64 query":  func(e *exchange) { e.RawQuery = "topic=%21" },
		"snake_case field":  func(e *exchange) { e.RespBody = []byte(strings.Replace(okMsg, "srcIp", "src_ip", 1)) },
		"payload not base64": func(e *exchange) {
			e.RespBody = []byte(strings.Replace(okMsg, `"payload":"aGk="`, `"payload":"hi!"`, 1))
		},
		"short pk":           func(e *exchange) { e.RespBody = []byte(strings.Replace(okMsg, strings.Repeat("ab", 32), "ab", 1)) },
		"bad ipv6":           func(e *exchange) { e.RespBody = []byte(strings.Replace(okMsg, "449::1", "10.0.0.1", 1)) },
		"wrong content type": func(e *exchange) { e.RespType = "text/plain" },
		"body on 204":        func(e *exchange) { e.Status = 204 },
		"request body":       func(e *exchange) { e.ReqBody = []byte("{}"); e.ReqType = "application/json" },
	} {
		e := good
		mutate(&e)
		if _, errs := s.check(e); len(errs) == 0 {
			t.Errorf("%s: not caught (%s)", name, e)
		}
	}
	dst := exchange{Method: "POST", Path: "/api/v1/messages", ReqType: "application/json", Status: 201,
		RespType: "application/json", RespBody: []byte(`{"id":"0123456789abcdef"}`)}
	for body, ok := range map[string]bool{
		`{"dst":{"pk":"` + strings.Repeat("ab", 32) + `"},"payload":""}`:                           true,
		`{"dst":{"ip":"449::1"},"topic":"aGk=","payload":"aGk="}`:                                  true,
		`{"dst":{"ip":"449::1","pk":"` + strings.Repeat("ab", 32) + `"},"payload":""}`:             false,
		`{"dst":{"publicKey":"` + strings.Repeat("ab", 32) + `"},"payload":""}`:                    false,
		`{"dst":{"ip":"449::1"},"payload":"", "reply_timeout": 3}`:                                 false,
		`{"destination":{"ip":"449::1"},"payload":""}`:                                             false,
		`{"dst":{"ip":"449::1"},"topic":"a b","payload":""}`:                                       false,
		`{"dst":{"ip":"449::1"},"topic":"` + strings.Repeat("A", 344) + `","payload":""}`:          false,
		`{"dst":{"pk":"` + strings.Repeat("ab", 33) + `"},"payload":""}`:                           false,
		`{"dst":{"ip":"449::1"},"payload":"aGk="}` + "\n" + `{"dst":{"ip":"449::1"},"payload":""}`: false,
	} {
		e := dst
		e.ReqBody = []byte(body)
		if _, errs := s.check(e); (len(errs) == 0) != ok {
			t.Errorf("push body %s: ok=%v, errors %v", body, ok, errs)
		}
	}
}

// TestEmulatorConformsToSpec drives every implemented operation through the
// mycelium client against the emulator, records each exchange and checks it
// against api.yaml.
func TestEmulatorConformsToSpec(t *testing.T) {
	t.Parallel()
	s := mustSpec(t)
	netw := myceliumemu.NewForTest(t, "a", "b")
	rec := &recorder{next: http.DefaultTransport}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &conformance{t: t, ctx: ctx, a: netw.Node("a"), b: netw.Node("b"), hc: &http.Client{Transport: rec},
		topic:    []byte("hero.conformance."),
		binTopic: []byte{0xfb, 0xff, 0xbf, 'x'}, // base64 "+/+/eA==": escaping in query and path
	}
	c.ca, c.cb = c.client(c.a), c.client(c.b)

	c.admin()
	c.pushPopStatus()
	c.replies()
	c.topicConfiguration()
	c.topicBadRequests()
	checkExchanges(t, s, rec)
}

// conformance drives the emulator's operations through the mycelium client from
// node a (ca) to node b (cb), over hc, whose exchanges are recorded.
type conformance struct {
	t        *testing.T
	ctx      context.Context
	a, b     *myceliumemu.Node
	ca, cb   *mycelium.Client
	hc       *http.Client
	topic    []byte
	binTopic []byte
}

func (c *conformance) client(nd *myceliumemu.Node) *mycelium.Client {
	cl, err := mycelium.New(mycelium.Config{BaseURL: nd.URL(), HTTPClient: c.hc})
	if err != nil {
		c.t.Fatal(err)
	}
	return cl
}

func (c *conformance) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

// admin: the node's info, and the public key of an IP (known and unknown).
func (c *conformance) admin() {
	info, err := c.ca.Info(c.ctx)
	c.must(err)
	if info.NodePubkey != c.a.PK() || info.NodeIP != c.a.IP().String() || info.NodeSubnet != c.a.Subnet().String() {
		c.t.Fatalf("info %+v", info)
	}
	pk, err := c.ca.PublicKeyFromIP(c.ctx, c.b.IP().String())
	c.must(err)
	if pk != c.b.PK() {
		c.t.Fatalf("pubkey %s", pk)
	}
	if _, err := c.ca.PublicKeyFromIP(c.ctx, "2001:db8::1"); !errors.Is(err, mycelium.ErrNotFound) {
		c.t.Fatalf("unknown ip: %v", err)
	}
}

// pushPopStatus: push, peek, pop, empty pop, status; then a push by IP, with a
// topic that needs escaping, popped with that topic.
func (c *conformance) pushPopStatus() {
	res, err := c.ca.Push(c.ctx, mycelium.ToPK(c.b.PK()), c.topic, []byte("one"), nil)
	c.must(err)
	st, err := c.ca.Status(c.ctx, res.ID)
	c.must(err)
	if st.State.Name != mycelium.StateReceived || st.Dst != c.b.IP().String() || st.MsgLen != 3 {
		c.t.Fatalf("status %+v", st)
	}
	if m, err := c.cb.Pop(c.ctx, c.topic, 0, true); err != nil || m == nil || m.ID != res.ID {
		c.t.Fatalf("peek %v %v", m, err)
	}
	if m, err := c.cb.Pop(c.ctx, c.topic, 0, false); err != nil || m == nil || string(m.Payload) != "one" {
		c.t.Fatalf("pop %v %v", m, err)
	}
	if m, err := c.cb.Pop(c.ctx, c.topic, 0, false); m != nil || err != nil {
		c.t.Fatalf("empty pop %v %v", m, err)
	}
	if m, err := c.cb.Pop(c.ctx, nil, 0, false); m != nil || err != nil {
		c.t.Fatalf("empty pop without topic %v %v", m, err)
	}
	if st, err := c.ca.Status(c.ctx, res.ID); err != nil || st.State.Name != mycelium.StateRead {
		c.t.Fatalf("status after pop %+v %v", st, err)
	}
	if _, err := c.ca.Status(c.ctx, "ffffffffffffffff"); !errors.Is(err, mycelium.ErrNotFound) {
		c.t.Fatalf("unknown status: %v", err)
	}

	// Push by IP, with a topic that needs escaping; pop with that topic.
	_, err = c.ca.Push(c.ctx, mycelium.ToIP(c.b.IP().String()), c.binTopic, []byte{}, nil)
	c.must(err)
	if m, err := c.cb.Pop(c.ctx, c.binTopic, time.Second, false); err != nil || m == nil || string(m.Topic) != string(c.binTopic) {
		c.t.Fatalf("binary topic pop %v %v", m, err)
	}

}

// replies: a push waiting for a reply (200), the reply (204), and a reply timeout
// (408).
func (c *conformance) replies() {
	type result struct {
		res *mycelium.PushResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		d := time.Minute
		r, err := c.ca.Push(c.ctx, mycelium.ToPK(c.b.PK()), c.topic, []byte("ping"), &d)
		done <- result{r, err}
	}()
	m, err := c.cb.Pop(c.ctx, c.topic, time.Minute, false)
	c.must(err)
	if m == nil {
		c.t.Fatal("request not received")
	}
	c.must(c.cb.ReplyTo(c.ctx, m, []byte("pong")))
	r := <-done
	c.must(r.err)
	if r.res.Reply == nil || string(r.res.Reply.Payload) != "pong" || r.res.ID != m.ID {
		c.t.Fatalf("reply %+v", r.res)
	}
	zero := time.Duration(0)
	if res, err := c.ca.Push(c.ctx, mycelium.ToPK(c.b.PK()), c.topic, []byte("nobody answers"), &zero); !errors.Is(err, mycelium.ErrReplyTimeout) || res.ID == "" {
		c.t.Fatalf("408: %+v %v", res, err)
	}
}

// topicConfiguration: the default action, topics, their sources and forward socket.
func (c *conformance) topicConfiguration() {
	if acc, err := c.cb.DefaultTopicAction(c.ctx); err != nil || !acc {
		c.t.Fatalf("default action %v %v", acc, err)
	}
	c.must(c.cb.SetDefaultTopicAction(c.ctx, false))
	c.must(c.cb.SetDefaultTopicAction(c.ctx, true))
	if ts, err := c.cb.Topics(c.ctx); err != nil || len(ts) != 0 {
		c.t.Fatalf("topics %q %v", ts, err)
	}
	c.must(c.cb.AddTopic(c.ctx, c.binTopic))
	c.must(c.cb.AddTopicSource(c.ctx, c.binTopic, c.a.Subnet().String()))
	if src, err := c.cb.TopicSources(c.ctx, c.binTopic); err != nil || len(src) != 1 || src[0] != c.a.Subnet().String() {
		c.t.Fatalf("sources %v %v", src, err)
	}
	if ts, err := c.cb.Topics(c.ctx); err != nil || len(ts) != 1 || string(ts[0]) != string(c.binTopic) {
		c.t.Fatalf("topics %q %v", ts, err)
	}
	c.must(c.cb.RemoveTopicSource(c.ctx, c.binTopic, c.a.Subnet().String()))
	c.must(c.cb.SetTopicForwardSocket(c.ctx, c.binTopic, "/run/hero/topic.sock"))
	if p, err := c.cb.TopicForwardSocket(c.ctx, c.binTopic); err != nil || p != "/run/hero/topic.sock" {
		c.t.Fatalf("forward %q %v", p, err)
	}
	c.must(c.cb.RemoveTopicForwardSocket(c.ctx, c.binTopic))
	if p, err := c.cb.TopicForwardSocket(c.ctx, c.binTopic); err != nil || p != "" {
		c.t.Fatalf("forward after removal %q %v", p, err)
	}
	c.must(c.cb.RemoveTopic(c.ctx, c.binTopic))
}

// topicBadRequests: the declared 400s of the topic operations: a topic that is not
// base64.
func (c *conformance) topicBadRequests() {
	for _, req := range []struct{ method, path, body string }{
		{"DELETE", "/api/v1/messages/topics/%21%21", ""},
		{"GET", "/api/v1/messages/topics/%21%21/sources", ""},
		{"POST", "/api/v1/messages/topics/aGk=/sources", `{"subnet":"not a subnet"}`},
		{"DELETE", "/api/v1/messages/topics/aGk=/sources/nope", ""},
		{"GET", "/api/v1/messages/topics/%21%21/forward", ""},
		{"PUT", "/api/v1/messages/topics/%21%21/forward", `{"socket_path":"/x"}`},
		{"DELETE", "/api/v1/messages/topics/%21%21/forward", ""},
	} {
		httpReq, _ := http.NewRequestWithContext(c.ctx, req.method, c.b.URL()+req.path, strings.NewReader(req.body))
		if req.body != "" {
			httpReq.Header.Set("Content-Type", "application/json")
		}
		httpReq.Header.Set(negativeHeader, "1")
		resp, err := c.hc.Do(httpReq)
		c.must(err)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			c.t.Errorf("%s %s: %d, want 400", req.method, req.path, resp.StatusCode)
		}
	}
}

// checkExchanges checks every recorded exchange against the spec, and that every
// operation's outcomes listed were exercised.
func checkExchanges(t *testing.T, s *apiSpec, rec *recorder) {
	covered := map[string]bool{}
	for _, e := range rec.exchanges() {
		op, errs := s.check(e)
		for _, msg := range errs {
			t.Errorf("%s: %s", e, msg)
		}
		covered[op+" "+http.StatusText(e.Status)] = true
	}
	want := []string{
		"getInfo OK", "getPublicKeyFromIp OK", "getPublicKeyFromIp Not Found",
		"pushMessage Created", "pushMessage OK", "pushMessage Request Timeout",
		"popMessage OK", "popMessage No Content",
		"pushMessageReply No Content",
		"getMessageInfo OK", "getMessageInfo Not Found",
		"getDefaultTopicAction OK", "setDefaultTopicAction No Content",
		"getTopics OK", "addTopic Created", "removeTopic No Content", "removeTopic Bad Request",
		"getTopicSources OK", "getTopicSources Bad Request",
		"addTopicSource No Content", "addTopicSource Bad Request",
		"removeTopicSource No Content", "removeTopicSource Bad Request",
		"getTopicForwardSocket OK", "getTopicForwardSocket Bad Request",
		"setTopicForwardSocket No Content", "setTopicForwardSocket Bad Request",
		"removeTopicForwardSocket No Content", "removeTopicForwardSocket Bad Request",
	}
	var missing []string
	for _, w := range want {
		if !covered[w] {
			missing = append(missing, w)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("not exercised: %v", missing)
	}
	t.Logf("%d exchanges checked against %s", len(rec.exchanges()), specPath)
}
