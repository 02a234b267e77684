package auth

import (
	"crypto/ed25519"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docExample reads the worked example of docs/api.md ("Signed requests"): its
// "name: value" lines between the signing-example markers.
func docExample(t *testing.T) (map[string]string, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "<!-- signing-example: begin -->")
	end := strings.Index(doc, "<!-- signing-example: end -->")
	if start < 0 || end < start {
		t.Fatal("docs/api.md has no signing example between its markers")
	}
	block := doc[start:end]
	pb, pe := strings.Index(block, "-----BEGIN PRIVATE KEY-----"), strings.Index(block, "-----END PRIVATE KEY-----")
	if pb < 0 || pe < pb {
		t.Fatal("the signing example has no PEM private key")
	}
	var pem []string
	for _, l := range strings.Split(block[pb:pe+len("-----END PRIVATE KEY-----")], "\n") {
		pem = append(pem, strings.TrimSpace(l))
	}
	vals := map[string]string{}
	for _, line := range strings.Split(block, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && !strings.HasPrefix(k, " ") && k != "private key" {
			vals[k] = strings.TrimSpace(v)
		}
	}
	return vals, strings.Join(pem, "\n") + "\n"
}

// The worked example in docs/api.md is what this package computes: the key, the
// digest, the canonical string and the signature.
func TestDocsWorkedExample(t *testing.T) {
	ex, pem := docExample(t)
	key, err := ParsePrivateKeyPEM([]byte(pem))
	if err != nil {
		t.Fatalf("the example's key %q: %v", pem, err)
	}
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	if !key.Equal(ed25519.NewKeyFromSeed(seed)) {
		t.Fatal("the example's PEM is not the key of seed 00 01 … 1f")
	}
	if got := PublicKeyHex(key.Public().(ed25519.PublicKey)); got != ex["pubkey"] {
		t.Fatalf("pubkey: doc %s, computed %s", ex["pubkey"], got)
	}
	d := Digest([]byte(ex["body"]))
	if got := hex.EncodeToString(d[:]); got != ex["body sha256"] {
		t.Fatalf("body sha256: doc %s, computed %s", ex["body sha256"], got)
	}
	actor, _ := strconv.ParseUint(ex["actor"], 10, 32)
	ts, _ := strconv.ParseInt(ex["timestamp"], 10, 64)
	canon := Canonical(uint32(actor), ex["target"], ts, ex["nonce"], d)
	b, _ := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if !strings.Contains(string(b), "```\n"+canon+"\n```") {
		t.Fatalf("docs/api.md does not show the canonical string\n%s", canon)
	}
	sig := hex.EncodeToString(ed25519.Sign(key, []byte(canon)))
	if sig != ex["signature"] {
		t.Fatalf("signature: doc %s, computed %s", ex["signature"], sig)
	}
	// And the server's check accepts exactly that request.
	p, err := Parse(Credentials{Actor: ex["actor"], Timestamp: ex["timestamp"], Nonce: ex["nonce"], Signature: ex["signature"]})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verify(key.Public().(ed25519.PublicKey), ex["target"], d) {
		t.Fatal("the example does not verify")
	}
	// Its values spelled otherwise (the same numbers, the same bytes) are refused.
	for name, c := range map[string]Credentials{
		"+timestamp":           {Actor: ex["actor"], Timestamp: "+" + ex["timestamp"], Nonce: ex["nonce"], Signature: ex["signature"]},
		"upper-case signature": {Actor: ex["actor"], Timestamp: ex["timestamp"], Nonce: ex["nonce"], Signature: strings.ToUpper(ex["signature"])},
		"actor 007":            {Actor: "00" + ex["actor"], Timestamp: ex["timestamp"], Nonce: ex["nonce"], Signature: ex["signature"]},
	} {
		if _, err := Parse(c); err == nil {
			t.Errorf("the example with %s was accepted", name)
		}
	}
}

