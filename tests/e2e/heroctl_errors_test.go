package e2e

import (
	"crypto/ed25519"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// countingProxy forwards TCP connections to target and counts them.
type countingProxy struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func startCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns.Add(1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.pipe(c, target)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

// pipe copies between c and a new connection to target until either side closes.
func (p *countingProxy) pipe(c net.Conn, target string) {
	defer func() { _ = c.Close() }()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Issue 45, acceptance 3: heroctl with a missing CA, a wrong CA, a wrong operator
// secret, a wrong actor key and a stopped supervisor-daemon says the cause and what
// to check for the credential it used; a certificate it cannot trust is said at once,
// over one connection (counted at a proxy in front of the API), although --timeout
// would allow minutes of retries. A stopped daemon is said at once too (a retry
// would keep heroctl running past the harness's deadline).
func TestHeroctlErrorsNameTheCause(t *testing.T) {
	c := heroctlStack(t)
	proxy := startCountingProxy(t, c.s.API.GRPCAddr)
	otherCA := &tlsx.PKI{Dir: t.TempDir()}
	if _, err := otherCA.Init(); err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherKey := filepath.Join(t.TempDir(), "actor-1-other.pem")
	if err := auth.WritePrivateKey(otherKey, key, false); err != nil {
		t.Fatal(err)
	}
	at := []string{"HERO_ADDR=" + proxy.ln.Addr().String()}
	for _, tc := range []struct {
		name     string
		env      []string
		args     []string
		want     []string
		not      []string
		maxConns int64
	}{
		{"missing CA", append(at, "HERO_TLS_CA=", "HERO_ACTOR=1"), []string{"flow", "list"},
			[]string{"certificate is not trusted", "unknown authority", "HERO_TLS_CA is not set", "Set HERO_TLS_CA"}, []string{"cannot reach"}, 1},
		{"wrong CA", append(at, "HERO_TLS_CA="+otherCA.Files("api").CA, "HERO_ACTOR=1"), []string{"flow", "list"},
			[]string{"certificate is not trusted", "unknown authority", "checked it against HERO_TLS_CA's " + otherCA.Files("api").CA, "Set HERO_TLS_CA"},
			[]string{"cannot reach"}, 1},
		{"wrong operator secret", append(at, "HERO_ADMIN_SECRET=not-the-stacks-secret-0123"), []string{"secret", "list"},
			[]string{"the operator secret is not valid", "HERO_ADMIN_SECRET", "admin-secret"}, []string{"HERO_ACTOR", "signed as actor"}, 1},
		{"wrong actor key", append(at, "HERO_ACTOR=1", "HERO_KEY="+otherKey), []string{"flow", "list"},
			[]string{"signature does not verify", "actor 1", otherKey, "heroctl key pubkey"}, []string{"operator secret"}, 1},
	} {
		proxy.conns.Store(0)
		_, errOut, code := c.s.Heroctl(t, tc.env, append([]string{"--timeout", "10m"}, tc.args...)...)
		if code != 1 {
			t.Errorf("%s: exit %d, %q", tc.name, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: %q does not say %q", tc.name, errOut, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(errOut, n) {
				t.Errorf("%s: %q says %q, which is not the cause", tc.name, errOut, n)
			}
		}
		if n := proxy.conns.Load(); n > tc.maxConns {
			t.Errorf("%s: heroctl connected %d times; want at most %d (no retries: another try fails the same way)", tc.name, n, tc.maxConns)
		}
	}

	// A stopped supervisor-daemon: nothing listens at its address.
	addr := c.s.API.GRPCAddr
	c.s.API.Kill()
	for _, args := range [][]string{{"flow", "list"}, {"api", "call", "flow.list", `{"context_id":1}`}} {
		_, errOut, code := c.s.Heroctl(t, append(meEnv, "HERO_ADDR="+addr), append([]string{"--timeout", "10m"}, args...)...)
		if code != 1 || !strings.Contains(errOut, "cannot reach supervisor-daemon") || !strings.Contains(errOut, "connection refused") ||
			!strings.Contains(errOut, "is it running?") {
			t.Errorf("heroctl %v with supervisor-daemon stopped: exit %d, %q", args, code, errOut)
		}
	}
}
