// Package netx caps a listener's connections: over the cap a new connection is
// answered at once (an HTTP 503, or simply closed) while the accepted ones are served.
// golang.org/x/net/netutil.LimitListener instead stops accepting, which leaves new
// clients hanging in the kernel's backlog until they time out.
package netx

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Limited is a listener that holds at most Max connections open.
type Limited struct {
	net.Listener
	max    int64
	open   atomic.Int64
	reject func(net.Conn)
	// OnReject is called for each refused connection (a metric).
	OnReject func()
}

// Limit wraps ln. reject answers and closes a refused connection (nil: close it);
// it runs on its own goroutine, so a slow peer never stalls Accept.
func Limit(ln net.Listener, max int, reject func(net.Conn)) *Limited {
	return &Limited{Listener: ln, max: int64(max), reject: reject}
}

// Open returns the number of connections accepted and not yet closed.
func (l *Limited) Open() int64 { return l.open.Load() }

// Accept returns the next connection within the cap; refused ones never leave it.
func (l *Limited) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max <= 0 || l.open.Add(1) <= l.max {
			if l.max <= 0 {
				return c, nil
			}
			return &conn{Conn: c, release: func() { l.open.Add(-1) }}, nil
		}
		l.open.Add(-1)
		if l.OnReject != nil {
			l.OnReject()
		}
		go func() {
			if l.reject != nil {
				_ = c.SetDeadline(time.Now().Add(time.Second))
				l.reject(c)
			}
			_ = c.Close()
		}()
	}
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
