package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/redisacl"
	"github.com/hero-coordinator/hero/lib/tlsx"
)

// `heroctl pki k8s-secrets` runs inside a Kubernetes pod (the Helm chart's
// pre-install/pre-upgrade hook Job): it makes what `pki init` makes and stores it in
// Secrets of the pod's namespace, creating only the Secrets that are missing. It
// talks to the Kubernetes API with plain HTTPS and the pod's service account (token
// and CA from the mounted service account directory), and needs exactly `get` and
// `create` on Secrets.
//
// Each run first reads the Secrets that exist into a private temporary directory, so
// that a missing leaf certificate is issued by the existing CA and existing Redis
// passwords stay; then `pki init` fills in what is missing; then the missing Secrets
// are created, the CA first. Existing Secrets are never changed: to renew a
// certificate, delete its Secret and run the Job again (helm upgrade).

// defaultSADir is where Kubernetes mounts a pod's service account credentials.
const defaultSADir = "/var/run/secrets/kubernetes.io/serviceaccount"

// secretSpec is one Secret of the layout: the suffix of its name after the prefix,
// its type, and where each of its keys comes from in the PKI directory.
type secretSpec struct {
	suffix string
	typ    string
	files  map[string]string // Secret key → file name in the directory
	leaf   bool              // a certificate issued by the CA
}

// secretLayout lists the Secrets, the CA first. Certificates: kubernetes.io/tls
// Secrets with ca.crt, tls.crt and tls.key (the layout cert-manager writes); the CA's
// Secret holds its key (tls.key) and is read only to issue certificates. Redis users:
// one Opaque Secret holding the ACL file (hashes only) and each user's password. The
// operator secrets' HMAC key: one Opaque Secret (supervisor-daemon's
// --operator-secret-key-file).
func secretLayout(certs, users, operatorKey bool) []secretSpec {
	var out []secretSpec
	if certs {
		out = append(out, secretSpec{suffix: "ca", typ: "kubernetes.io/tls", files: map[string]string{"tls.crt": "ca.pem", "tls.key": "ca-key.pem", "ca.crt": "ca.pem"}})
		leaves := append([]string{"api", "redis", "operator"}, tlsx.Services...)
		sort.Strings(leaves)
		for _, n := range leaves {
			out = append(out, secretSpec{suffix: n + "-tls", typ: "kubernetes.io/tls", leaf: true,
				files: map[string]string{"tls.crt": n + ".pem", "tls.key": n + "-key.pem", "ca.crt": "ca.pem"}})
		}
	}
	if users {
		files := map[string]string{redisacl.ACLFile: redisacl.ACLFile}
		for _, u := range redisacl.Users() {
			files[redisacl.PasswordFile(u.Name)] = redisacl.PasswordFile(u.Name)
		}
		out = append(out, secretSpec{suffix: "redis-users", typ: "Opaque", files: files})
	}
	if operatorKey {
		out = append(out, secretSpec{suffix: "operator-key", typ: "Opaque", files: map[string]string{redisacl.OperatorKeyFile: redisacl.OperatorKeyFile}})
	}
	return out
}

// k8sSecret is the part of a v1 Secret this command reads and writes.
type k8sSecret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   k8sMeta           `json:"metadata"`
	Type       string            `json:"type,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"` // base64 in JSON, as the API has it
}

type k8sMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// kubeClient is a minimal in-cluster client of the Kubernetes API for Secrets.
type kubeClient struct {
	base      string // https://host:port
	tokenFile string // re-read on every request: bound tokens are rotated
	http      *http.Client
}

// errAlreadyExists: a create answered 409 (someone else created the Secret).
var errAlreadyExists = errors.New("already exists")

// inClusterClient builds the client the way client-go's in-cluster config does:
// the API at KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, verified with the
// service account's ca.crt, authenticated with its token. It also returns the pod's
// namespace (saDir/namespace).
func inClusterClient(getenv func(string) string, saDir string) (*kubeClient, string, error) {
	host, port := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, "", errors.New("not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT unset)")
	}
	caPEM, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, "", fmt.Errorf("service account CA: %v (is automountServiceAccountToken off?)", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, "", fmt.Errorf("service account CA %s: no certificate", filepath.Join(saDir, "ca.crt"))
	}
	tokenFile := filepath.Join(saDir, "token")
	if _, err := os.Stat(tokenFile); err != nil {
		return nil, "", fmt.Errorf("service account token: %v", err)
	}
	ns, _ := os.ReadFile(filepath.Join(saDir, "namespace"))
	return &kubeClient{
		base:      "https://" + net.JoinHostPort(host, port),
		tokenFile: tokenFile,
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			Proxy:           nil, // the API server is reached directly, never through a proxy
		}},
	}, strings.TrimSpace(string(ns)), nil
}

