package netx

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// Over the cap a new connection is answered at once and closed; the accepted one is
// served; once it closes, its slot is free again.
func TestLimitRefusesOverTheCapAndFreesSlots(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := Limit(ln, 1, RejectHTTP)
	refused := make(chan struct{}, 4)
	lim.OnReject = func() { refused <- struct{}{} }
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := lim.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() { _ = lim.Close() }()

	first, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	served := <-accepted
	second, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(second).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("over the cap: %q %v", line, err)
	}
	<-refused
	if lim.Open() != 1 {
		t.Fatalf("open = %d, want 1", lim.Open())
	}
	// The accepted connection still works.
	if _, err := first.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	_ = served.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := served.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("served connection: %v", err)
	}
	// Closing it (twice) frees exactly one slot.
	_ = served.Close()
	_ = served.Close()
	if lim.Open() != 0 {
		t.Fatalf("open after close = %d", lim.Open())
	}
	third, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = third.Close() }()
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("a connection after the slot was freed was not accepted")
	}
	_ = first.Close()
	_ = second.Close()
}
