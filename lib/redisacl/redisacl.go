// Package redisacl writes the Redis ACL users of a deployment: one user per service,
// one for Hero Dispatcher clients (seed 000) and one for operators, each with its own
// random password, and an ACL file for redis-server (--aclfile) that holds only the
// passwords' SHA-256 (so it may be readable by the Redis server's user).
//
// What the users limit: contexts are databases, and ACL key patterns span every
// database, so the users attribute commands (CLIENT LIST, ACL LOG, the slow log name
// the user) and deny the dangerous ones (CONFIG, FLUSHALL, DEBUG, MODULE, SHUTDOWN,
// KEYS, MONITOR, …); they do not keep a service out of a context. docs/security.md.
package redisacl

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hero-coordinator/hero/lib/fsx"
)

// User is one ACL user: its name and its rules after "on #<password hash>".
type User struct {
	Name  string
	Rules string
}

// Besides these, the "default" user is on with every right and a random password
// that nothing uses: Redis replays its append-only file as the default user, and with
// that user off a restart drops every transaction (MULTI/EXEC) of the file. Clients
// that do not log in get NOAUTH.
//
// Users are the deployment's users. Every service may run every command but the
// dangerous ones (-@dangerous); supervisor-daemon also FLUSHDB (context.delete
// empties the context's database). Hero Dispatcher clients reach only hero:* keys,
// and may not load, replace or delete Redis functions (FUNCTION): the store's scripts
// are functions that the services call by name, and a replaced one would run with a
// service's rights.
// The operator user may do anything (redis-cli for people).
func Users() []User {
	svc := "~* &* +@all -@dangerous"
	return []User{
		{"supervisor-daemon", svc + " +flushdb"},
		{"scheduler", svc},
		{"router", svc},
		{"runner", svc},
		{"mycelium-gateway", svc},
		{"dispatcher", "~hero:* &* +@all -@dangerous -function"},
		{"operator", "~* &* +@all"},
	}
}

// ACLFile is the name of the ACL file in the directory.
const ACLFile = "redis-users.acl"

// PasswordFile is the name of a user's password file in the directory.
func PasswordFile(user string) string { return "redis-password-" + user }

// Init writes a password file (mode 0600) for each user that has none, and the ACL
// file from them (mode 0644: it holds hashes only). It returns the users whose
// passwords it made.
func Init(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var made []string
	var acl strings.Builder
	for _, u := range append([]User{{"default", "~* &* +@all"}}, Users()...) {
		path := filepath.Join(dir, PasswordFile(u.Name))
		pw, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			buf := make([]byte, 24)
			if _, err := rand.Read(buf); err != nil {
				return nil, err
			}
			pw = []byte(hex.EncodeToString(buf))
			if err := fsx.WriteFile(path, append(pw, '\n'), 0o600); err != nil {
				return nil, err
			}
			made = append(made, u.Name)
		} else if err != nil {
			return nil, err
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(string(pw))))
		fmt.Fprintf(&acl, "user %s on #%s %s\n", u.Name, hex.EncodeToString(sum[:]), u.Rules)
	}
	return made, fsx.WriteFile(filepath.Join(dir, ACLFile), []byte(acl.String()), 0o644)
}
