package mycelium

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	pkA = "bb39b4a3a4efd70f3e05e37887677e02efbda14681d0acd3882bc0f754792c32"
	pkB = "02468ace13579bdf02468ace13579bdf02468ace13579bdf02468ace13579bdf"
	ipA = "449:abcd:123:defa::1"
	ipB = "54f:b680:ba6e:7ced::1"
	mid = "0123456789abcdef"
)

// seen is one request as the stub server received it.
type seen struct {
	Method, Path, RawQuery, ContentType string
	Body                                []byte
}

// stub starts a server answering every request with h and recording it.
func stub(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) (*Client, *[]seen) {
	t.Helper()
	var got []seen
	var mu sync.Mutex // the handler runs on the server's goroutine
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Content-Type"), b})
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	return c, &got
}

func reply(status int, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// jsonKeys decodes a JSON object and returns it as a map.
func jsonObj(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", b, err)
	}
	return m
}

func keys(m map[string]any) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

func one(t *testing.T, got *[]seen) seen {
	t.Helper()
	if len(*got) != 1 {
		t.Fatalf("want 1 request, got %d", len(*got))
	}
	return (*got)[0]
}

func TestPushByPKWithTopic(t *testing.T) {
	c, got := stub(t, reply(201, `{"id":"`+mid+`"}`))
	topic := []byte("hero.runner.7.")
	payload := []byte{0xc6, 0xe5, 0x7e, 0x00, 0xff}
	res, err := c.Push(context.Background(), ToPK(pkB), topic, payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != mid || res.Reply != nil {
		t.Fatalf("result %+v", res)
	}
	r := one(t, got)
	if r.Method != "POST" || r.Path != "/api/v1/messages" || r.RawQuery != "" || r.ContentType != "application/json" {
		t.Fatalf("request %+v", r)
	}
	body := jsonObj(t, r.Body)
	if k := keys(body); !reflect.DeepEqual(k, []string{"dst", "payload", "topic"}) {
		t.Fatalf("body keys %v", k)
	}
	if !reflect.DeepEqual(body["dst"], map[string]any{"pk": pkB}) {
		t.Fatalf("dst %v", body["dst"])
	}
	if body["topic"] != base64.StdEncoding.EncodeToString(topic) || body["payload"] != "xuV+AP8=" {
		t.Fatalf("topic/payload %v %v", body["topic"], body["payload"])
	}
}

func TestPushByIPWithoutTopic(t *testing.T) {
	c, got := stub(t, reply(201, `{"id":"`+mid+`"}`))
	if _, err := c.Push(context.Background(), ToIP(ipB), nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	body := jsonObj(t, one(t, got).Body)
	if k := keys(body); !reflect.DeepEqual(k, []string{"dst", "payload"}) {
		t.Fatalf("body keys %v (topic must be omitted when empty)", k)
	}
	if !reflect.DeepEqual(body["dst"], map[string]any{"ip": ipB}) || body["payload"] != "" {
		t.Fatalf("body %v", body)
	}
}

func TestPushValidatesBeforeSending(t *testing.T) {
	c, got := stub(t, reply(201, `{"id":"`+mid+`"}`))
	ctx := context.Background()
	for _, dst := range []Destination{{}, {PK: pkA, IP: ipA}, {PK: "abc"}, {IP: "10.0.0.1"}, {IP: "nope"}} {
		if _, err := c.Push(ctx, dst, nil, []byte("x"), nil); err == nil {
			t.Errorf("dst %+v accepted", dst)
		}
	}
	if _, err := c.Push(ctx, ToPK(pkA), make([]byte, MaxTopicLen+1), nil, nil); err == nil {
		t.Error("oversized topic accepted")
	}
	if len(*got) != 0 {
		t.Fatalf("%d requests sent", len(*got))
	}
}

func TestPushAwaitReply(t *testing.T) {
	in := `{"id":"` + mid + `","srcIp":"` + ipB + `","srcPk":"` + pkB + `","dstIp":"` + ipA + `","dstPk":"` + pkA + `","payload":"cG9uZw=="}`
	c, got := stub(t, reply(200, in))
	d := 1500 * time.Millisecond
	res, err := c.Push(context.Background(), ToPK(pkB), []byte("t"), []byte("ping"), &d)
	if err != nil {
		t.Fatal(err)
	}
	if r := one(t, got); r.RawQuery != "reply_timeout=2" {
		t.Fatalf("query %q, want reply_timeout=2 (seconds, rounded up)", r.RawQuery)
	}
	want := &InboundMessage{ID: mid, SrcIP: ipB, SrcPK: pkB, DstIP: ipA, DstPK: pkA, Payload: []byte("pong")}
	if res.ID != mid || !reflect.DeepEqual(res.Reply, want) {
		t.Fatalf("result %+v reply %+v", res, res.Reply)
	}
}

func TestPushReplyTimeout408(t *testing.T) {
	c, got := stub(t, reply(408, `{"id":"`+mid+`"}`))
	var zero time.Duration
	res, err := c.Push(context.Background(), ToPK(pkB), nil, []byte("x"), &zero)
	if !errors.Is(err, ErrReplyTimeout) {
		t.Fatalf("err %v, want ErrReplyTimeout", err)
	}
	if res == nil || res.ID != mid {
		t.Fatalf("result %+v must carry the id", res)
	}
	if r := one(t, got); r.RawQuery != "reply_timeout=0" {
		t.Fatalf("query %q", r.RawQuery)
	}
}

func TestPushErrorNamesEndpointStatusAndBody(t *testing.T) {
	c, _ := stub(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "topic too large, topic is limited to 255 bytes", 400)
	})
	_, err := c.Push(context.Background(), ToPK(pkB), nil, []byte("x"), nil)
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err %T %v", err, err)
	}
	if ae.Op != "pushMessage" || ae.Method != "POST" || ae.Path != "/api/v1/messages" || ae.StatusCode != 400 ||
		ae.Message != "topic too large, topic is limited to 255 bytes" {
		t.Fatalf("%+v", ae)
	}
	for _, s := range []string{"pushMessage", "POST /api/v1/messages", "400 Bad Request", "topic too large"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	// A 2xx the operation does not define is an error too.
	c2, _ := stub(t, reply(204, ""))
	if _, err := c2.Push(context.Background(), ToPK(pkB), nil, nil, nil); !errors.As(err, &ae) || ae.StatusCode != 204 {
		t.Fatalf("204 on push: %v", err)
	}
}

