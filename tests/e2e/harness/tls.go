package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/hero-coordinator/hero/lib/redisacl"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// Every stack the harness starts runs with mutual TLS between its services and TLS
// at the public API, from one PKI made per test binary (heroctl pki init's layout).

var pkiOnce struct {
	sync.Once
	pki *tlsx.PKI
	err error
}

// PKI returns the test binary's PKI, made on first use in a directory of its own:
// make test runs the e2e package as several test binaries at once, and two of them
// making one shared directory's CA at the same moment would each sign with their
// own (RemovePKI removes it at the end of the run).
func PKI() (*tlsx.PKI, error) {
	pkiOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hero-e2e-pki-")
		if err == nil {
			err = os.Chmod(dir, 0o755) // jobs run as another uid read the CA
		}
		if err != nil {
			pkiOnce.err = err
			return
		}
		pkiOnce.pki = &tlsx.PKI{Dir: dir}
		if _, pkiOnce.err = pkiOnce.pki.Init(); pkiOnce.err == nil {
			_, pkiOnce.err = redisacl.Init(dir)
		}
		if pkiOnce.err == nil {
			_, pkiOnce.err = redisacl.InitOperatorKey(dir)
		}
		if pkiOnce.err == nil {
			guardKeyMaterial(dir)
		}
	})
	return pkiOnce.pki, pkiOnce.err
}

// RemovePKI removes the directory of the PKI made by PKI, if any (TestMain, once
// every test has ended).
func RemovePKI() {
	if pkiOnce.pki != nil {
		_ = os.RemoveAll(pkiOnce.pki.Dir)
	}
}

// services are the binaries that take the TLS flags.
var services = map[string]bool{"supervisor-daemon": true, "scheduler": true, "router": true, "runner": true, "mycelium-gateway": true}

// TLSArgs are a service's TLS flags: its internal identity, and for
// supervisor-daemon the public API's certificate.
func TLSArgs(name string) ([]string, error) {
	p, err := PKI()
	if err != nil || !services[name] {
		return nil, err
	}
	f := p.Files(name)
	args := []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key}
	if name == "supervisor-daemon" {
		api := p.Files("api")
		args = append(args, "--api-tls-cert", api.Cert, "--api-tls-key", api.Key,
			"--operator-secret-key-file", filepath.Join(p.Dir, redisacl.OperatorKeyFile))
	}
	return args, nil
}

// APITLS is a client's TLS towards the public API (the test CA; no certificate).
// Without a PKI (which fails every stack's start first) it trusts nothing.
func APITLS() *tls.Config {
	p, err := PKI()
	if err != nil {
		return &tls.Config{MinVersion: tls.VersionTLS12}
	}
	t, err := tlsx.ClientConfig(tlsx.Files{CA: p.Files("api").CA}, "", "api", nil)
	if err != nil {
		return &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return t
}

// APIURL is the JSON-RPC URL of a supervisor-daemon.
func APIURL(p *Proc) string { return "https://" + p.HTTPAddr + "/" }

var httpOnce struct {
	sync.Once
	c *http.Client
}

// HTTPClient is an HTTP client that trusts the test CA (for the JSON-RPC API).
func HTTPClient() *http.Client {
	httpOnce.Do(func() {
		httpOnce.c = &http.Client{Transport: &http.Transport{TLSClientConfig: APITLS(), MaxIdleConnsPerHost: 64}}
	})
	return httpOnce.c
}

// APICredentials are gRPC transport credentials for the public API.
func APICredentials() credentials.TransportCredentials { return credentials.NewTLS(APITLS()) }

// DialInternal connects to an internal service with the certificate of `as` (a
// service name, or "operator").
func DialInternal(addr, service, as string) (*grpc.ClientConn, error) {
	p, err := PKI()
	if err != nil {
		return nil, err
	}
	t, err := tlsx.ClientConfig(p.Files(as), tlsx.ServiceName(service), "internal", nil)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(t)))
}

// secureRedis is the URL of a Redis with the deployment's ACL users, which services
// started against it log in as: one that serves TLS only (SecureRedisOptions, tls
// set) or plaintext (ACLRedisOptions).
var secureRedis struct {
	sync.Mutex
	url string
	tls bool
}

