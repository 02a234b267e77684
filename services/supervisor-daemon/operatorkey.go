package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/fsx"
	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/redisacl"
	"github.com/hero-coordinator/hero/lib/store"
)

// The operator secrets' HMAC key (operatorSecrets.key) lives in a file,
// --operator-secret-key-file (heroctl pki init makes it; lib/redisacl), not in Redis:
// no Redis user — a service's, a backup's reader — can mint an accepted verifier with
// it. Redis keeps only the key's mark ("file:" and a hash of the key, keyMark), so that
//
//   - a file holding another key is refused while stored secrets (coord:operator_secrets)
//     depend on the key that made them, instead of silently refusing them all;
//   - a supervisor-daemon of a version that kept the key in Redis refuses to start
//     (the mark is no key) instead of making a new one.
//
// A deployment whose key is in Redis (coord:operator_secret_key holds it, hex) has it
// moved at the first start with the flag: written into the file (or the file is found
// to hold it), then replaced by its mark. Without the flag the key stays in Redis, as
// before (a warning says so).

// keyMarkPrefix begins the mark of a key kept in a file.
const keyMarkPrefix = "file:"

// keyMark is what Redis keeps of a key kept in a file.
func keyMark(key []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("hero operator secret key mark"))
	return keyMarkPrefix + hex.EncodeToString(h.Sum(nil)[:8])
}

// operatorSecretKey returns the HMAC key: from the file path (made, or moved out of
// Redis, when needed), or from Redis without a path.
func operatorSecretKey(ctx context.Context, st *store.Store, path string, log zerolog.Logger) ([]byte, error) {
	rec, err := st.OperatorSecretKeyRecord(ctx)
	if err != nil {
		return nil, err
	}
	if path == "" {
		if strings.HasPrefix(rec, keyMarkPrefix) {
			return nil, fmt.Errorf("the operator secrets' HMAC key is kept in a file (%s says so): set --operator-secret-key-file", keys.OperatorSecretKey)
		}
		log.Warn().Msg("the operator secrets' HMAC key is kept in Redis (" + keys.OperatorSecretKey + "): whoever may read it there can mint an accepted operator secret; set --operator-secret-key-file (heroctl pki init makes the file) to move it out")
		return st.OperatorSecretKey(ctx)
	}
	stored, err := st.OperatorSecretCount(ctx)
	if err != nil {
		return nil, err
	}
	k := keyFile{path: path, stored: stored, log: log}
	var key []byte
	switch {
	case rec == "":
		key, err = k.own()
	case strings.HasPrefix(rec, keyMarkPrefix):
		key, err = k.marked(rec)
	default:
		key, err = k.moveOut(rec)
	}
	if err != nil {
		return nil, err
	}
	if mark := keyMark(key); mark != rec {
		if err := st.SetOperatorSecretKeyRecord(ctx, mark); err != nil {
			return nil, err
		}
	}
	return key, nil
}

// keyFile is the key's file and what depends on its key.
type keyFile struct {
	path   string
	stored int64 // stored operator secrets (their fingerprints and verifiers come from the key)
	log    zerolog.Logger
}

// read returns the file's key, nil when there is no file.
func (k keyFile) read() ([]byte, error) {
	key, err := redisacl.ReadOperatorKey(k.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("--operator-secret-key-file: %v", err)
	}
	return key, nil
}

// create writes key into a new file; a file made meanwhile (another replica) is read.
func (k keyFile) create(key []byte) ([]byte, error) {
	err := redisacl.WriteOperatorKey(k.path, key)
	if errors.Is(err, os.ErrExist) {
		return k.read()
	}
	if err != nil {
		return nil, fmt.Errorf("--operator-secret-key-file: %v", err)
	}
	return key, nil
}

// own: Redis knows no key. The file's is taken, or a new one made into the file.
func (k keyFile) own() ([]byte, error) {
	key, err := k.read()
	if key != nil || err != nil {
		return key, err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if key, err = k.create(key); err == nil {
		k.log.Warn().Str("file", k.path).Msg("made the operator secrets' HMAC key (there was none): it is in the file, readable by its owner only")
	}
	return key, err
}

// marked: the key is kept in a file, whose key must be the marked one while stored
// secrets depend on it.
func (k keyFile) marked(rec string) ([]byte, error) {
	key, err := k.read()
	switch {
	case err != nil:
		return nil, err
	case key == nil && k.stored > 0:
		return nil, fmt.Errorf("--operator-secret-key-file %s does not exist, and the key that made the %d stored operator secrets is kept in it (%s): restore the file", k.path, k.stored, keys.OperatorSecretKey)
	case key == nil:
		return k.own()
	case keyMark(key) != rec && k.stored > 0:
		return nil, fmt.Errorf("--operator-secret-key-file %s holds another key than the one that made the %d stored operator secrets (%s holds its mark): restore the file's key, or delete %s to start over (every stored secret is then refused)",
			k.path, k.stored, keys.OperatorSecretKey, keys.OperatorSecrets)
	}
	return key, nil
}

// moveOut: Redis holds the key (hex), as versions before the file kept it. It is moved
// into the file: written there, or found there already. A file holding another key is
// replaced by Redis's when stored secrets depend on Redis's, if it may be written.
func (k keyFile) moveOut(rec string) ([]byte, error) {
	key, err := hex.DecodeString(rec)
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("operator secret key: %s is neither hex of at least 16 bytes nor the mark of a key file", keys.OperatorSecretKey)
	}
	have, err := k.read()
	switch {
	case err != nil:
		return nil, err
	case have == nil:
		if have, err = k.create(key); err != nil {
			return nil, fmt.Errorf("%w (moving the operator secrets' HMAC key out of Redis into it)", err)
		}
		if !hmac.Equal(have, key) {
			return k.moveOut(rec)
		}
	case hmac.Equal(have, key):
	case k.stored == 0:
		key = have // nothing depends on Redis's key
	default:
		if err := fsx.WriteFile(k.path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("--operator-secret-key-file %s holds another key than %s, which made the %d stored operator secrets, and cannot be replaced by it (%v): write that key into the file (redis-cli --user operator GET %s)",
				k.path, keys.OperatorSecretKey, k.stored, err, keys.OperatorSecretKey)
		}
	}
	k.log.Warn().Str("file", k.path).Msg("moved the operator secrets' HMAC key out of Redis into the file; Redis keeps only its mark")
	return key, nil
}
