package myceliumemu

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"time"
)

// The HTTP API of a node: the subset of api.yaml (testdata/api.yaml) that the
// coordinator uses. Statuses, field names and encodings follow the spec.
// Where the spec is silent (malformed requests), the emulator answers the way
// the node's HTTP framework does: 400 for an unreadable query, path or JSON
// document, 415 for a body that is not application/json, 422 for JSON of the
// wrong shape (missing or unknown fields, bad keys or base64), with a
// text/plain explanation. It is stricter than a node in one respect: unknown
// JSON fields are refused, to catch client typos.
//
// Like a v0.7.10 node, every call locks the node (nodeLock): popMessage holds the
// lock for the whole of its long poll, so other calls wait for it.

// MaxBodyBytes is the largest request body a v0.7.10 node reads: axum's default
// body limit (2 MiB). A larger body is refused with 413 Payload Too Large.
const MaxBodyBytes = 2 << 20

// MaxTopicLen is the longest topic a node pushes: a longer one gets 400 with an
// empty body.
const MaxTopicLen = 255

var b64 = base64.StdEncoding.Strict()

func (nd *Node) handler() http.Handler {
	mux := http.NewServeMux()
	// locked: the handler runs under the node's lock (taken once the request is
	// read, released when it has answered).
	locked := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !nd.lock.acquire(r.Context().Done()) {
				return // the client went away while waiting
			}
			defer nd.lock.release()
			h(w, r)
		}
	}
	mux.HandleFunc("GET /api/v1/admin", locked(nd.getInfo))
	mux.HandleFunc("GET /api/v1/pubkey/{mycelium_ip}", locked(nd.getPublicKeyFromIP))
	mux.HandleFunc("GET /api/v1/messages", nd.popMessage)   // locks while it polls
	mux.HandleFunc("POST /api/v1/messages", nd.pushMessage) // locks to push, not while awaiting a reply
	mux.HandleFunc("POST /api/v1/messages/reply/{id}", locked(nd.pushMessageReply))
	mux.HandleFunc("GET /api/v1/messages/status/{id}", locked(nd.getMessageInfo))
	mux.HandleFunc("GET /api/v1/messages/topics/default", locked(nd.getDefaultTopicAction))
	mux.HandleFunc("PUT /api/v1/messages/topics/default", locked(nd.setDefaultTopicAction))
	mux.HandleFunc("GET /api/v1/messages/topics", locked(nd.getTopics))
	mux.HandleFunc("POST /api/v1/messages/topics", locked(nd.addTopic))
	mux.HandleFunc("DELETE /api/v1/messages/topics/{topic}", locked(nd.removeTopic))
	mux.HandleFunc("GET /api/v1/messages/topics/{topic}/sources", locked(nd.getTopicSources))
	mux.HandleFunc("POST /api/v1/messages/topics/{topic}/sources", locked(nd.addTopicSource))
	mux.HandleFunc("DELETE /api/v1/messages/topics/{topic}/sources/{subnet}", locked(nd.removeTopicSource))
	mux.HandleFunc("GET /api/v1/messages/topics/{topic}/forward", locked(nd.getTopicForwardSocket))
	mux.HandleFunc("PUT /api/v1/messages/topics/{topic}/forward", locked(nd.setTopicForwardSocket))
	mux.HandleFunc("DELETE /api/v1/messages/topics/{topic}/forward", locked(nd.removeTopicForwardSocket))
	return mux
}

// ---- wire shapes (api.yaml components) ----

type wireDst struct {
	IP *string `json:"ip"`
	PK *string `json:"pk"`
}

type wirePush struct { // PushMessageBody
	Dst     *wireDst `json:"dst"`
	Topic   *string  `json:"topic"`
	Payload *string  `json:"payload"`
}

type wireInbound struct { // InboundMessage
	ID      string `json:"id"`
	SrcIP   string `json:"srcIp"`
	SrcPK   string `json:"srcPk"`
	DstIP   string `json:"dstIp"`
	DstPK   string `json:"dstPk"`
	Topic   string `json:"topic,omitempty"`
	Payload string `json:"payload"`
}

type wireID struct { // PushMessageResponseId
	ID string `json:"id"`
}