// SecureRedisOptions are the redistest options of a Redis that serves TLS only,
// requires client certificates of the test CA, and has the deployment's ACL users
// (the test's own clients log in as "operator").
func SecureRedisOptions() (redistest.Options, error) {
	o, p, err := aclOptions()
	if err != nil {
		return o, err
	}
	srv, op := p.Files("redis"), p.Files("operator")
	o.TLS = &redistest.TLS{CA: srv.CA, Cert: srv.Cert, Key: srv.Key, ClientCert: op.Cert, ClientKey: op.Key}
	return o, nil
}

// aclOptions are the redistest options of a Redis with the deployment's ACL users,
// the test's own clients logged in as "operator", and the PKI they come from.
func aclOptions() (redistest.Options, *tlsx.PKI, error) {
	p, err := PKI()
	if err != nil {
		return redistest.Options{}, nil, err
	}
	pw, err := os.ReadFile(filepath.Join(p.Dir, redisacl.PasswordFile("operator")))
	if err != nil {
		return redistest.Options{}, nil, err
	}
	return redistest.Options{ACLFile: filepath.Join(p.Dir, redisacl.ACLFile), User: "operator", UserPassword: strings.TrimSpace(string(pw))}, p, nil
}

// UseSecureRedis marks url (a server started with SecureRedisOptions) so that the
// services started against it connect as their own ACL users, by TLS with their own
// certificates.
func UseSecureRedis(url string) {
	secureRedis.Lock()
	secureRedis.url, secureRedis.tls = url, true
	secureRedis.Unlock()
}

// ACLRedisOptions are the redistest options of a Redis as docker-compose.yml and
// scripts/local-stack.sh run it: the deployment's ACL users (the test's own clients
// log in as "operator"), an append-only file written to disk every second, no TLS.
// RDB snapshots stay off (redistest's --save ""), so that no fork falls at a random
// point of a measurement.
func ACLRedisOptions() (redistest.Options, error) {
	o, _, err := aclOptions()
	o.ExtraArgs = []string{"--appendonly", "yes", "--appendfsync", "everysec"}
	return o, err
}

// UseACLRedis marks url (a server started with ACLRedisOptions) so that the services
// started against it log in as their own ACL users, without TLS.
func UseACLRedis(url string) {
	secureRedis.Lock()
	secureRedis.url, secureRedis.tls = url, false
	secureRedis.Unlock()
}

// placement is the placement map services started against one Redis get
// (UsePlacement).
var placement struct {
	sync.Mutex
	primary, spec string
}

// UsePlacement makes the services started against primaryURL place contexts with
// spec (--redis-placement, e.g. "1-1=redis://127.0.0.1:6380").
func UsePlacement(primaryURL, spec string) {
	placement.Lock()
	placement.primary, placement.spec = primaryURL, spec
	placement.Unlock()
}

// placementArgs are the placement flags of a service started against redisURL.
func placementArgs(name, redisURL string) []string {
	placement.Lock()
	defer placement.Unlock()
	if placement.spec == "" || redisURL != placement.primary || !services[name] {
		return nil
	}
	return []string{"--redis-placement", placement.spec}
}

// redisFor is the URL and flags a service uses for redisURL.
func redisFor(name, redisURL string) (string, []string, error) {
	secureRedis.Lock()
	secure, withTLS := secureRedis.url != "" && redisURL == secureRedis.url, secureRedis.tls
	secureRedis.Unlock()
	if !secure || !services[name] {
		return redisURL, nil, nil
	}
	p, err := PKI()
	if err != nil {
		return "", nil, err
	}
	u, err := url.Parse(redisURL)
	if err != nil {
		return "", nil, err
	}
	u.User = url.User(name)
	args := []string{"--redis-password-file", filepath.Join(p.Dir, redisacl.PasswordFile(name))}
	if withTLS {
		f := p.Files(name)
		args = append(args, "--redis-tls-ca", f.CA, "--redis-tls-cert", f.Cert, "--redis-tls-key", f.Key)
	}
	return u.String(), args, nil
}