func TestPopQueryAndDecode(t *testing.T) {
	in := `{"id":"` + mid + `","srcIp":"` + ipB + `","srcPk":"` + pkB + `","dstIp":"` + ipA + `","dstPk":"` + pkA +
		`","topic":"+/8=","payload":"aGVsbG8="}`
	c, got := stub(t, reply(200, in))
	topic := []byte{0xfb, 0xff} // base64 "+/8=": every character needs escaping in a query
	m, err := c.Pop(context.Background(), topic, 2500*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	r := one(t, got)
	if r.Method != "GET" || r.Path != "/api/v1/messages" || r.Body != nil && len(r.Body) != 0 {
		t.Fatalf("request %+v", r)
	}
	if r.RawQuery != "peek=false&timeout=3&topic=%2B%2F8%3D" {
		t.Fatalf("query %q", r.RawQuery)
	}
	want := &InboundMessage{ID: mid, SrcIP: ipB, SrcPK: pkB, DstIP: ipA, DstPK: pkA, Topic: topic, Payload: []byte("hello")}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %+v", m)
	}
}

func TestPopNoContentAndPeek(t *testing.T) {
	c, got := stub(t, reply(204, ""))
	m, err := c.Pop(context.Background(), nil, 0, true)
	if m != nil || err != nil {
		t.Fatalf("204: %v %v", m, err)
	}
	if r := one(t, got); r.RawQuery != "peek=true&timeout=0" {
		t.Fatalf("query %q (no topic param without a topic)", r.RawQuery)
	}
	c2, _ := stub(t, reply(500, "boom"))
	if _, err := c2.Pop(context.Background(), nil, 0, false); err == nil || !strings.Contains(err.Error(), "popMessage") {
		t.Fatalf("500: %v", err)
	}
}