func TestSignVerify(t *testing.T) {
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _, _ := GenerateKey()
	now := time.Unix(1795600000, 0)
	s := &Signer{Actor: 3, Key: priv, Now: func() time.Time { return now }}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"job.list","params":{"context_id":1}}`)
	c, err := s.Sign(JSONRPCTarget, Digest(body))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Actor != 3 || p.Timestamp != now.Unix() || !ValidNonce(p.Nonce) {
		t.Fatalf("parsed %+v", p)
	}
	if !p.Verify(pub, JSONRPCTarget, Digest(body)) {
		t.Fatal("a good signature does not verify")
	}
	if p.Skew(now.Add(90*time.Second)) != -90*time.Second {
		t.Fatalf("skew %v", p.Skew(now.Add(90*time.Second)))
	}
	altered := append([]byte(nil), body...)
	altered[len(altered)-3] = '2'
	for name, ok := range map[string]bool{
		"other key":     p.Verify(otherPub, JSONRPCTarget, Digest(body)),
		"no key":        p.Verify(nil, JSONRPCTarget, Digest(body)),
		"altered body":  p.Verify(pub, JSONRPCTarget, Digest(altered)),
		"other target":  p.Verify(pub, "/hero.v1.Coordinator/ListJobs", Digest(body)),
		"other actor":   Parsed{Actor: 4, Timestamp: p.Timestamp, Nonce: p.Nonce, Signature: p.Signature}.Verify(pub, JSONRPCTarget, Digest(body)),
		"other nonce":   Parsed{Actor: 3, Timestamp: p.Timestamp, Nonce: p.Nonce + "x", Signature: p.Signature}.Verify(pub, JSONRPCTarget, Digest(body)),
		"other instant": Parsed{Actor: 3, Timestamp: p.Timestamp + 1, Nonce: p.Nonce, Signature: p.Signature}.Verify(pub, JSONRPCTarget, Digest(body)),
	} {
		if ok {
			t.Errorf("%s: verified", name)
		}
	}
	// Two signatures of the same request differ in their nonces.
	c2, _ := s.Sign(JSONRPCTarget, Digest(body))
	if c2.Nonce == c.Nonce {
		t.Fatal("nonce repeated")
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	good := Credentials{Actor: "1", Timestamp: "1795600000", Nonce: "0123456789abcdef", Signature: strings.Repeat("ab", 64)}
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mod  func(*Credentials)
		want string
	}{
		"no actor":       {func(c *Credentials) { c.Actor = "" }, "missing X-Hero-Actor"},
		"actor 0":        {func(c *Credentials) { c.Actor = "0" }, "X-Hero-Actor is not an actor id"},
		"actor word":     {func(c *Credentials) { c.Actor = "bob" }, "X-Hero-Actor is not an actor id"},
		"time word":      {func(c *Credentials) { c.Timestamp = "now" }, "X-Hero-Timestamp is not a unix time"},
		"short nonce":    {func(c *Credentials) { c.Nonce = "abc" }, "X-Hero-Nonce must be 16 to 64"},
		"nonce chars":    {func(c *Credentials) { c.Nonce = "0123456789abcdef:" }, "X-Hero-Nonce must be"},
		"long nonce":     {func(c *Credentials) { c.Nonce = strings.Repeat("a", 65) }, "X-Hero-Nonce must be"},
		"signature hex":  {func(c *Credentials) { c.Signature = strings.Repeat("zz", 64) }, "X-Hero-Signature is not the hex"},
		"signature size": {func(c *Credentials) { c.Signature = "abcd" }, "X-Hero-Signature is not the hex"},
		"nothing":        {func(c *Credentials) { *c = Credentials{} }, "missing X-Hero-Actor, X-Hero-Timestamp, X-Hero-Nonce, X-Hero-Signature"},
		// Another spelling of a value the canonical string spells one way.
		"+timestamp":            {func(c *Credentials) { c.Timestamp = "+1795600000" }, "X-Hero-Timestamp must be the unix time in decimal digits"},
		"timestamp zeros":       {func(c *Credentials) { c.Timestamp = "01795600000" }, "X-Hero-Timestamp must be the unix time in decimal digits"},
		"actor zeros":           {func(c *Credentials) { c.Actor = "01" }, "X-Hero-Actor must be the actor id in decimal digits"},
		"+actor":                {func(c *Credentials) { c.Actor = "+1" }, "X-Hero-Actor is not an actor id"},
		"upper-case signature":  {func(c *Credentials) { c.Signature = strings.Repeat("AB", 64) }, "X-Hero-Signature must be lowercase hex"},
		"mixed-case signature":  {func(c *Credentials) { c.Signature = "Ab" + strings.Repeat("ab", 63) }, "X-Hero-Signature must be lowercase hex"},
		"space before the time": {func(c *Credentials) { c.Timestamp = " 1795600000" }, "X-Hero-Timestamp is not a unix time"},
	} {
		c := good
		tc.mod(&c)
		if _, err := Parse(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys", "actor-1.pem")
	pub, priv, _ := GenerateKey()
	if err := WritePrivateKey(path, priv, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", st.Mode().Perm())
	}
	if err := WritePrivateKey(path, priv, false); !os.IsExist(err) {
		t.Fatalf("an existing key was overwritten: %v", err)
	}
	got, err := LoadPrivateKey(path)
	if err != nil || !got.Equal(priv) {
		t.Fatalf("load: %v", err)
	}
	if _, err := ParsePublicKeyHex(PublicKeyHex(pub)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"pk-1", strings.Repeat("g", 64), strings.Repeat("a", 62)} {
		if _, err := ParsePublicKeyHex(bad); err == nil {
			t.Errorf("pubkey %q accepted", bad)
		}
	}
	if _, err := ParsePrivateKeyPEM([]byte("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n")); err == nil {
		t.Fatal("an RSA PEM block was taken for an Ed25519 key")
	}
	// OpenSSL reads the file and derives the same public key (interoperability).
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	out, err := exec.Command("openssl", "pkey", "-in", path, "-pubout", "-outform", "DER").Output()
	if err != nil {
		t.Fatalf("openssl pkey: %v", err)
	}
	if len(out) < 32 || hex.EncodeToString(out[len(out)-32:]) != PublicKeyHex(pub) {
		t.Fatalf("openssl's public key %x is not %s", out, PublicKeyHex(pub))
	}
}

// Python's cryptography reads the key file and makes signatures this package
// verifies: a client in another language can implement the scheme from the docs.
func TestPythonClientInterop(t *testing.T) {
	if err := exec.Command("python3", "-c", "import cryptography").Run(); err != nil {
		t.Skip("python3 with the cryptography package is not installed")
	}
	path := filepath.Join(t.TempDir(), "k.pem")
	pub, priv, _ := GenerateKey()
	if err := WritePrivateKey(path, priv, false); err != nil {
		t.Fatal(err)
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"job.list","params":{"context_id":1}}`
	script := `
import hashlib, sys
from cryptography.hazmat.primitives.serialization import load_pem_private_key
key = load_pem_private_key(open(sys.argv[1], 'rb').read(), None)
canon = "\n".join(["HERO-ED25519-V1", "5", "POST /", "1795600000", "abcdefabcdefabcdef", hashlib.sha256(sys.argv[2].encode()).hexdigest()])
print(key.sign(canon.encode()).hex())
`
	out, err := exec.Command("python3", "-c", script, path, body).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	p, err := Parse(Credentials{Actor: "5", Timestamp: "1795600000", Nonce: "abcdefabcdefabcdef", Signature: strings.TrimSpace(string(out))})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verify(pub, JSONRPCTarget, Digest([]byte(body))) {
		t.Fatal("a signature made by Python's cryptography does not verify")
	}
}
