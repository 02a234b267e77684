package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Ports are distinct, bindable, and below the ephemeral range.
func TestPortsAreFreeDistinctAndNotEphemeral(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p >= ephemeralLow() {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, ephemeralLow())
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not bindable: %v", p, err)
		}
		_ = l.Close()
	}
}