func TestLongPollOutlivesShortClientTimeout(t *testing.T) {
	// The node holds a long poll for up to `timeout` seconds; the client's
	// own 50ms Timeout must not cut it off.
	hold := 300 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(hold): // the node's long poll
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(204)
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL, HTTPClient: &http.Client{Timeout: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := c.Pop(context.Background(), nil, time.Second, false); m != nil || err != nil {
		t.Fatalf("long poll: %v %v", m, err)
	}
	// An ordinary request keeps the short bound.
	if _, err := c.Info(context.Background()); err == nil {
		t.Fatal("info outlived the client timeout")
	}
}

// A pop cancelled just as the node answers it must end only that pop. Go's HTTP
// client puts the connection of an answer without a body (a 204: nothing came) back
// into its pool before it hands the answer over, and a call cancelled in that moment
// closes the connection, which another call may have taken already: that call
// failed with "context canceled" though nothing cancelled it (the gateway's
// readiness check, whose call cancels the gateway's long poll to go first). A long
// poll has a connection of its own, so no call beside it fails, a push neither; a
// call that only reads is sent again when a cancelled pop with timeout 0 (pooled)
// failed it.
func TestCancelledPopNeverFailsAnotherCall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		push    bool // pushes beside the pops must not fail either
	}{
		{"long poll", time.Second, true},
		{"timeout 0", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answering := make(chan struct{}, 1)
			c, _ := stub(t, func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPost:
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, `{"id":"`+mid+`"}`)
				case r.URL.Path == "/api/v1/messages":
					select {
					case answering <- struct{}{}:
					default:
					}
					w.WriteHeader(http.StatusNoContent)
				default:
					io.WriteString(w, `{"nodeSubnet":"54f:b680:ba6e:7ced::/64","nodePubkey":"`+pkB+`"}`)
				}
			})
			failed := make(chan error, 6) // three of each call beside the pops
			beside := []func() error{func() error { _, err := c.Info(context.Background()); return err }}
			if tc.push {
				beside = append(beside, func() error {
					_, err := c.Push(context.Background(), ToPK(pkA), []byte("t"), []byte("p"), nil)
					return err
				})
			}
			polled := make(chan struct{})
			var wg sync.WaitGroup
			for _, call := range slices.Repeat(beside, 3) { // three of each: one is always waiting for a connection
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-polled:
							return
						default:
						}
						if err := call(); err != nil {
							failed <- err
							return
						}
					}
				}()
			}
			for i := range 1000 {
				if len(failed) > 0 {
					break
				}
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					select {
					case <-answering: // cancel the pop around the moment its answer arrives
						time.AfterFunc(time.Duration(i%50)*4*time.Microsecond, cancel)
					case <-ctx.Done():
					}
				}()
				_, _ = c.Pop(ctx, nil, tc.timeout, true)
				cancel()
			}
			close(polled)
			wg.Wait()
			close(failed)
			for err := range failed {
				t.Errorf("a call beside the cancelled pops failed: %v", err)
			}
		})
	}
}

func TestRequestTimeoutBoundsOrdinaryCalls(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, _ := New(Config{BaseURL: srv.URL, RequestTimeout: 50 * time.Millisecond})
	_, err := c.Status(context.Background(), mid)
	var re *RequestError
	if !errors.As(err, &re) || re.Op != "getMessageInfo" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %T %v", err, err)
	}
}