// isSecure: redisURL is a Redis with ACL users (UseSecureRedis, UseACLRedis).
func isSecure(redisURL string) bool {
	secureRedis.Lock()
	defer secureRedis.Unlock()
	return secureRedis.url != "" && redisURL == secureRedis.url
}

// CheckACLLog fails t for each command the services' Redis users were refused on the
// secure Redis since the last check (ACL LOG, then ACL LOG RESET): a service whose
// code runs a command or reaches a key its user (lib/redisacl) does not allow. A
// refused login (reason "auth") is no such thing.
func CheckACLLog(t testing.TB, redisURL string) {
	t.Helper()
	if !isSecure(redisURL) {
		return
	}
	opt, err := operatorOptions(redisURL)
	if err != nil {
		t.Error(err)
		return
	}
	ro, err := redis.ParseURL(opt.URL)
	if err != nil {
		t.Error(err)
		return
	}
	ro.Password = opt.Password
	if ro.TLSConfig != nil && opt.TLS != nil {
		tc := opt.TLS.Clone()
		tc.ServerName = ro.TLSConfig.ServerName
		ro.TLSConfig = tc
	}
	client := redis.NewClient(ro)
	defer func() { _ = client.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	entries, err := client.ACLLog(ctx, 128).Result()
	if err != nil {
		t.Errorf("ACL LOG: %v", err)
		return
	}
	for _, e := range entries {
		if e.Reason != "auth" {
			t.Errorf("Redis refused user %s: %s %q (context %s, count %d)", e.Username, e.Reason, e.Object, e.Context, e.Count)
		}
	}
	if err := client.ACLLogReset(ctx).Err(); err != nil {
		t.Errorf("ACL LOG RESET: %v", err)
	}
}

// EnsureScripts loads the store's Redis functions into the servers that services
// started against redisURL use (its placement map's too), as supervisor-daemon does:
// every other service waits for them before it starts, and a test may start one
// before supervisor-daemon or without it (StartStack starts it last).
// TestServicesWaitForTheLoader shows the wait itself.
func EnsureScripts(redisURL string) error {
	opt, err := operatorOptions(redisURL)
	if err != nil {
		return err
	}
	placement.Lock()
	if placement.spec != "" && redisURL == placement.primary {
		opt.Placement = placement.spec
	}
	placement.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, opt)
	if err != nil {
		return fmt.Errorf("load the store's functions into %s: %w", redisURL, err)
	}
	s.Close()
	return nil
}

// operatorOptions are the store options of the test's own access to redisURL: as the
// "operator" user on a Redis with ACL users, by TLS with its certificate on the secure
// Redis.
func operatorOptions(redisURL string) (store.Options, error) {
	opt := store.Options{URL: redisURL, ConnectTimeout: time.Minute, Log: zerolog.Nop()}
	if !isSecure(redisURL) {
		return opt, nil
	}
	p, err := PKI()
	if err != nil {
		return opt, err
	}
	pw, err := os.ReadFile(filepath.Join(p.Dir, redisacl.PasswordFile("operator")))
	if err != nil {
		return opt, err
	}
	u, err := url.Parse(redisURL)
	if err != nil {
		return opt, err
	}
	u.User = url.User("operator")
	opt.URL, opt.Password = u.String(), strings.TrimSpace(string(pw))
	secureRedis.Lock()
	withTLS := secureRedis.tls
	secureRedis.Unlock()
	if withTLS {
		opt.TLS, err = tlsx.ClientConfig(p.Files("operator"), "", "redis", nil)
	}
	return opt, err
}

// guardKeyMaterial adds every private key and Redis password of the PKI to the
// secrets no service may log (GuardSecret): each key's base64 body, each password.
func guardKeyMaterial(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		switch {
		case strings.HasSuffix(e.Name(), "-key.pem"):
			for _, line := range strings.Split(string(b), "\n") {
				if len(line) > 40 && !strings.HasPrefix(line, "-----") {
					GuardSecret(line)
				}
			}
		case strings.HasPrefix(e.Name(), redisacl.PasswordFile("")), e.Name() == redisacl.OperatorKeyFile:
			GuardSecret(strings.TrimSpace(string(b)))
		}
	}
}
