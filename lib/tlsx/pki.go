package tlsx

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hero-coordinator/hero/lib/fsx"
)

// Services are the stack's services; each gets a certificate naming it.
var Services = []string{"supervisor-daemon", "scheduler", "router", "runner", "mycelium-gateway"}

// PKI lays out the deployment's certificates in one directory:
//
//	ca.pem, ca-key.pem                 the internal CA (10 years)
//	<service>.pem, <service>-key.pem   each service: <service>.hero.internal, for
//	                                   server and client use (mutual TLS, Redis)
//	api.pem, api-key.pem               the public API (JSON-RPC, gRPC) for APIHosts
//	redis.pem, redis-key.pem           a Redis server, for RedisHosts
//	operator.pem, operator-key.pem     a client identity for people's tools
//
// Init makes what is missing and keeps what exists (Renew reissues the leaf
// certificates from the existing CA). Keys are ECDSA P-256, files mode 0600.
type PKI struct {
	Dir        string
	APIHosts   []string // names and addresses of the public API (always localhost, 127.0.0.1, ::1)
	RedisHosts []string // names and addresses of the Redis server (always localhost, 127.0.0.1, ::1)
	ExtraHosts []string // more names of every service certificate (e.g. compose service names)
	Validity   time.Duration
	Renew      bool
	Now        func() time.Time
}

// Paths of one certificate and key in the directory.
func (p *PKI) Paths(name string) (cert, key string) {
	return filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
}

// Files is the TLS block for one named certificate of the directory.
func (p *PKI) Files(name string) Files {
	cert, key := p.Paths(name)
	return Files{CA: filepath.Join(p.Dir, "ca.pem"), Cert: cert, Key: key}
}

// Init creates what is missing; it returns the names of the files it wrote.
func (p *PKI) Init() ([]string, error) {
	if p.Validity == 0 {
		p.Validity = 365 * 24 * time.Hour
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, err
	}
	var wrote []string
	caCert, caKey, made, err := p.ca(now())
	if err != nil {
		return nil, err
	}
	if made {
		wrote = append(wrote, "ca.pem", "ca-key.pem")
	}
	local := []string{"localhost", "127.0.0.1", "::1"}
	leaves := map[string][]string{
		"api":      append(append([]string{"supervisor-daemon"}, local...), p.APIHosts...),
		"redis":    append(append([]string{"redis"}, local...), p.RedisHosts...),
		"operator": {ServiceName("operator")},
	}
	for _, s := range Services {
		leaves[s] = append(append([]string{ServiceName(s), s}, local...), p.ExtraHosts...)
	}
	names := make([]string, 0, len(leaves))
	for n := range leaves {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		certPath, _ := p.Paths(n)
		if _, err := os.Stat(certPath); err == nil && !p.Renew && !made {
			continue
		}
		if err := p.leaf(n, leaves[n], caCert, caKey, now()); err != nil {
			return nil, err
		}
		wrote = append(wrote, n+".pem", n+"-key.pem")
	}
	return wrote, nil
}

// ca loads the CA, or makes it when it does not exist.
func (p *PKI) ca(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	certPath, keyPath := p.Paths("ca")
	if _, err := os.Stat(certPath); err == nil {
		c, k, err := readPair(certPath, keyPath)
		return c, k, false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "Hero coordinator internal CA", Organization: []string{"hero"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, false, err
	}
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return nil, nil, false, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, true, err
}

func (p *PKI) leaf(name string, hosts []string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name, Organization: []string{"hero"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(p.Validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	certPath, keyPath := p.Paths(name)
	return writePair(certPath, keyPath, der, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// writePair writes a certificate (0644) and its key (0600), each replaced whole.
func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// The key first: a reader that sees the new certificate finds its key.
	if err := fsx.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return fsx.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func readPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	c, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, errors.New(keyPath + ": not an ECDSA key")
	}
	return c, ek, nil
}