func TestReply(t *testing.T) {
	c, got := stub(t, reply(204, ""))
	m := &InboundMessage{ID: mid, SrcPK: pkB, SrcIP: ipB}
	if err := c.ReplyTo(context.Background(), m, []byte("done")); err != nil {
		t.Fatal(err)
	}
	r := one(t, got)
	if r.Method != "POST" || r.Path != "/api/v1/messages/reply/"+mid || r.ContentType != "application/json" {
		t.Fatalf("request %+v", r)
	}
	body := jsonObj(t, r.Body)
	if !reflect.DeepEqual(body, map[string]any{"dst": map[string]any{"pk": pkB}, "payload": "ZG9uZQ=="}) {
		t.Fatalf("body %v", body)
	}
	if err := c.Reply(context.Background(), "xyz", ToPK(pkB), nil); err == nil {
		t.Fatal("bad id accepted")
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		state string
		want  TransmissionState
	}{
		{`"received"`, TransmissionState{Name: StateReceived}},
		{`{"sending":{"pending":5,"sent":17,"acked":3}}`, TransmissionState{Name: StateSending, Pending: 5, Sent: 17, Acked: 3}},
	} {
		c, got := stub(t, reply(200, `{"dst":"`+ipB+`","state":`+tc.state+`,"created":1649512789,"deadline":1649513089,"msgLen":27}`))
		st, err := c.Status(context.Background(), mid)
		if err != nil {
			t.Fatal(err)
		}
		want := &MessageStatus{Dst: ipB, State: tc.want, Created: 1649512789, Deadline: 1649513089, MsgLen: 27}
		if !reflect.DeepEqual(st, want) {
			t.Fatalf("got %+v", st)
		}
		if r := one(t, got); r.Method != "GET" || r.Path != "/api/v1/messages/status/"+mid {
			t.Fatalf("request %+v", r)
		}
		b, _ := json.Marshal(st.State)
		if string(b) != tc.state {
			t.Fatalf("state round trip %s != %s", b, tc.state)
		}
	}
	c, _ := stub(t, reply(404, ""))
	_, err := c.Status(context.Background(), mid)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "GET /api/v1/messages/status/"+mid+"): 404 Not Found") {
		t.Fatalf("404: %v", err)
	}
}

func TestInfoAndPublicKey(t *testing.T) {
	c, got := stub(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1/admin":
			io.WriteString(w, `{"nodeSubnet":"54f:b680:ba6e:7ced::/64","nodeIp":"54f:b680:ba6e:7ced::1","nodePubkey":"`+pkB+`","nodeStartTime":1716100000}`)
		case "/api/v1/pubkey/" + ipA:
			io.WriteString(w, `{"NodePubKey":"`+pkA+`"}`)
		case "/api/v1/pubkey/" + ipB:
			io.WriteString(w, `{"publicKey":"`+pkB+`"}`)
		default:
			w.WriteHeader(404)
		}
	})
	ctx := context.Background()
	in, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if *in != (Info{"54f:b680:ba6e:7ced::/64", "54f:b680:ba6e:7ced::1", pkB, 1716100000}) {
		t.Fatalf("info %+v", in)
	}
	if pk, err := c.PublicKeyFromIP(ctx, ipA); err != nil || pk != pkA {
		t.Fatalf("spec field: %q %v", pk, err)
	}
	if pk, err := c.PublicKeyFromIP(ctx, ipB); err != nil || pk != pkB {
		t.Fatalf("implementation field: %q %v", pk, err)
	}
	if _, err := c.PublicKeyFromIP(ctx, "5fd::1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown ip: %v", err)
	}
	if (*got)[0].Method != "GET" {
		t.Fatal((*got)[0])
	}
}

