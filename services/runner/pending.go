package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hero-coordinator/hero/lib/fsx"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// Job ends that Redis could not take (it was restarting, failing over) are kept in
// memory and retried; and, from the first failed write on, also in a file of the
// state directory (--state-dir), so that a process stopped meanwhile (SIGTERM, or
// even SIGKILL) hands them to its restart under the same worker id, which writes them
// before anything else instead of running the jobs again. A written end's file is
// removed. The finish script only takes an end from the claim that holds the job, so
// an end applied late (or twice) never overwrites another run's.

// pendingEnd is one end in its file: the claim, the job as claimed, the outcome.
type pendingEnd struct {
	ContextID uint32           `json:"context_id"`
	Claim     store.Claim      `json:"claim"`
	Job       *model.Job       `json:"job"`
	Outcome   store.JobOutcome `json:"outcome"`
}

// pendingFile is where one end waits: <state dir>/<ctx>-<caller>-<job>-<claim>.json.
func (r *runner) pendingFile(f store.Finish) string {
	return filepath.Join(r.cfg.StateDir, fmt.Sprintf("%d-%d-%d-%s.json", f.DB.ContextID, f.Job.CallerID, f.Job.ID, f.Claim.ID))
}

// savePending writes an end's file durably (fsx.WriteFile: synced, renamed in whole).
func (r *runner) savePending(f store.Finish) (string, error) {
	b, err := json.Marshal(pendingEnd{ContextID: f.DB.ContextID, Claim: *f.Claim, Job: f.Job, Outcome: f.Outcome})
	if err != nil {
		return "", err
	}
	path := r.pendingFile(f)
	if err := fsx.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// loadPending reads the ends a previous process of this worker id left; unreadable
// files are reported and removed.
func (r *runner) loadPending() []pendingEnd {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		r.log.Error().Err(err).Str("state_dir", r.cfg.StateDir).Msg("read the state directory")
		return nil
	}
	var out []pendingEnd
	for _, e := range entries {
		path := filepath.Join(r.cfg.StateDir, e.Name())
		if fsx.IsTemp(e.Name()) {
			_ = os.Remove(path) // a write cut short: its end was never acknowledged as kept
			continue
		}
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(path)
		var p pendingEnd
		if err == nil {
			err = json.Unmarshal(b, &p)
		}
		if err == nil && (p.Job == nil || p.Claim.ID == "") {
			err = fmt.Errorf("incomplete")
		}
		if err != nil {
			r.log.Error().Err(err).Str("file", path).Msg("unreadable job end in the state directory: removed")
			_ = os.Remove(path)
			continue
		}
		out = append(out, p)
	}
	return out
}
