package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// --admin-secret-file (HERO_ADMIN_SECRET_FILE): the operator secret is the file's first
// line that is neither blank nor a comment (supervisor-daemon's generated file, as
// compose mounts it); --admin-secret wins over it; a missing file is named when an
// operator command needs the secret.
func TestAdminSecretFile(t *testing.T) {
	fake, _ := fakeDispatcherServer(t)
	addr := fake.addr
	dir := t.TempDir()
	file := filepath.Join(dir, "admin-secret")
	if err := os.WriteFile(file, []byte("# operator secrets\n\n  hero_from-the-file-0123456789  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(g *globals) error {
		g.addr, g.plain, g.output, g.timeout = addr, true, "table", 5*time.Second
		var out, errw bytes.Buffer
		c := &cli{g: g, out: &out, errw: &errw}
		return c.dispatch(context.Background(), []string{"dispatcher", "run", "--worker", "local", "--script", "echo hi"})
	}
	if err := run(&globals{secretFile: file}); err != nil {
		t.Fatal(err)
	}
	if err := run(&globals{secret: "s3cret-s3cret-s3cret", secretFile: file}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"Bearer hero_from-the-file-0123456789", "Bearer s3cret-s3cret-s3cret"}; strings.Join(fake.auth, ",") != strings.Join(want, ",") {
		t.Fatalf("the server got %v, want %v", fake.auth, want)
	}
	missing := filepath.Join(dir, "none")
	if err := run(&globals{secretFile: missing}); err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("a missing secret file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(&globals{secretFile: empty}); err == nil || !strings.Contains(err.Error(), "holds no secret") {
		t.Fatalf("a file without a secret: %v", err)
	}
	if len(fake.auth) != 2 {
		t.Fatalf("the server got %d requests, want 2", len(fake.auth))
	}
}