func (k *kubeClient) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	tok, err := os.ReadFile(k.tokenFile)
	if err != nil {
		return 0, nil, fmt.Errorf("service account token: %v", err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, k.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, b, err
}

func secretsPath(ns string) string {
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/secrets"
}

// apiError describes a failed call by its status and the API's message (a Status
// object names the object and the reason, never a Secret's data).
func apiError(what string, code int, body []byte) error {
	var st struct {
		Message string `json:"message"`
	}
	msg := http.StatusText(code)
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	return fmt.Errorf("%s: HTTP %d: %s", what, code, msg)
}

// getSecret returns the Secret, or nil when it does not exist (404).
func (k *kubeClient) getSecret(ctx context.Context, ns, name string) (*k8sSecret, error) {
	code, body, err := k.do(ctx, http.MethodGet, secretsPath(ns)+"/"+url.PathEscape(name), nil)
	what := "get Secret " + ns + "/" + name
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	switch code {
	case http.StatusOK:
		var s k8sSecret
		if err := json.Unmarshal(body, &s); err != nil {
			return nil, fmt.Errorf("%s: %v", what, err)
		}
		return &s, nil
	case http.StatusNotFound:
		return nil, nil
	}
	return nil, apiError(what, code, body)
}

// createSecret creates the Secret; errAlreadyExists when it exists (409).
func (k *kubeClient) createSecret(ctx context.Context, ns string, s *k8sSecret) error {
	body, err := json.Marshal(s)
	if err != nil {
		return err
	}
	code, resp, err := k.do(ctx, http.MethodPost, secretsPath(ns), body)
	what := "create Secret " + ns + "/" + s.Metadata.Name
	if err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	switch code {
	case http.StatusCreated, http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("%s: %w (created meanwhile by another run? run again)", what, errAlreadyExists)
	}
	return apiError(what, code, resp)
}

// k8sSecretsOptions are the settings of one run.
type k8sSecretsOptions struct {
	Namespace string
	Prefix    string            // Secret names: <prefix>-ca, <prefix>-<service>-tls, …
	Labels    map[string]string // on every Secret created
	Certs     bool              // the CA and the certificates
	Users     bool              // the Redis ACL users
	// OperatorKey: the operator secrets' HMAC key (lib/redisacl, OperatorKeyFile).
	OperatorKey bool
	PKI         tlsx.PKI // hosts and validity (Dir is set here)
}

// syncSecrets makes and stores what is missing; it returns the names of the
// Secrets it created and of those it kept.
func syncSecrets(ctx context.Context, k *kubeClient, o k8sSecretsOptions) (created, kept []string, err error) {
	layout := secretLayout(o.Certs, o.Users, o.OperatorKey)
	if len(layout) == 0 {
		return nil, nil, errors.New("nothing to do: certificates, Redis users and the operator key are all off")
	}
	dir, err := os.MkdirTemp("", "hero-pki-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)

	existing, err := readSecrets(ctx, k, o, layout)
	if err != nil {
		return nil, nil, err
	}
	if o.Certs {
		if err := checkIssuer(o, layout, existing); err != nil {
			return nil, nil, err
		}
	}
	// What exists goes into the directory, so that pki init keeps it.
	if err := writeExisting(dir, layout, existing); err != nil {
		return nil, nil, err
	}
	if err := makeMissing(dir, o); err != nil {
		return nil, nil, err
	}
	return createMissing(ctx, k, o, dir, layout, existing)
}

func (o k8sSecretsOptions) name(s secretSpec) string { return o.Prefix + "-" + s.suffix }

// readSecrets reads the layout's Secrets that exist (by suffix); one without a key
// of the layout is an error.
func readSecrets(ctx context.Context, k *kubeClient, o k8sSecretsOptions, layout []secretSpec) (map[string]*k8sSecret, error) {
	existing := map[string]*k8sSecret{}
	for _, s := range layout {
		sec, err := k.getSecret(ctx, o.Namespace, o.name(s))
		if err != nil {
			return nil, err
		}
		if sec == nil {
			continue
		}
		for key := range s.files {
			if len(sec.Data[key]) == 0 {
				return nil, fmt.Errorf("Secret %s exists without key %q: repair it or delete it (a new one is made on the next run)", o.name(s), key)
			}
		}
		existing[s.suffix] = sec
	}
	return existing, nil
}

// checkIssuer refuses leaf certificates whose CA is gone or is not the CA Secret's.
func checkIssuer(o k8sSecretsOptions, layout []secretSpec, existing map[string]*k8sSecret) error {
	ca := existing["ca"]
	for _, s := range layout {
		leaf := existing[s.suffix]
		if !s.leaf || leaf == nil {
			continue
		}
		if ca == nil {
			return fmt.Errorf("Secret %s is missing but %s exists: its certificates were issued by a CA whose key is gone; delete the %s-*-tls Secrets too to start over with a new CA (then restart every pod)", o.name(layout[0]), o.name(s), o.Prefix)
		}
		if !bytes.Equal(leaf.Data["ca.crt"], ca.Data["tls.crt"]) {
			return fmt.Errorf("Secret %s: its ca.crt is not the CA of %s; delete it to have it issued again", o.name(s), o.name(layout[0]))
		}
	}
	return nil
}

func writeExisting(dir string, layout []secretSpec, existing map[string]*k8sSecret) error {
	for _, s := range layout {
		sec := existing[s.suffix]
		if sec == nil {
			continue
		}
		for key, file := range s.files {
			if err := os.WriteFile(filepath.Join(dir, file), sec.Data[key], 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// makeMissing runs pki init's steps in dir: what is there is kept.
func makeMissing(dir string, o k8sSecretsOptions) error {
	if o.Certs {
		p := o.PKI
		p.Dir = dir
		if _, err := p.Init(); err != nil {
			return fmt.Errorf("certificates: %v", err)
		}
	}
	if o.Users {
		if _, err := redisacl.Init(dir); err != nil {
			return fmt.Errorf("redis users: %v", err)
		}
	}
	if o.OperatorKey {
		if _, err := redisacl.InitOperatorKey(dir); err != nil {
			return fmt.Errorf("operator key: %v", err)
		}
	}
	return nil
}

// createMissing creates the Secrets that did not exist, in the layout's order.
func createMissing(ctx context.Context, k *kubeClient, o k8sSecretsOptions, dir string, layout []secretSpec, existing map[string]*k8sSecret) (created, kept []string, err error) {
	for _, s := range layout {
		if existing[s.suffix] != nil {
			kept = append(kept, o.name(s))
			continue
		}
		sec := &k8sSecret{APIVersion: "v1", Kind: "Secret", Type: s.typ, Data: map[string][]byte{},
			Metadata: k8sMeta{Name: o.name(s), Namespace: o.Namespace, Labels: o.Labels}}
		for key, file := range s.files {
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				return created, kept, err
			}
			sec.Data[key] = b
		}
		if err := k.createSecret(ctx, o.Namespace, sec); err != nil {
			return created, kept, err
		}
		created = append(created, o.name(s))
	}
	return created, kept, nil
}

// pkiK8s parses `pki k8s-secrets` and runs it in the pod.
func (c *cli) pkiK8s(fs *flag.FlagSet) action {
	prefix := fs.String("prefix", "", "the Secrets' name prefix (required)")
	ns := fs.String("namespace", "", "the namespace (default: the pod's)")
	certs := fs.Bool("certs", true, "make the CA and the certificates")
	users := fs.Bool("redis-users", true, "make the Redis ACL users")
	opKey := fs.Bool("operator-key", true, "make the operator secrets' HMAC key (supervisor-daemon's --operator-secret-key-file)")
	var labels multiFlag
	fs.Var(&labels, "label", "a label `KEY=VALUE` on every Secret created (repeatable)")
	hosts := addHostFlags(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 || *prefix == "" || *hosts.days == 0 {
			return usageErr("pki k8s-secrets --prefix NAME [flags] (--prefix is required, --days at least 1; heroctl pki k8s-secrets --help)")
		}
		lbl, err := parseKV("label", labels)
		if err != nil {
			return err
		}
		k, podNS, err := inClusterClient(os.Getenv, defaultSADir)
		if err != nil {
			return fmt.Errorf("pki k8s-secrets: %v", err)
		}
		if *ns == "" {
			*ns = podNS
		}
		if *ns == "" {
			return usageErr("pki k8s-secrets: no --namespace and none in %s/namespace", defaultSADir)
		}
		o := k8sSecretsOptions{Namespace: *ns, Prefix: *prefix, Labels: lbl, Certs: *certs, Users: *users, OperatorKey: *opKey, PKI: hosts.pki("", false)}
		created, kept, err := syncSecrets(ctx, k, o)
		report(c.out, *ns, created, kept)
		if err != nil {
			return fmt.Errorf("pki k8s-secrets: %v", err)
		}
		return nil
	}
}

func report(w io.Writer, ns string, created, kept []string) {
	if len(created) > 0 {
		fmt.Fprintf(w, "pki: created in namespace %s: %s\n", ns, strings.Join(created, " "))
	}
	if len(kept) > 0 {
		fmt.Fprintf(w, "pki: kept (already there): %s\n", strings.Join(kept, " "))
	}
}
