package main

import (
	"context"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// maxDebounce bounds a submission's debounce window.
const maxDebounce = 24 * time.Hour

// debounceParams are a job.submit item's debounce (docs/scheduling.md): of the
// submissions with one debounce_key within the window (debounce, a duration), only
// the last runs, at the end of its window; the others end cancelled.
type debounceParams struct {
	DebounceKey string `json:"debounce_key,omitempty"`
	Debounce    string `json:"debounce,omitempty"`
}

// window checks the debounce of an item (zero: none); where prefixes the fields'
// names in errors. A debounce delays the job itself: run_at and delay are refused
// with it.
func (d debounceParams) window(where string, delayed bool) (time.Duration, error) {
	if d.DebounceKey == "" && d.Debounce == "" {
		return 0, nil
	}
	if d.DebounceKey == "" || len(d.DebounceKey) > model.MaxConcurrencyKeyLen || strings.ContainsAny(d.DebounceKey, " \t\r\n") {
		return 0, invalidParams(where+"debounce_key", "%sdebounce_key must be 1 to %d bytes without spaces, tabs or line breaks, with a debounce window", where, model.MaxConcurrencyKeyLen)
	}
	w, err := time.ParseDuration(d.Debounce)
	if err != nil || w < time.Millisecond || w > maxDebounce {
		return 0, invalidParams(where+"debounce", "%sdebounce %q is not a window from 1ms to %s (\"5s\", \"1m\")", where, d.Debounce, maxDebounce)
	}
	if delayed {
		return 0, invalidParams(where+"debounce", "%sdebounce with run_at or delay: the debounce window delays the job; give one", where)
	}
	return w, nil
}

// debounce makes each job of res submitted with a debounce key its key's pending job,
// cancelling the one it replaces while that one waits (store.Debounce), in the order
// of the items.
func (s *service) debounce(ctx context.Context, db *store.DB, items []submitItem, res []store.Submitted, actor string) error {
	for i, r := range res {
		if i >= len(items) || items[i].DebounceKey == "" || r.Existing {
			continue
		}
		w, _ := items[i].window("", false)
		prev, err := db.Debounce(ctx, items[i].DebounceKey, r.Job, w, actor)
		if err != nil {
			return err
		}
		if prev != "" && s.metrics != nil {
			s.metrics.debounced.Inc()
		}
	}
	return nil
}
