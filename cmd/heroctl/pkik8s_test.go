package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/redisacl"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// fakeAPI stands in for the Kubernetes API server: Secrets of one namespace in
// memory, every request recorded, the bearer token and content type checked.
type fakeAPI struct {
	t     *testing.T
	token string
	ns    string

	mu       sync.Mutex
	secrets  map[string]*k8sSecret
	requests []string // "GET /api/v1/…"
	failGet  int      // answer GETs with this status when not 0
	conflict string   // answer a POST of this name with 409
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if got := r.Header.Get("Authorization"); got != "Bearer "+f.token {
		f.t.Errorf("%s %s: Authorization %q", r.Method, r.URL.Path, got)
		http.Error(w, `{"kind":"Status","message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	prefix := "/api/v1/namespaces/" + f.ns + "/secrets"
	status := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": msg, "code": code})
	}
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix+"/"):
		if f.failGet != 0 {
			status(f.failGet, `secrets "x" is forbidden: User "system:serviceaccount:hero:hero-pki" cannot get resource "secrets"`)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, prefix+"/")
		s, ok := f.secrets[name]
		if !ok {
			status(http.StatusNotFound, `secrets "`+name+`" not found`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s)
	case r.Method == http.MethodPost && r.URL.Path == prefix:
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			f.t.Errorf("POST: Content-Type %q", ct)
		}
		body, _ := io.ReadAll(r.Body)
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		var s k8sSecret
		if err := dec.Decode(&s); err != nil {
			f.t.Errorf("POST: body does not decode: %v", err)
			status(http.StatusBadRequest, "bad body")
			return
		}
		if s.APIVersion != "v1" || s.Kind != "Secret" || s.Metadata.Namespace != f.ns {
			f.t.Errorf("POST: %s %s in %q", s.APIVersion, s.Kind, s.Metadata.Namespace)
		}
		if _, ok := f.secrets[s.Metadata.Name]; ok || s.Metadata.Name == f.conflict {
			status(http.StatusConflict, `secrets "`+s.Metadata.Name+`" already exists`)
			return
		}
		f.secrets[s.Metadata.Name] = &s
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	default:
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
		status(http.StatusMethodNotAllowed, "not expected")
	}
}

func (f *fakeAPI) takeRequests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.requests
	f.requests = nil
	return out
}

// newFakeCluster starts the fake API over TLS and lays out a service account
// directory (token, ca.crt, namespace) as a pod has it; the client is built by
// inClusterClient from the same environment variables a pod gets.
func newFakeCluster(t *testing.T) (*fakeAPI, *kubeClient) {
	t.Helper()
	f := &fakeAPI{t: t, token: "tok-" + t.Name(), ns: "hero", secrets: map[string]*k8sSecret{}}
	srv := httptest.NewTLSServer(f)
	t.Cleanup(srv.Close)
	sa := t.TempDir()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for name, body := range map[string][]byte{"ca.crt": caPEM, "token": []byte(f.token + "\n"), "namespace": []byte("hero")} {
		if err := os.WriteFile(filepath.Join(sa, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(srv.URL)
	env := map[string]string{"KUBERNETES_SERVICE_HOST": u.Hostname(), "KUBERNETES_SERVICE_PORT": u.Port()}
	k, ns, err := inClusterClient(func(k string) string { return env[k] }, sa)
	if err != nil {
		t.Fatal(err)
	}
	if ns != "hero" {
		t.Fatalf("namespace %q from the service account directory", ns)
	}
	return f, k
}

func testOptions() k8sSecretsOptions {
	return k8sSecretsOptions{Namespace: "hero", Prefix: "rel", Certs: true, Users: true, OperatorKey: true,
		Labels: map[string]string{"app.kubernetes.io/instance": "rel"},
		PKI:    tlsx.PKI{APIHosts: []string{"rel-supervisor-daemon", "api.example.com"}, RedisHosts: []string{"rel-redis"}, Validity: 24 * time.Hour}}
}

var allSecrets = []string{"rel-ca", "rel-api-tls", "rel-mycelium-gateway-tls", "rel-operator-tls", "rel-redis-tls",
	"rel-router-tls", "rel-runner-tls", "rel-scheduler-tls", "rel-supervisor-daemon-tls", "rel-redis-users", "rel-operator-key"}

func gets(names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, "GET /api/v1/namespaces/hero/secrets/"+n)
	}
	return out
}

func posts(n int) []string {
	var out []string
	for range n {
		out = append(out, "POST /api/v1/namespaces/hero/secrets")
	}
	return out
}

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("not PEM: %.40q", b)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verifyLeaf checks that a kubernetes.io/tls Secret holds a certificate issued by
// caPEM for the name, with its matching key.
func verifyLeaf(t *testing.T, s *k8sSecret, caPEM []byte, dnsName string) *x509.Certificate {
	t.Helper()
	if s.Type != "kubernetes.io/tls" {
		t.Errorf("%s: type %q", s.Metadata.Name, s.Type)
	}
	if !bytes.Equal(s.Data["ca.crt"], caPEM) {
		t.Errorf("%s: ca.crt is not the CA", s.Metadata.Name)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := parseCert(t, s.Data["tls.crt"])
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("%s: certificate does not verify for %s: %v", s.Metadata.Name, dnsName, err)
	}
	if !bytes.Contains(s.Data["tls.key"], []byte("PRIVATE KEY")) {
		t.Errorf("%s: tls.key is not a PEM key", s.Metadata.Name)
	}
	return c
}

// A first run in an empty namespace: it reads every Secret of the layout (all
// missing), then creates them, the CA first; the certificates chain to the CA and
// name what they must; the Redis users' Secret holds the ACL file (hashes only) and
// one password per user that matches its hash.
func TestK8sSecretsFirstRun(t *testing.T) {
	f, k := newFakeCluster(t)
	created, kept, err := syncSecrets(context.Background(), k, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(created, allSecrets) || len(kept) != 0 {
		t.Fatalf("created %v kept %v, want created %v", created, kept, allSecrets)
	}
	if got, want := f.takeRequests(), append(gets(allSecrets...), posts(len(allSecrets))...); !slices.Equal(got, want) {
		t.Fatalf("requests:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	ca := f.secrets["rel-ca"]
	if ca.Type != "kubernetes.io/tls" || !bytes.Equal(ca.Data["ca.crt"], ca.Data["tls.crt"]) || !parseCert(t, ca.Data["tls.crt"]).IsCA {
		t.Fatalf("rel-ca: not a CA Secret with tls.crt = ca.crt")
	}
	caPEM := ca.Data["tls.crt"]
	for _, s := range tlsx.Services {
		sec := f.secrets["rel-"+s+"-tls"]
		c := verifyLeaf(t, sec, caPEM, tlsx.ServiceName(s))
		if len(sec.Data) != 3 {
			t.Errorf("%s: keys %v, want ca.crt tls.crt tls.key", sec.Metadata.Name, keysOfData(sec))
		}
		if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) || !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
			t.Errorf("%s: not for both client and server use", sec.Metadata.Name)
		}
	}
	verifyLeaf(t, f.secrets["rel-api-tls"], caPEM, "api.example.com")
	verifyLeaf(t, f.secrets["rel-api-tls"], caPEM, "rel-supervisor-daemon")
	verifyLeaf(t, f.secrets["rel-redis-tls"], caPEM, "rel-redis")
	verifyLeaf(t, f.secrets["rel-operator-tls"], caPEM, tlsx.ServiceName("operator"))
	for _, n := range allSecrets {
		if got := f.secrets[n].Metadata.Labels["app.kubernetes.io/instance"]; got != "rel" {
			t.Errorf("%s: label app.kubernetes.io/instance=%q", n, got)
		}
	}

	users := f.secrets["rel-redis-users"]
	if users.Type != "Opaque" {
		t.Errorf("rel-redis-users: type %q", users.Type)
	}
	acl := string(users.Data[redisacl.ACLFile])
	// The default user stays on (Redis replays its AOF as that user) with a password
	// nothing has: no "nopass", no password in clear.
	if !strings.HasPrefix(acl, "user default on #") || strings.Contains(acl, "nopass") {
		t.Errorf("ACL file does not start with a password-protected default user:\n%s", acl)
	}
	for _, u := range redisacl.Users() {
		pw := strings.TrimSpace(string(users.Data[redisacl.PasswordFile(u.Name)]))
		if len(pw) < 32 {
			t.Errorf("user %s: password of %d characters", u.Name, len(pw))
			continue
		}
		sum := sha256.Sum256([]byte(pw))
		if !strings.Contains(acl, "user "+u.Name+" on #"+hex.EncodeToString(sum[:])+" ") {
			t.Errorf("ACL file has no line for %s with its password's hash", u.Name)
		}
		if strings.Contains(acl, pw) {
			t.Errorf("ACL file holds %s's password in clear", u.Name)
		}
	}
}

func keysOfData(s *k8sSecret) []string {
	var out []string
	for k := range s.Data {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A second run changes nothing: it only reads. A deleted leaf Secret is issued
// again by the existing CA, and only it is created; the Redis users' Secret, when
// deleted, comes back with new passwords while the certificates stay.
func TestK8sSecretsKeepAndReissue(t *testing.T) {
	f, k := newFakeCluster(t)
	if _, _, err := syncSecrets(context.Background(), k, testOptions()); err != nil {
		t.Fatal(err)
	}
	f.takeRequests()
	before := map[string]string{}
	for n, s := range f.secrets {
		b, _ := json.Marshal(s)
		before[n] = string(b)
	}

	created, kept, err := syncSecrets(context.Background(), k, testOptions())
	if err != nil || len(created) != 0 || !slices.Equal(kept, allSecrets) {
		t.Fatalf("second run: created %v kept %v err %v", created, kept, err)
	}
	if got := f.takeRequests(); !slices.Equal(got, gets(allSecrets...)) {
		t.Fatalf("second run made requests other than the GETs: %v", got)
	}

	oldScheduler := parseCert(t, f.secrets["rel-scheduler-tls"].Data["tls.crt"])
	oldPW := f.secrets["rel-redis-users"].Data[redisacl.PasswordFile("runner")]
	delete(f.secrets, "rel-scheduler-tls")
	delete(f.secrets, "rel-redis-users")
	created, _, err = syncSecrets(context.Background(), k, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"rel-scheduler-tls", "rel-redis-users"}; !slices.Equal(created, want) {
		t.Fatalf("created %v, want %v", created, want)
	}
	if got, want := f.takeRequests(), append(gets(allSecrets...), posts(2)...); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	c := verifyLeaf(t, f.secrets["rel-scheduler-tls"], f.secrets["rel-ca"].Data["tls.crt"], tlsx.ServiceName("scheduler"))
	if c.SerialNumber.Cmp(oldScheduler.SerialNumber) == 0 {
		t.Error("the scheduler's certificate was not issued again")
	}
	if bytes.Equal(f.secrets["rel-redis-users"].Data[redisacl.PasswordFile("runner")], oldPW) {
		t.Error("a new Redis users' Secret kept an old password")
	}
	for n, s := range f.secrets {
		if n == "rel-scheduler-tls" || n == "rel-redis-users" {
			continue
		}
		if b, _ := json.Marshal(s); string(b) != before[n] {
			t.Errorf("%s changed", n)
		}
	}
}

// Refusals: leaf certificates without the CA's Secret (its key is gone), a leaf
// from another CA, a Secret without a key, an API error, a conflict on create. In
// none of these is anything created before the error.
func TestK8sSecretsRefusals(t *testing.T) {
	t.Run("CA missing but leaves exist", func(t *testing.T) {
		f, k := newFakeCluster(t)
		if _, _, err := syncSecrets(context.Background(), k, testOptions()); err != nil {
			t.Fatal(err)
		}
		delete(f.secrets, "rel-ca")
		f.takeRequests()
		_, _, err := syncSecrets(context.Background(), k, testOptions())
		if err == nil || !strings.Contains(err.Error(), "rel-ca is missing") {
			t.Fatalf("err %v", err)
		}
		if slices.ContainsFunc(f.takeRequests(), func(r string) bool { return strings.HasPrefix(r, "POST") }) {
			t.Error("created a Secret anyway")
		}
	})
	t.Run("leaf from another CA", func(t *testing.T) {
		f, k := newFakeCluster(t)
		if _, _, err := syncSecrets(context.Background(), k, testOptions()); err != nil {
			t.Fatal(err)
		}
		f.secrets["rel-router-tls"].Data["ca.crt"] = []byte("-----BEGIN CERTIFICATE-----\nother\n-----END CERTIFICATE-----\n")
		delete(f.secrets, "rel-runner-tls")
		f.takeRequests()
		_, _, err := syncSecrets(context.Background(), k, testOptions())
		if err == nil || !strings.Contains(err.Error(), "rel-router-tls: its ca.crt is not the CA") {
			t.Fatalf("err %v", err)
		}
		if slices.ContainsFunc(f.takeRequests(), func(r string) bool { return strings.HasPrefix(r, "POST") }) {
			t.Error("created a Secret anyway")
		}
	})
	t.Run("Secret without a key", func(t *testing.T) {
		f, k := newFakeCluster(t)
		f.secrets["rel-redis-users"] = &k8sSecret{APIVersion: "v1", Kind: "Secret", Metadata: k8sMeta{Name: "rel-redis-users"}, Data: map[string][]byte{redisacl.ACLFile: []byte("user default off\n")}}
		_, _, err := syncSecrets(context.Background(), k, testOptions())
		if err == nil || !strings.Contains(err.Error(), "rel-redis-users exists without key") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		f, k := newFakeCluster(t)
		f.failGet = http.StatusForbidden
		_, _, err := syncSecrets(context.Background(), k, testOptions())
		if err == nil || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "cannot get resource") {
			t.Fatalf("err %v", err)
		}
		if got := f.takeRequests(); !slices.Equal(got, gets("rel-ca")) {
			t.Errorf("requests after a refused GET: %v", got)
		}
	})
	t.Run("conflict on create", func(t *testing.T) {
		f, k := newFakeCluster(t)
		f.conflict = "rel-ca"
		created, _, err := syncSecrets(context.Background(), k, testOptions())
		if err == nil || !strings.Contains(err.Error(), "already exists") || len(created) != 0 {
			t.Fatalf("created %v err %v", created, err)
		}
		if len(f.secrets) != 0 {
			t.Errorf("went on after the CA's conflict: %d Secrets", len(f.secrets))
		}
	})
}

// With cert-manager making the certificates the Job handles the Redis users only:
// it neither reads nor writes a certificate Secret. Without Redis users, only
// certificates.
func TestK8sSecretsParts(t *testing.T) {
	f, k := newFakeCluster(t)
	o := testOptions()
	o.Certs, o.OperatorKey = false, false
	created, _, err := syncSecrets(context.Background(), k, o)
	if err != nil || !slices.Equal(created, []string{"rel-redis-users"}) {
		t.Fatalf("created %v err %v", created, err)
	}
	if got, want := f.takeRequests(), append(gets("rel-redis-users"), posts(1)...); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	f, k = newFakeCluster(t)
	o = testOptions()
	o.Certs, o.Users = false, false
	created, _, err = syncSecrets(context.Background(), k, o)
	if err != nil || !slices.Equal(created, []string{"rel-operator-key"}) {
		t.Fatalf("created %v err %v", created, err)
	}
	if key, err := hex.DecodeString(strings.TrimSpace(string(f.secrets["rel-operator-key"].Data[redisacl.OperatorKeyFile]))); err != nil || len(key) != 32 {
		t.Fatalf("rel-operator-key holds no key of 32 bytes in hex: %v", err)
	}
	f, k = newFakeCluster(t)
	o = testOptions()
	o.Users = false
	created, _, err = syncSecrets(context.Background(), k, o)
	if err != nil || slices.Contains(created, "rel-redis-users") || len(created) != len(allSecrets)-1 {
		t.Fatalf("created %v err %v", created, err)
	}
	o.Certs, o.OperatorKey = false, false
	if _, _, err := syncSecrets(context.Background(), k, o); err == nil {
		t.Error("a run with nothing to do did not fail")
	}
}

// The command itself outside a pod says so, and checks its flags.
func TestK8sSecretsCommand(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	var out, errw bytes.Buffer
	if code := run(context.Background(), []string{"pki", "k8s-secrets", "--prefix", "rel"}, &out, &errw); code != 1 || !strings.Contains(errw.String(), "not running in a Kubernetes pod") {
		t.Errorf("outside a pod: exit %d, %q", code, errw.String())
	}
	errw.Reset()
	if code := run(context.Background(), []string{"pki", "k8s-secrets"}, &out, &errw); code != 2 || !strings.Contains(errw.String(), "--prefix is required") {
		t.Errorf("without --prefix: exit %d, %q", code, errw.String())
	}
	errw.Reset()
	if code := run(context.Background(), []string{"pki", "k8s-secrets", "--prefix", "rel", "--label", "novalue"}, &out, &errw); code != 2 || !strings.Contains(errw.String(), "want KEY=VALUE") {
		t.Errorf("bad --label: exit %d, %q", code, errw.String())
	}
}
