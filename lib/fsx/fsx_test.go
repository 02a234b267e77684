package fsx

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key.pem")
	if err := WriteFile(path, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Replacing a file: the new content and mode, and no temporary file left.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if b, _ := os.ReadFile(path); err != nil || string(b) != "two" || st.Mode().Perm() != 0o600 {
		t.Fatalf("after the second write: %q, mode %v, %v", b, st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("files left: %v", entries)
	}
	// A directory that does not exist: an error, nothing made.
	if err := WriteFile(filepath.Join(dir, "no", "such"), []byte("x"), 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
	// Its temporary files are told apart from the files it writes.
	f, err := os.CreateTemp(dir, ".key.pem"+tempMark+"*")
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if !IsTemp(f.Name()) || IsTemp(path) || IsTemp(filepath.Join(dir, ".hidden")) {
		t.Errorf("IsTemp(%s)=%v IsTemp(%s)=%v", f.Name(), IsTemp(f.Name()), path, IsTemp(path))
	}
}