type wireStatus struct { // MessageStatusResponse
	Dst      string `json:"dst"`
	State    any    `json:"state"` // a string, or {"sending":{…}} while the chunks cross
	Created  int64  `json:"created"`
	Deadline int64  `json:"deadline"`
	MsgLen   int    `json:"msgLen"`
}

type wireInfo struct { // Info
	NodeSubnet    string `json:"nodeSubnet"`
	NodeIP        string `json:"nodeIp"`
	NodePubkey    string `json:"nodePubkey"`
	NodeStartTime int64  `json:"nodeStartTime"`
}

func inbound(m Message) wireInbound {
	w := wireInbound{ID: m.ID, SrcIP: m.SrcIP.String(), SrcPK: m.SrcPK, DstIP: m.DstIP.String(),
		DstPK: m.DstPK, Payload: b64.EncodeToString(m.Payload)}
	if len(m.Topic) > 0 {
		w.Topic = b64.EncodeToString(m.Topic)
	}
	return w
}

// ---- helpers ----

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// writeEmpty answers a status the spec declares without a body.
func writeEmpty(w http.ResponseWriter, status int) { w.WriteHeader(status) }

func writeText(w http.ResponseWriter, status int, msg string) { http.Error(w, msg, status) }

// readJSON decodes the body into v, answering 415/400/422 and returning false
// when it cannot.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" {
		writeText(w, http.StatusUnsupportedMediaType, "Expected request with `Content-Type: application/json`")
		return false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeText(w, http.StatusRequestEntityTooLarge, "Failed to buffer the request body: length limit exceeded")
		} else {
			writeText(w, http.StatusBadRequest, "Failed to buffer the request body: "+err.Error())
		}
		return false
	}
	if !json.Valid(b) {
		writeText(w, http.StatusBadRequest, "Failed to parse the request body as JSON")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeText(w, http.StatusUnprocessableEntity, "Failed to deserialize the JSON body: "+err.Error())
		return false
	}
	return true
}

func validHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// destination resolves a MessageDestination to the overlay address messages
// are routed to (a key maps to its address, as in Mycelium).
func destination(d *wireDst) (netip.Addr, error) {
	switch {
	case d == nil:
		return netip.Addr{}, errors.New("missing field `dst`")
	case (d.IP == nil) == (d.PK == nil):
		return netip.Addr{}, errors.New("dst: exactly one of `ip` and `pk` is required")
	case d.PK != nil:
		a, ok := addressOfHex(*d.PK)
		if !ok {
			return netip.Addr{}, errors.New("dst.pk: want 64 hex characters")
		}
		return a, nil
	default:
		a, err := netip.ParseAddr(*d.IP)
		if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
			return netip.Addr{}, errors.New("dst.ip: want an IPv6 address")
		}
		return a, nil
	}
}

