// Package netx bounds a listener's connections: in all (Options.Max) and per source
// address (Options.PerSource), so that one client cannot hold every slot. Over a bound
// a new connection is answered at once (an HTTP 503, or simply closed) while the
// accepted ones are served. golang.org/x/net/netutil.LimitListener instead stops
// accepting, which leaves new clients hanging in the kernel's backlog until they time
// out, and knows no sources.
package netx

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The causes of a refusal (the cause label of hero_listener_connections_refused_total).
const (
	// CauseMax: the listener's Options.Max connections were open.
	CauseMax = "max_connections"
	// CausePerSource: the source's Options.PerSource connections were open.
	CausePerSource = "per_source"
)

// Options are a listener's bounds.
type Options struct {
	// Max caps the open connections of the listener (0: no cap).
	Max int
	// PerSource caps the open connections of one source: an IPv4 address, or an IPv6
	// /64 (one host's usual allotment); 0: no cap.
	PerSource int
	// Reject answers a refused connection before it is closed (nil: closed at once);
	// it runs on its own goroutine with a deadline of a second, so a slow peer never
	// stalls Accept.
	Reject func(net.Conn)
	// OnReject is called for each refused connection with its cause (a metric).
	OnReject func(cause string)
}

// Limited is a listener that holds at most Options.Max connections open, and at most
// Options.PerSource of one source.
type Limited struct {
	net.Listener
	o        Options
	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int
}

// Limit wraps ln with the bounds of o.
func Limit(ln net.Listener, o Options) *Limited {
	return &Limited{Listener: ln, o: o, bySource: map[netip.Addr]int{}}
}

// Open returns the number of connections accepted and not yet closed.
func (l *Limited) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Accept returns the next connection within the bounds; refused ones never leave it.
func (l *Limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, hasSource := Source(c.RemoteAddr())
		if cause := l.take(src, hasSource); cause != "" {
			l.refuse(c, cause)
			continue
		}
		return &conn{Conn: c, release: func() { l.give(src, hasSource) }}, nil
	}
}

// take counts a new connection of src in, or says why it is refused.
func (l *Limited) take(src netip.Addr, hasSource bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.o.Max > 0 && l.open >= l.o.Max {
		return CauseMax
	}
	if hasSource && l.o.PerSource > 0 {
		if l.bySource[src] >= l.o.PerSource {
			return CausePerSource
		}
		l.bySource[src]++
	}
	l.open++
	return ""
}

// give counts a closed connection of src out.
func (l *Limited) give(src netip.Addr, hasSource bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if hasSource && l.o.PerSource > 0 {
		if n := l.bySource[src] - 1; n > 0 {
			l.bySource[src] = n
		} else {
			delete(l.bySource, src)
		}
	}
}

// refuse answers (Options.Reject) and closes a refused connection.
func (l *Limited) refuse(c net.Conn, cause string) {
	if l.o.OnReject != nil {
		l.o.OnReject(cause)
	}
	go func() {
		if l.o.Reject != nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			l.o.Reject(c)
		}
		_ = c.Close()
	}()
}

// Source is the source a connection from addr counts against: its IPv4 address (an
// IPv4-mapped IPv6 one too), or the /64 of its IPv6 address. ok is false for an
// address that names no IP (a Unix socket): such connections have no source bound.
func Source(addr net.Addr) (netip.Addr, bool) {
	ta, isTCP := addr.(*net.TCPAddr)
	if !isTCP {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return netip.Addr{}, false
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, err := ip.Prefix(64)
		if err != nil {
			return netip.Addr{}, false
		}
		ip = p.Addr()
	}
	return ip, true
}

// conn gives its slot back once, on the first Close.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// RejectHTTP answers a refused connection with 503 and a retry hint.
func RejectHTTP(c net.Conn) {
	_, _ = c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 41\r\n\r\ntoo many connections: retry in a moment\r\n"))
}

// Refused returns an Options.OnReject that counts a listener's refused connections
// in hero_listener_connections_refused_total{listener, cause}, registered in reg once
// for all of a process's listeners. Its series start at 0. No label names the source:
// the metric stays small whoever connects, and tells no reader who was refused.
func Refused(reg prometheus.Registerer, listener string) (func(cause string), error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hero_listener_connections_refused_total",
		Help: "Connections a listener (grpc, jsonrpc, admin) closed at once, by cause: max_connections (--max-connections were open) or per_source (--max-connections-per-source of its source address were open).",
	}, []string{"listener", "cause"})
	if err := reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, isVec := are.ExistingCollector.(*prometheus.CounterVec)
		if !isVec {
			return nil, err
		}
		vec = existing
	}
	byCause := map[string]prometheus.Counter{}
	for _, cause := range []string{CauseMax, CausePerSource} {
		byCause[cause] = vec.WithLabelValues(listener, cause)
	}
	return func(cause string) {
		if c, ok := byCause[cause]; ok {
			c.Inc()
		}
	}, nil
}