func TestTopicEndpoints(t *testing.T) {
	topic := []byte{0xfb, 0xff, 0x01} // base64 "+/8B": '/' must travel as %2F in a path
	const enc = "%2B%2F8B"            // url.PathEscape leaves '+' alone; either form decodes the same
	type call struct {
		method, path, body string
		status             int
		resp               string
	}
	var script []call
	c, got := stub(t, func(w http.ResponseWriter, r *http.Request) {
		if len(script) == 0 {
			t.Fatalf("unexpected request %s %s", r.Method, r.URL)
		}
		reply(script[0].status, script[0].resp)(w, r)
		script = script[1:]
	})
	ctx := context.Background()
	steps := []struct {
		call
		run func() error
	}{
		{call{"GET", "/api/v1/messages/topics/default", "", 200, `{"accept":false}`}, func() error {
			a, err := c.DefaultTopicAction(ctx)
			if err == nil && a {
				t.Error("accept")
			}
			return err
		}},
		{call{"PUT", "/api/v1/messages/topics/default", `{"accept":true}`, 204, ""}, func() error {
			return c.SetDefaultTopicAction(ctx, true)
		}},
		{call{"GET", "/api/v1/messages/topics", "", 200, `["+/8B","aGVyby4="]`}, func() error {
			ts, err := c.Topics(ctx)
			if err == nil && !reflect.DeepEqual(ts, [][]byte{topic, []byte("hero.")}) {
				t.Errorf("topics %q", ts)
			}
			return err
		}},
		{call{"POST", "/api/v1/messages/topics", `"+/8B"`, 201, ""}, func() error { return c.AddTopic(ctx, topic) }},
		{call{"DELETE", "/api/v1/messages/topics/" + enc, "", 204, ""}, func() error { return c.RemoveTopic(ctx, topic) }},
		{call{"GET", "/api/v1/messages/topics/" + enc + "/sources", "", 200, `["503:5478:df06:d79a::/64"]`}, func() error {
			s, err := c.TopicSources(ctx, topic)
			if err == nil && !reflect.DeepEqual(s, []string{"503:5478:df06:d79a::/64"}) {
				t.Errorf("sources %v", s)
			}
			return err
		}},
		{call{"POST", "/api/v1/messages/topics/" + enc + "/sources", `{"subnet":"503:5478:df06:d79a::/64"}`, 204, ""}, func() error {
			return c.AddTopicSource(ctx, topic, "503:5478:df06:d79a::/64")
		}},
		{call{"DELETE", "/api/v1/messages/topics/" + enc + "/sources/503:5478:df06:d79a::%2F64", "", 204, ""}, func() error {
			return c.RemoveTopicSource(ctx, topic, "503:5478:df06:d79a::/64")
		}},
		{call{"GET", "/api/v1/messages/topics/" + enc + "/forward", "", 200, `null`}, func() error {
			p, err := c.TopicForwardSocket(ctx, topic)
			if err == nil && p != "" {
				t.Errorf("socket %q", p)
			}
			return err
		}},
		{call{"GET", "/api/v1/messages/topics/" + enc + "/forward", "", 200, `"/run/x.sock"`}, func() error {
			p, err := c.TopicForwardSocket(ctx, topic)
			if err == nil && p != "/run/x.sock" {
				t.Errorf("socket %q", p)
			}
			return err
		}},
		{call{"PUT", "/api/v1/messages/topics/" + enc + "/forward", `{"socket_path":"/run/x.sock"}`, 204, ""}, func() error {
			return c.SetTopicForwardSocket(ctx, topic, "/run/x.sock")
		}},
		{call{"DELETE", "/api/v1/messages/topics/" + enc + "/forward", "", 204, ""}, func() error {
			return c.RemoveTopicForwardSocket(ctx, topic)
		}},
	}
	for i, s := range steps {
		script = append(script, s.call)
		if err := s.run(); err != nil {
			t.Fatalf("step %d (%s %s): %v", i, s.method, s.path, err)
		}
		r := (*got)[i]
		// url.PathEscape keeps '+' literal; normalise before comparing.
		path := strings.ReplaceAll(r.Path, "+", "%2B")
		if r.Method != s.method || path != s.path || string(r.Body) != s.body {
			t.Fatalf("step %d: got %s %s %q, want %s %s %q", i, r.Method, r.Path, r.Body, s.method, s.path, s.body)
		}
	}
	// A status the operation does not define is an APIError naming it.
	script = append(script, call{status: 400})
	err := c.AddTopicSource(ctx, topic, "bogus")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Op != "addTopicSource" || ae.StatusCode != 400 {
		t.Fatalf("err %v", err)
	}
	if err := c.RemoveTopic(ctx, nil); err == nil {
		t.Fatal("empty topic accepted")
	}
}

