// Package redisacl writes the Redis ACL users of a deployment: one user per service,
// one for Hero Dispatcher clients (seed 000) and one for operators, each with its own
// random password, and an ACL file for redis-server (--aclfile) that holds only the
// passwords' SHA-256 (so it may be readable by the Redis server's user).
//
// Each service's user may run only the commands its code runs (also those its scripts
// run: Redis checks every command and key of a script against the caller's user) on
// the keys it uses. Authentication material (AuthKeys) is supervisor-daemon's alone;
// so are the contexts' records (their roles) for writing, and FUNCTION LOAD and DELETE
// (the store's scripts are functions that every service calls by name: lib/store,
// script.go), which is why its rights include every other service's.
//
// What the users cannot limit: contexts are databases, and ACL key patterns hold in
// every database, so a service that serves every context may reach every context's
// keys. docs/security.md ("Redis") has the table and what one stolen password gives.
package redisacl

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hero-coordinator/hero/lib/fsx"
	"github.com/hero-coordinator/hero/lib/keys"
)

// User is one ACL user: its name and its rules after "on #<password hash>".
type User struct {
	Name  string
	Rules string
}

// AuthKeys are the keys (patterns) of authentication material: actors' public keys,
// the operator secrets' verifiers (and their HMAC key, when a deployment still keeps it
// in Redis), the legacy unsalted secret hashes, the used nonces of signed requests,
// the actors' id counter and index. Only supervisor-daemon (and the operator user)
// reach them.
var AuthKeys = []string{keys.ActorPrefix + "*", keys.OperatorSecrets, keys.OperatorSecretKey, keys.AdminSecrets,
	keys.NoncePrefix + "*", keys.ActorSeq, keys.ActorIndex}

// The key patterns of the users. Redis has no pattern that excludes, so the data keys
// are every key but AuthKeys spelled with character classes: coord:<anything but a, i,
// o, n, s>…, then coord:i…, coord:s… and coord:o… without coord:idx:actors,
// coord:seq:actor and coord:operator_*. Each key of each command (inside a script too)
// is matched against a user's patterns in order: the most used come first
// (TestKeyPatterns checks every key of lib/keys against them).
const (
	// dataKeys: the job and flow path's keys (seed keys and coord:*), neither the
	// authentication material nor the contexts' records.
	dataKeys = "~job:* ~coord:[^aions]* ~coord:idx:[^a]* ~message:* ~queue:* ~msg_* ~flow:* ~runner:* " +
		"~coord:s[^e]* ~coord:seq:[^a]* ~coord:i[^d]* ~coord:ow*"
	// contextsRead: a context's record (its roles, its limits) is read by every
	// service and written only by supervisor-daemon.
	contextsRead = "%R~" + keys.ContextPrefix + "*"
	// heroKeys: the Hero Dispatcher protocol's keys (seed 000).
	heroKeys = "~hero:*"
)

// base are the commands every service runs: its connection's (AUTH, HELLO, SELECT,
// PING, CLIENT SETINFO, …, none of @dangerous), the schema check (GET, SET NX), its
// functions (FCALL; FUNCTION LIST to wait for them) and the record that it calls them
// (HSET coord:functions).
const base = "resetchannels -@all +@connection -@dangerous +get +set +hset +fcall +function|list"

// service is one service's user: its commands (besides base), keys and channels.
type service struct {
	name, commands, keys, channels string
}

