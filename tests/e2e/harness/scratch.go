package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// Jobs run in a sandbox that shows them only their own work directory and the
// runner's --sandbox-bind directories. Stacks started here bind ScratchRoot, so that
// a test can hand its jobs a directory they can write (ScratchDir) — jobs run as
// another uid, hence the open modes.

// ScratchRoot is the directory every runner the harness starts lets its jobs write.
func ScratchRoot() string { return filepath.Join(os.TempDir(), "hero-e2e-scratch") }

// ScratchDir is a directory for one test that its jobs can read and write.
func ScratchDir(t testing.TB) string {
	t.Helper()
	if err := os.MkdirAll(ScratchRoot(), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(ScratchRoot(), 0o1777)
	dir, err := os.MkdirTemp(ScratchRoot(), "t-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
