package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hero-coordinator/hero/lib/fsx"
)

// PublicKeyHexLen is the length of an actor's pubkey: 32 bytes as lowercase hex (the
// shape of a Mycelium key).
const PublicKeyHexLen = 2 * ed25519.PublicKeySize

// GenerateKey returns a new Ed25519 key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// PublicKeyHex is how an actor's pubkey is written: 64 lowercase hex characters.
func PublicKeyHex(pub ed25519.PublicKey) string { return hex.EncodeToString(pub) }

// ParsePublicKeyHex reads an actor's pubkey (64 hex characters, either case).
func ParsePublicKeyHex(s string) (ed25519.PublicKey, error) {
	if len(s) != PublicKeyHexLen {
		return nil, fmt.Errorf("an Ed25519 public key is %d hex characters, not %d", PublicKeyHexLen, len(s))
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, errors.New("an Ed25519 public key is hex (0-9, a-f)")
	}
	return ed25519.PublicKey(b), nil
}

// MarshalPrivateKeyPEM writes a private key as PKCS#8 PEM ("PRIVATE KEY"), which Go's
// crypto/x509, Python's cryptography, WebCrypto and OpenSSL all read.
func MarshalPrivateKeyPEM(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKeyPEM reads a PKCS#8 PEM Ed25519 private key.
func ParsePrivateKeyPEM(b []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block (want a PKCS#8 \"PRIVATE KEY\")")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("PEM block is %q, want a PKCS#8 \"PRIVATE KEY\"", block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PKCS#8: %v", err)
	}
	ed, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the key is a %T, not Ed25519", k)
	}
	return ed, nil
}

// LoadPrivateKey reads a key file.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return k, nil
}

// WritePrivateKey writes a key file with mode 0600, creating its directory (0700).
// An existing file is not overwritten unless replace is set; a replaced file is
// swapped in whole (fsx.WriteFile).
func WritePrivateKey(path string, key ed25519.PrivateKey, replace bool) error {
	b, err := MarshalPrivateKeyPEM(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if !replace {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := f.Write(b); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	}
	return fsx.WriteFile(path, b, 0o600)
}

// ConfigDir is where heroctl keeps actor keys: $HERO_CONFIG_DIR, else
// $XDG_CONFIG_HOME/hero, else ~/.config/hero.
func ConfigDir() (string, error) {
	if d := strings.TrimSpace(os.Getenv("HERO_CONFIG_DIR")); d != "" {
		return d, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory (set HERO_CONFIG_DIR): %v", err)
	}
	return filepath.Join(d, "hero"), nil
}

// ActorKeyPath is the default key file of an actor: <config dir>/keys/actor-<id>.pem.
func ActorKeyPath(actor uint32) (string, error) {
	d, err := ConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "keys", fmt.Sprintf("actor-%d.pem", actor)), nil
}