// services are the users of the five services but supervisor-daemon, whose rights are
// all of theirs and its own (Users). The commands are what each one's code paths run
// (go-redis calls and the Lua of the scripts it calls), found by reading them and
// checked by the end-to-end suite against a Redis with these users (ACL LOG).
var services = []service{
	{"scheduler",
		"copy del exists expire hdel hget hgetall hincrby hmget hscan incr incrby llen lpos lpush lrange lrem ltrim multi exec publish punsubscribe rpop rpush sadd scard sismember smembers spop srem subscribe time unlink unsubscribe xadd xtrim zadd zcard zrange zrangebyscore zrem zscore",
		dataKeys + " " + contextsRead, "&" + keys.JobDone + " &" + keys.FlowDone + " &" + keys.DelayedWake},
	{"router",
		"blpop del eval exists expire hdel hget hgetall hincrby hmget incr incrby llen lpos lpush lrange lrem ltrim multi exec rpop rpush sadd scard sismember smembers srem time xadd zadd zcard zrange zrangebyscore zrem zscore",
		dataKeys + " " + contextsRead, ""},
	{"runner",
		"append blmove blpop client|unblock copy del dump eval evalsha exists expire hdel hexists hget hgetall hincrby hmget incr incrby lindex llen lpop lpos lpush lrange lrem ltrim multi exec pexpire publish rpop rpush sadd scan scard sismember smembers srem strlen subscribe unsubscribe punsubscribe time xadd zadd zcard zcount zrange zrangebyscore zrem zremrangebyscore zscore",
		dataKeys + " " + heroKeys + " " + contextsRead, "&" + keys.Control + " &" + keys.JobDone + " &" + keys.FlowDone + " &" + keys.LogAppended + " &" + keys.DelayedWake},
	{"mycelium-gateway",
		"del hget hgetall multi exec pexpire pttl publish subscribe unsubscribe punsubscribe",
		"~coord:gateway:* ~" + keys.MessagePrefix + "* ~" + keys.SchemaVersion + " ~" + keys.Functions + " %R~" + keys.JobPrefix + "* " + contextsRead,
		"&coord:gateway:*"},
}

// supervisorOwn are the commands supervisor-daemon runs besides every other service's:
// it loads and deletes the store's functions, empties a deleted context's database
// (FLUSHDB), and reads what the API serves.
const supervisorOwn = "flushdb function|load function|delete hsetnx hlen getrange scan xinfo|stream xrange xread xrevrange zrevrangebyscore"

// Users are the deployment's users. supervisor-daemon may run every command any
// service runs and its own, on every key and channel: it is the most privileged
// service (actors, secrets, contexts), and a function it loaded runs with its
// caller's rights, which are a part of its own. Hero Dispatcher clients reach only
// hero:* keys, no channel, and may not load, replace or delete Redis functions. The
// operator user may do anything (redis-cli for people).
func Users() []User {
	all := strings.Fields(supervisorOwn)
	out := []User{{}}
	for _, s := range services {
		all = append(all, strings.Fields(s.commands)...)
		rules := base + " " + plus(strings.Fields(s.commands)) + " " + s.keys
		if s.channels != "" {
			rules += " " + s.channels
		}
		out = append(out, User{s.name, rules})
	}
	slices.Sort(all)
	out[0] = User{"supervisor-daemon", base + " " + plus(slices.Compact(all)) + " ~* &*"}
	return append(out,
		User{"dispatcher", "~hero:* resetchannels +@all -@dangerous -function"},
		User{"operator", "~* &* +@all"})
}

// plus spells commands as ACL rules (+cmd).
func plus(cmds []string) string {
	var b strings.Builder
	for i, c := range cmds {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("+" + c)
	}
	return b.String()
}

// ACLFile is the name of the ACL file in the directory.
const ACLFile = "redis-users.acl"

// PasswordFile is the name of a user's password file in the directory.
func PasswordFile(user string) string { return "redis-password-" + user }

// Besides Users, the "default" user is on with every right and a random password
// that nothing uses: Redis replays its append-only file as the default user, and with
// that user off a restart drops every transaction (MULTI/EXEC) of the file. Clients
// that do not log in get NOAUTH.

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

// OperatorKeyFile is the name of the file, in the directory, of the HMAC key under which
// supervisor-daemon keeps the operator secrets' verifiers (--operator-secret-key-file):
// hex of 32 random bytes, mode 0600. Out of Redis, it is no Redis user's to read: the
// verifiers alone do not let anyone mint an accepted secret.
const OperatorKeyFile = "operator-secret-key"

// InitOperatorKey writes the key file into dir unless it exists; made says whether it
// did.
func InitOperatorKey(dir string) (made bool, err error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return false, err
	}
	err = WriteOperatorKey(filepath.Join(dir, OperatorKeyFile), key)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	return err == nil, err
}

// WriteOperatorKey writes key, in hex, to a new file (mode 0600); an existing file is
// an error (os.ErrExist), never replaced.
func WriteOperatorKey(path string, key []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, hex.EncodeToString(key))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}

// ReadOperatorKey reads a key file: hex of at least 16 bytes (os.ErrNotExist when
// there is no file).
func ReadOperatorKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("%s does not hold an operator secret key (hex of at least 16 bytes)", path)
	}
	return key, nil
}
