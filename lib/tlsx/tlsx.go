// Package tlsx is the one TLS block of every client and server of the stack: a CA
// bundle that peers' certificates must chain to, and this process's own certificate
// and key. Inside the stack every connection is mutual TLS: a service's certificate
// names it as <service>.hero.internal (ServiceName), clients verify the server
// against that name whatever address they dial, and servers learn their callers'
// names from their certificates (PeerService). Key pairs are re-read when their files
// change (checked at most every few seconds, on a handshake); a new CA needs a
// restart. The expiry of every certificate in use is a metric.
package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// InternalDomain is the pseudo-domain of service identities.
const InternalDomain = "hero.internal"

// ServiceName is the name a service's certificate carries and its peers verify.
func ServiceName(service string) string { return service + "." + InternalDomain }

// Files is the TLS block of a configuration: PEM files.
type Files struct {
	CA   string // the CA bundle peers chain to
	Cert string // this process's certificate (chain)
	Key  string // its private key
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Validate checks that the block is complete for a role: mutual TLS needs all three.
func (f Files) Validate(prefix string, mutual bool) error {
	if !f.Enabled() {
		return nil
	}
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("--%s-cert and --%s-key must be given together", prefix, prefix)
	}
	if mutual && (f.CA == "" || f.Cert == "") {
		return fmt.Errorf("--%s-ca, --%s-cert and --%s-key must be given together (mutual TLS)", prefix, prefix, prefix)
	}
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("--%s: %v", prefix, err)
		}
	}
	return nil
}

// Metrics holds the expiry gauge of the certificates a process uses.
type Metrics struct {
	expiry *prometheus.GaugeVec
}

// NewMetrics registers hero_tls_certificate_expiry_timestamp_seconds.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{expiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hero_tls_certificate_expiry_timestamp_seconds",
		Help: "When each certificate this process presents expires (unix seconds), by use: internal, api, redis.",
	}, []string{"use"})}
	if reg != nil {
		reg.MustRegister(m.expiry)
	}
	return m
}

func (m *Metrics) observe(use string, c *tls.Certificate) {
	if m == nil || c == nil || c.Leaf == nil {
		return
	}
	m.expiry.WithLabelValues(use).Set(float64(c.Leaf.NotAfter.Unix()))
}

// reloadEvery bounds how often the key pair's files are looked at.
const reloadEvery = 5 * time.Second

// KeyPair is a certificate and key read from files, re-read when they change.
type KeyPair struct {
	certFile, keyFile string
	use               string
	m                 *Metrics
	every             time.Duration // how often the files are looked at

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string // the files' sizes and modification times
	checked time.Time
}

// LoadKeyPair reads a key pair (an error now if it cannot be read).
func LoadKeyPair(certFile, keyFile, use string, m *Metrics) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile, use: use, m: m, every: reloadEvery}
	if err := k.load(); err != nil {
		return nil, err
	}
	return k, nil
}

func (k *KeyPair) fileStamp() string {
	var b strings.Builder
	for _, p := range []string{k.certFile, k.keyFile} {
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%d:%d;", st.Size(), st.ModTime().UnixNano())
		}
	}
	return b.String()
}

func (k *KeyPair) load() error {
	stamp := k.fileStamp()
	c, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		return fmt.Errorf("tls key pair %s: %v", k.certFile, err)
	}
	k.cert, k.stamp, k.checked = &c, stamp, time.Now()
	k.m.observe(k.use, k.cert)
	return nil
}

// Get returns the current certificate, re-reading the files when they changed. A
// failed re-read (a half-written file) keeps the certificate in use.
func (k *KeyPair) Get() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) >= k.every {
		k.checked = time.Now()
		if k.fileStamp() != k.stamp {
			_ = k.load()
		}
	}
	return k.cert
}

// Leaf is the certificate in use, parsed.
func (k *KeyPair) Leaf() *x509.Certificate { return k.Get().Leaf }

// LoadPool reads a CA bundle.
func LoadPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tls ca: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls ca %s: no PEM certificate in it", caFile)
	}
	return pool, nil
}

// ServerConfig is a server's TLS: its key pair, and with mutual set, every client must
// present a certificate chaining to the CA.
func ServerConfig(f Files, mutual bool, use string, m *Metrics) (*tls.Config, error) {
	if f.Cert == "" {
		return nil, errors.New("tls: a server needs a certificate and key")
	}
	kp, err := LoadKeyPair(f.Cert, f.Key, use, m)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.Get(), nil }}
	if mutual {
		pool, err := LoadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig is a client's TLS: it verifies the server against the CA (the system
// roots when f.CA is empty) for serverName, and presents its own key pair if any.
func ClientConfig(f Files, serverName, use string, m *Metrics) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if f.CA != "" {
		pool, err := LoadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		kp, err := LoadKeyPair(f.Cert, f.Key, use, m)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.Get(), nil }
	}
	return cfg, nil
}

// PeerService returns the service a verified peer certificate names
// (<service>.hero.internal), or "".
func PeerService(state tls.ConnectionState) string {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return ""
	}
	for _, n := range state.VerifiedChains[0][0].DNSNames {
		if s, ok := strings.CutSuffix(n, "."+InternalDomain); ok && s != "" && !strings.Contains(s, ".") {
			return s
		}
	}
	return ""
}