func TestTransportErrorNamesEndpoint(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, _ := New(Config{BaseURL: url})
	_, err := c.Pop(context.Background(), []byte("t"), 0, false)
	var re *RequestError
	if !errors.As(err, &re) || re.Op != "popMessage" || !strings.Contains(err.Error(), "GET /api/v1/messages") {
		t.Fatalf("err %T %v", err, err)
	}
}

func TestConfigAndBaseURL(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		port int
		want string
	}{
		{"", 0, "http://127.0.0.1:8989"},
		{"127.0.0.1", 8990, "http://127.0.0.1:8990"},
		{"::1", 8989, "http://[::1]:8989"},
		{"[5fd:7636:b80:9ad0::1]", 1, "http://[5fd:7636:b80:9ad0::1]:1"},
		{"mycelium", 8989, "http://mycelium:8989"},
	} {
		got, err := BaseURLFromIPPort(tc.ip, tc.port)
		if err != nil || got != tc.want {
			t.Errorf("%q %d: %q %v", tc.ip, tc.port, got, err)
		}
	}
	if _, err := BaseURLFromIPPort("x", 70000); err == nil {
		t.Error("port out of range accepted")
	}
	c, err := New(Config{})
	if err != nil || c.BaseURL() != DefaultBaseURL {
		t.Fatalf("default: %v %v", c, err)
	}
	c, err = New(Config{BaseURL: "http://h:1/prefix/"})
	if err != nil || c.url([]string{"api", "v1"}).String() != "http://h:1/prefix/api/v1" {
		t.Fatalf("prefix: %v", err)
	}
	for _, bad := range []string{"ftp://h", "h:8989", "http://h/?x=1", "://"} {
		if _, err := New(Config{BaseURL: bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestDestinationJSON(t *testing.T) {
	var d Destination
	if err := json.Unmarshal([]byte(`{"ip":"`+ipA+`"}`), &d); err != nil || d != ToIP(ipA) {
		t.Fatalf("%+v %v", d, err)
	}
	if err := json.Unmarshal([]byte(`{"pk":"`+pkA+`","ip":"`+ipA+`"}`), &d); err == nil {
		t.Fatal("both accepted")
	}
	if d.String() == "" || ToPK(pkA).String() != "pk:"+pkA {
		t.Fatal(d.String())
	}
	var st TransmissionState
	if err := json.Unmarshal([]byte(`{"other":{}}`), &st); err == nil {
		t.Fatal("unknown state object accepted")
	}
	if !(TransmissionState{Name: StateRead}).Final() || (TransmissionState{Name: StatePending}).Final() {
		t.Fatal("Final")
	}
}

// A 200 whose whole body is not JSON is ErrNotJSON (not a connection failure); 400,
// 413, 415 and 422 are permanent, a 503 or a dead node is not.
func TestNotJSONAndPermanent(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte("<html>bad gateway</html>"))
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Pop(ctx, nil, 0, true); !errors.Is(err, ErrNotJSON) || errors.Is(err, ErrMalformed) {
		t.Fatalf("pop of a non-JSON 200: %v", err)
	}
	dst := ToPK(strings.Repeat("ab", 32))
	for code, want := range map[int]bool{400: true, 413: true, 415: true, 422: true, 404: false, 500: false, 503: false} {
		status.Store(int32(code))
		_, err := c.Push(ctx, dst, []byte("t"), []byte("x"), nil)
		if err == nil || Permanent(err) != want {
			t.Errorf("push answered %d: %v, permanent %v, want %v", code, err, Permanent(err), want)
		}
	}
	if _, err := c.Push(ctx, dst, []byte("t"), make([]byte, MaxRequestBody), nil); !errors.Is(err, ErrTooLarge) || !Permanent(err) {
		t.Fatalf("a push over the node's limit: %v", err)
	}
	srv.Close()
	if _, err := c.Push(ctx, dst, []byte("t"), []byte("x"), nil); err == nil || Permanent(err) {
		t.Fatalf("a dead node: %v", err)
	}
}