// pushBody validates a PushMessageBody; it answers and returns ok=false on
// error.
func pushBody(w http.ResponseWriter, r *http.Request) (dst netip.Addr, topic, payload []byte, ok bool) {
	var body wirePush
	if !readJSON(w, r, &body) {
		return
	}
	dst, err := destination(body.Dst)
	if err != nil {
		writeText(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	if body.Topic != nil {
		if topic, err = b64.DecodeString(*body.Topic); err != nil {
			writeText(w, http.StatusUnprocessableEntity, "topic: "+err.Error())
			return
		}
	}
	if body.Payload == nil {
		writeText(w, http.StatusUnprocessableEntity, "missing field `payload`")
		return
	}
	if payload, err = b64.DecodeString(*body.Payload); err != nil {
		writeText(w, http.StatusUnprocessableEntity, "payload: "+err.Error())
		return
	}
	return dst, topic, payload, true
}

// uintParam reads an optional unsigned integer query parameter.
func uintParam(r *http.Request, name string) (v uint64, present bool, err error) {
	q := r.URL.Query()
	if !q.Has(name) {
		return 0, false, nil
	}
	v, err = strconv.ParseUint(q.Get(name), 10, 64)
	if err != nil {
		return 0, true, errors.New("invalid `" + name + "`: want a non-negative integer")
	}
	return v, true, nil
}

// seconds converts an API timeout, capping absurd values.
func seconds(s uint64) time.Duration {
	const maxSecs = uint64(1<<63-1) / uint64(time.Second)
	return time.Duration(min(s, maxSecs)) * time.Second
}

// ---- messages ----

// pushMessage: POST /api/v1/messages[?reply_timeout=s] → 201 {id}, or with
// reply_timeout 200 InboundMessage (the reply) / 408 {id}.
func (nd *Node) pushMessage(w http.ResponseWriter, r *http.Request) {
	secs, wait, err := uintParam(r, "reply_timeout")
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	dst, topic, payload, ok := pushBody(w, r)
	if !ok {
		return
	}
	if !nd.lock.acquire(r.Context().Done()) {
		return // the client went away while waiting for the node
	}
	if len(topic) > MaxTopicLen {
		// As a v0.7.10 node: its push_message refuses the topic under the lock, and
		// the handler answers a bare status (no body).
		nd.lock.release()
		writeEmpty(w, http.StatusBadRequest)
		return
	}
	if !wait {
		id := nd.push(dst, topic, payload, "", nil)
		nd.lock.release()
		writeJSON(w, http.StatusCreated, wireID{id})
		return
	}
	ch := make(chan Message, 1)
	id := nd.push(dst, topic, payload, "", ch)
	nd.lock.release() // the reply is awaited without the lock
	timer := time.NewTimer(seconds(secs))
	defer timer.Stop()
	select {
	case m := <-ch:
		writeJSON(w, http.StatusOK, inbound(m))
		return
	case <-timer.C:
	case <-r.Context().Done():
	}
	// Stop waiting. A reply that raced in is still in ch: use it (timeout)
	// or put it in the inbox (client gone), so it is never lost.
	n := nd.net
	n.mu.Lock()
	if nd.waiters[id] == ch {
		delete(nd.waiters, id)
	}
	var late *Message
	select {
	case m := <-ch:
		late = &m
	default:
	}
	gone := r.Context().Err() != nil
	if late != nil && gone {
		nd.inbox = append(nd.inbox, &inMsg{Message: *late})
		n.notifyLocked()
	}
	n.mu.Unlock()
	switch {
	case gone:
	case late != nil:
		writeJSON(w, http.StatusOK, inbound(*late))
	default:
		writeJSON(w, http.StatusRequestTimeout, wireID{id})
	}
}

// popMessage: GET /api/v1/messages?peek&timeout&topic → 200 InboundMessage,
// or 204 when nothing matching arrived within timeout seconds.
func (nd *Node) popMessage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	peek := false
	if q.Has("peek") {
		v, err := strconv.ParseBool(q.Get("peek"))
		if err != nil || (q.Get("peek") != "true" && q.Get("peek") != "false") {
			writeText(w, http.StatusBadRequest, "invalid `peek`: want true or false")
			return
		}
		peek = v
	}
	secs, _, err := uintParam(r, "timeout")
	if err != nil {
		writeText(w, http.StatusBadRequest, err.Error())
		return
	}
	var filter []byte
	if q.Has("topic") {
		if filter, err = b64.DecodeString(q.Get("topic")); err != nil {
			writeText(w, http.StatusBadRequest, "invalid `topic`: "+err.Error())
			return
		}
		if filter == nil {
			filter = []byte{}
		}
	}
	defer nd.pollClient(r.UserAgent())()
	n := nd.net
	// As on a v0.7.10 node: the lock first, however long another call (a long poll)
	// holds it, and only then the timeout, which covers the wait for a message alone.
	if !nd.lock.acquire(r.Context().Done()) {
		return // the client went away while waiting for the lock
	}
	defer nd.lock.release()
	timer := time.NewTimer(seconds(secs))
	defer timer.Stop()
	n.mu.Lock()
	garbage := nd.garbage > 0
	if garbage {
		nd.garbage--
	}
	n.mu.Unlock()
	if garbage {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("<html>502 Bad Gateway</html>"))
		return
	}
	polling := false
	defer func() {
		if polling {
			n.mu.Lock()
			n.stats.Polling--
			n.notifyLocked()
			n.mu.Unlock()
		}
	}()
	for {
		n.mu.Lock()
		m, ok := nd.takeLocked(filter, peek)
		changed := n.changed
		if !ok && !polling && secs > 0 {
			polling = true
			n.stats.Polling++
			n.notifyLocked()
			changed = n.changed
		}
		n.mu.Unlock()
		if ok {
			writeJSON(w, http.StatusOK, inbound(m))
			return
		}
		if secs == 0 { // one look, as a tokio Timeout of 0 polls its future once
			writeEmpty(w, http.StatusNoContent)
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			writeEmpty(w, http.StatusNoContent)
			return
		case <-r.Context().Done():
			return
		}
	}
}

