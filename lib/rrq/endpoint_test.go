package rrq

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A Unix endpoint is connected to without following a symbolic link at its path (an
// executor could leave one there to another socket): a link, or a file that is no
// socket, is refused, and nothing connects to the socket the link leads to; the
// socket itself is reached.
func TestDialDoesNotFollowALink(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.sock") // another service's socket, say
	ln, err := net.Listen("unix", other)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			_ = c.Close()
		}
	}()
	link, plain := filepath.Join(dir, "executor.sock"), filepath.Join(dir, "plain")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{Timeout: time.Second}
	if c, err := UnixEndpoint(link).Dial(context.Background(), d); err == nil || !strings.Contains(err.Error(), "is not a socket (a symbolic link)") {
		t.Fatalf("a link: connected (%v) or another error: %v", c, err)
	}
	if _, err := UnixEndpoint(plain).Dial(context.Background(), d); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Fatalf("a file: %v", err)
	}
	select {
	case <-accepted:
		t.Fatal("the socket the link leads to was connected to")
	default:
	}
	c, err := UnixEndpoint(other).Dial(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	<-accepted
}
