package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// pki init makes the CA and every certificate, keeps them on a second run, and
// reissues only the leaves with Renew; keys are readable by their owner only.
func TestPKIInitIsIdempotent(t *testing.T) {
	p := &PKI{Dir: t.TempDir(), APIHosts: []string{"api.example.org", "10.1.2.3"}}
	wrote, err := p.Init()
	if err != nil {
		t.Fatal(err)
	}
	if len(wrote) != 2*(len(Services)+4) {
		t.Fatalf("wrote %v", wrote)
	}
	ca, _ := os.ReadFile(p.Files("ca").CA)
	sched, _ := os.ReadFile(p.Files("scheduler").Cert)
	if again, err := p.Init(); err != nil || len(again) != 0 {
		t.Fatalf("a second init wrote %v (%v)", again, err)
	}
	if st, _ := os.Stat(p.Files("scheduler").Key); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode().Perm())
	}
	p.Renew = true
	if _, err := p.Init(); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(p.Files("ca").CA)
	sched2, _ := os.ReadFile(p.Files("scheduler").Cert)
	if string(ca) != string(ca2) || string(sched) == string(sched2) {
		t.Fatal("renew must keep the CA and reissue the leaves")
	}
	// The API certificate names the hosts asked for; a service its identity.
	api, err := LoadKeyPair(p.Files("api").Cert, p.Files("api").Key, "api", nil)
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := LoadPool(p.Files("ca").CA)
	for _, h := range []string{"api.example.org", "10.1.2.3", "localhost", "127.0.0.1"} {
		if _, err := api.Leaf().Verify(x509.VerifyOptions{DNSName: h, Roots: pool}); err != nil {
			t.Errorf("api certificate for %s: %v", h, err)
		}
	}
	s, _ := LoadKeyPair(p.Files("runner").Cert, p.Files("runner").Key, "internal", nil)
	chains, err := s.Leaf().Verify(x509.VerifyOptions{DNSName: ServiceName("runner"), Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	if got := PeerService(tls.ConnectionState{VerifiedChains: chains}); got != "runner" {
		t.Fatalf("PeerService = %q", got)
	}
}

// A server's certificate is re-read when its files change, and the expiry metric
// follows; mutual TLS refuses a client without a certificate.
func TestKeyPairReloadAndMutualTLS(t *testing.T) {
	p := &PKI{Dir: t.TempDir(), Validity: 24 * time.Hour}
	if _, err := p.Init(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	kp, err := LoadKeyPair(p.Files("scheduler").Cert, p.Files("scheduler").Key, "internal", m)
	if err != nil {
		t.Fatal(err)
	}
	kp.every = 0
	first := kp.Leaf().SerialNumber
	exp1 := testutil.ToFloat64(m.expiry.WithLabelValues("internal"))
	p.Renew, p.Validity = true, 48*time.Hour
	if _, err := p.Init(); err != nil {
		t.Fatal(err)
	}
	if kp.Leaf().SerialNumber.Cmp(first) == 0 {
		t.Fatal("the key pair was not re-read after its files changed")
	}
	if exp2 := testutil.ToFloat64(m.expiry.WithLabelValues("internal")); exp2 <= exp1 {
		t.Fatalf("expiry metric %v, then %v", exp1, exp2)
	}

	srv, err := ServerConfig(p.Files("scheduler"), true, "internal", nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()
	handshake := func(cfg *tls.Config) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		// TLS 1.3: the server's refusal of the client certificate arrives on the first read.
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		_, err = c.Read(make([]byte, 1))
		if err != nil && err.Error() == "EOF" {
			return nil
		}
		return err
	}
	good, _ := ClientConfig(p.Files("router"), ServiceName("scheduler"), "internal", nil)
	if err := handshake(good); err != nil {
		t.Fatalf("a client of the CA: %v", err)
	}
	noCert, _ := ClientConfig(Files{CA: p.Files("ca").CA}, ServiceName("scheduler"), "internal", nil)
	if err := handshake(noCert); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	wrongName, _ := ClientConfig(p.Files("router"), ServiceName("runner"), "internal", nil)
	if err := handshake(wrongName); err == nil {
		t.Fatal("the scheduler's certificate passed for the runner")
	}
}
