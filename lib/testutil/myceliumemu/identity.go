package myceliumemu

import (
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
)

// Identity is what a node is known by on the overlay: its x25519 public key
// (64 hex characters, as Mycelium prints them), the overlay address derived
// from that key and the /64 subnet holding it.
type Identity struct {
	Name   string       `json:"name"`
	PK     string       `json:"pk"`
	IP     netip.Addr   `json:"ip"`
	Subnet netip.Prefix `json:"subnet"`
}

// DeriveIdentity returns the identity of node name in a network with the given
// seed. It is deterministic: the private key is SHA-256 of the seed and the
// name, the public key is its X25519 public key, so two processes (or compose
// services) configured with the same seed and names agree on every key.
func DeriveIdentity(seed, name string) Identity {
	sum := sha256.Sum256([]byte("hero mycelium-emulator identity v1\x00" + seed + "\x00" + name))
	priv, err := ecdh.X25519().NewPrivateKey(sum[:])
	if err != nil { // cannot happen: any 32 bytes are an X25519 private key
		panic(fmt.Sprintf("myceliumemu: x25519 key: %v", err))
	}
	pub := priv.PublicKey().Bytes()
	ip := addressOf(pub)
	return Identity{Name: name, PK: hex.EncodeToString(pub), IP: ip, Subnet: netip.PrefixFrom(ip, 64).Masked()}
}

// addressOf maps a public key to its overlay address in 400::/7, the way
// Mycelium does it but with SHA-256 where Mycelium uses BLAKE3 (the standard
// library has no BLAKE3): the first 16 bytes of the hash, with the first byte
// forced to 0x04 or 0x05. The addresses therefore differ from what a real node
// would compute for the same key; within the emulator they are consistent.
func addressOf(pk []byte) netip.Addr {
	h := sha256.Sum256(pk)
	var a [16]byte
	copy(a[:], h[:16])
	a[0] = 0x04 | (a[0] & 0x01)
	return netip.AddrFrom16(a)
}

// addressOfHex is addressOf for a hex key; ok is false if pk is not 64 hex
// characters.
func addressOfHex(pk string) (netip.Addr, bool) {
	if len(pk) != 64 {
		return netip.Addr{}, false
	}
	b, err := hex.DecodeString(pk)
	if err != nil {
		return netip.Addr{}, false
	}
	return addressOf(b), true
}
