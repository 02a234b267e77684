package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// zygoteBinary builds hero-zygote from zygote/zygote.c (as make build does) into the
// temporary directory, once per version of its source.
func zygoteBinary(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed: hero-zygote cannot be built")
	}
	src, err := filepath.Abs(filepath.Join("zygote", "zygote.c"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	exe := filepath.Join(os.TempDir(), "hero-zygote-test-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	if err := BuildZygote(src, exe); err != nil {
		t.Fatal(err)
	}
	return exe
}

// newForkSandbox is newAheadSandbox with forking sandboxes (max of them).
func newForkSandbox(t *testing.T, max int) *Sandbox {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed (apt-get install bubblewrap)")
	}
	scratch, err := os.MkdirTemp("", "hero-sbx-scratch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(scratch) })
	if err := os.Chmod(scratch, 0o777); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Options{UID: 61000, GID: 61000, Binds: []string{scratch}, Ahead: AheadOptions{Max: max}, Fork: true, Zygote: zygoteBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if s.opt.Zygote == "" {
		t.Fatalf("no forking sandbox: %s", s.noFork)
	}
	return s
}
