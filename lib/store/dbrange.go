package store

import (
	"fmt"
	"strings"
)

// NoDatabaseError is a context whose database the Redis server does not have: its id
// is beyond the server's `databases` setting. Ctx refuses such a context before
// anything is sent (the store learns the setting at its start, with CONFIG GET or,
// for a Redis user without CONFIG, with SELECTs: countDatabases); this error is the
// safety net for a server that has fewer databases than it had then, putting Redis's
// refusal to SELECT the database in words that name the context.
type NoDatabaseError struct {
	ContextID uint32
	Server    string
}

func (e *NoDatabaseError) Error() string {
	return fmt.Sprintf("context %d does not exist here: redis at %s has no database %d (contexts are limited by its `databases` setting)", e.ContextID, e.Server, e.ContextID)
}

// noDatabase returns a NoDatabaseError for err when it is Redis's "ERR DB index is out
// of range" (the SELECT of context ctxID's database), else nil.
func (d *DB) noDatabase(err error) error {
	if err == nil || !strings.Contains(err.Error(), "DB index is out of range") {
		return nil
	}
	return &NoDatabaseError{ContextID: d.ContextID, Server: d.srv.Name}
}