// pushMessageReply: POST /api/v1/messages/reply/{id} → 204. The reply reuses
// the id, goes to the body's dst and carries no topic (a node ignores it).
func (nd *Node) pushMessageReply(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validHex(id, 16) {
		writeText(w, http.StatusBadRequest, "invalid message id: want 16 hex characters")
		return
	}
	dst, _, payload, ok := pushBody(w, r)
	if !ok {
		return
	}
	nd.push(dst, nil, payload, id, nil)
	writeEmpty(w, http.StatusNoContent)
}

// getMessageInfo: GET /api/v1/messages/status/{id} → 200
// MessageStatusResponse, or 404 for an id this node did not send.
func (nd *Node) getMessageInfo(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validHex(id, 16) {
		writeText(w, http.StatusBadRequest, "invalid message id: want 16 hex characters")
		return
	}
	nd.net.mu.Lock()
	o, ok := nd.outbox[id]
	var st wireStatus
	if ok {
		st = wireStatus{Dst: o.dst.String(), State: o.state, Created: o.created.Unix(),
			Deadline: o.deadline.Unix(), MsgLen: o.size}
		if o.state == stateSending {
			// Every chunk sent, none acknowledged until the DONE: the emulator does not
			// model the chunks' acknowledgements one by one.
			st.State = map[string]map[string]int{stateSending: {"pending": 0, "sent": o.chunks, "acked": 0}}
		}
	}
	nd.net.mu.Unlock()
	if !ok {
		writeEmpty(w, http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// ---- admin ----

func (nd *Node) getInfo(w http.ResponseWriter, r *http.Request) {
	nd.net.mu.Lock()
	started, id := nd.started.Unix(), nd.id
	nd.net.mu.Unlock()
	writeJSON(w, http.StatusOK, wireInfo{NodeSubnet: id.Subnet.String(), NodeIP: id.IP.String(),
		NodePubkey: id.PK, NodeStartTime: started})
}

// getPublicKeyFromIP answers with the spec's field name, NodePubKey.
func (nd *Node) getPublicKeyFromIP(w http.ResponseWriter, r *http.Request) {
	ip, err := netip.ParseAddr(r.PathValue("mycelium_ip"))
	if err != nil {
		writeText(w, http.StatusBadRequest, "invalid IP address")
		return
	}
	n := nd.net
	n.mu.Lock()
	dst := n.nodeForLocked(ip)
	var pk string
	if dst != nil {
		pk = dst.id.PK
	}
	n.mu.Unlock()
	if dst == nil {
		writeEmpty(w, http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"NodePubKey": pk})
}

// ---- topic configuration ----

func (nd *Node) getDefaultTopicAction(w http.ResponseWriter, r *http.Request) {
	nd.net.mu.Lock()
	accept := nd.topics.accept
	nd.net.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]bool{"accept": accept})
}

func (nd *Node) setDefaultTopicAction(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Accept *bool `json:"accept"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Accept == nil {
		writeText(w, http.StatusUnprocessableEntity, "missing field `accept`")
		return
	}
	nd.net.mu.Lock()
	nd.topics.accept = *body.Accept
	nd.net.mu.Unlock()
	writeEmpty(w, http.StatusNoContent)
}

func (nd *Node) getTopics(w http.ResponseWriter, r *http.Request) {
	nd.net.mu.Lock()
	out := []string{}
	for _, t := range sortedTopics(nd.topics.list) {
		out = append(out, b64.EncodeToString([]byte(t)))
	}
	nd.net.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (nd *Node) addTopic(w http.ResponseWriter, r *http.Request) {
	var s string
	if !readJSON(w, r, &s) {
		return
	}
	topic, err := b64.DecodeString(s)
	if err != nil || len(topic) > MaxTopicLen {
		writeText(w, http.StatusBadRequest, "invalid topic: want base64 of at most 255 bytes")
		return
	}
	nd.net.mu.Lock()
	nd.topics.entry(topic)
	nd.net.mu.Unlock()
	writeEmpty(w, http.StatusCreated)
}

// pathTopic decodes the {topic} path segment, answering 400 if it is not
// base64.
func pathTopic(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	t, err := b64.DecodeString(r.PathValue("topic"))
	if err != nil {
		writeEmpty(w, http.StatusBadRequest)
		return nil, false
	}
	return t, true
}

func (nd *Node) removeTopic(w http.ResponseWriter, r *http.Request) {
	topic, ok := pathTopic(w, r)
	if !ok {
		return
	}
	nd.net.mu.Lock()
	delete(nd.topics.list, string(topic))
	nd.net.mu.Unlock()
	writeEmpty(w, http.StatusNoContent)
}

func (nd *Node) getTopicSources(w http.ResponseWriter, r *http.Request) {
	topic, ok := pathTopic(w, r)
	if !ok {
		return
	}
	out := []string{}
	nd.net.mu.Lock()
	if e := nd.topics.list[string(topic)]; e != nil {
		for _, p := range e.sources {
			out = append(out, p.String())
		}
	}
	nd.net.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (nd *Node) addTopicSource(w http.ResponseWriter, r *http.Request) {
	topic, ok := pathTopic(w, r)
	if !ok {
		return
	}
	var body struct {
		Subnet *string `json:"subnet"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.Subnet == nil {
		writeText(w, http.StatusUnprocessableEntity, "missing field `subnet`")
		return
	}
	p, ok := parseSource(*body.Subnet)
	if !ok {
		writeEmpty(w, http.StatusBadRequest)
		return
	}
	nd.net.mu.Lock()
	e := nd.topics.entry(topic)
	if !containsPrefix(e.sources, p) {
		e.sources = append(e.sources, p)
	}
	nd.net.mu.Unlock()
	writeEmpty(w, http.StatusNoContent)
}

func containsPrefix(ps []netip.Prefix, p netip.Prefix) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func (nd *Node) removeTopicSource(w http.ResponseWriter, r *http.Request) {
	topic, ok := pathTopic(w, r)
	if !ok {
		return
	}
	p, ok := parseSource(r.PathValue("subnet"))
	if !ok {
		writeEmpty(w, http.StatusBadRequest)
		return
	}
	nd.net.mu.Lock()
	if e := nd.topics.list[string(topic)]; e != nil {
		kept := e.sources[:0]
		for _, q := range e.sources {
			if q != p {
				kept = append(kept, q)
			}
		}
		e.sources = kept
	}
	nd.net.mu.Unlock()
	writeEmpty(w, http.StatusNoContent)
}

// Forward sockets are stored and reported but not used: the emulator always
// queues messages for popMessage.

func (nd *Node) getTopicForwardSocket(w http.ResponseWriter, r *http.Request) {
	topic, ok := pathTopic(w, r)
	if !ok {
		return
	}
	var out *string
	nd.net.mu.Lock()
	if e := nd.topics.list[string(topic)]; e != nil && e.forward != nil {
		s := *e.forward
		out = &s
	}
	nd.net.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (nd *Node) setTopicForwardSocket(w http.ResponseWriter, r *http.Request) {
	topic, ok := pathTopic(w, r)
	if !ok {
		return
	}
	var body struct {
		SocketPath *string `json:"socket_path"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	if body.SocketPath == nil {
		writeText(w, http.StatusUnprocessableEntity, "missing field `socket_path`")
		return
	}
	nd.net.mu.Lock()
	if e := nd.topics.list[string(topic)]; e != nil { // like a node: only for a configured topic
		s := *body.SocketPath
		e.forward = &s
	}
	nd.net.mu.Unlock()
	writeEmpty(w, http.StatusNoContent)
}

func (nd *Node) removeTopicForwardSocket(w http.ResponseWriter, r *http.Request) {
	topic, ok := pathTopic(w, r)
	if !ok {
		return
	}
	nd.net.mu.Lock()
	if e := nd.topics.list[string(topic)]; e != nil {
		e.forward = nil
	}
	nd.net.mu.Unlock()
	writeEmpty(w, http.StatusNoContent)
}
