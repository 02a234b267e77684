// Package freeport hands tests TCP ports on 127.0.0.1 that a process will bind later
// (a service that must come back on the same address after a restart, two services
// that name each other).
//
// A port taken with a listen on :0 and closed again lies in the kernel's ephemeral
// range, and every outgoing connection on the machine can take it before the process
// binds it ("address already in use"). So the ports come from below that range, where
// neither connections nor :0 binds go; each is checked bindable, and none is handed out
// twice by one test binary.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Port returns a free port below the ephemeral range.
func Port() (int, error) {
	lo, hi := 20000, ephemeralLow()-1
	if hi-lo < 1000 {
		lo = 10000
	}
	mu.Lock()
	defer mu.Unlock()
	for range 200 {
		p := lo + rand.IntN(hi-lo+1)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		given[p] = true
		return p, nil
	}
	return 0, errors.New("freeport: no free port found below the ephemeral range")
}

// Addr returns "127.0.0.1:<port>" for a free port.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 where it
// cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 2000 {
		return 32768
	}
	return n
}
