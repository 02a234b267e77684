package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Remote execution (mycelium-gateway): what the router of each node keeps in Redis.

// AcceptInbound stores a message from another node and queues it on msg_in. dedup
// names the message across deliveries (the origin's key and message): a second
// delivery within ttl changes nothing and reports duplicate.
func (d *DB) AcceptInbound(ctx context.Context, m *model.Message, dedup string, ttl time.Duration) (msgKey string, duplicate bool, err error) {
	now := time.Now()
	m.ContextID = d.ContextID
	m.ID = 0
	m.CreatedAt, m.UpdatedAt, m.CreatedAtMs = now.Unix(), now.Unix(), now.UnixMilli()
	if m.Status == "" {
		m.Status = model.MessageDispatched
	}
	if ttl <= 0 {
		ttl = 7 * 24 * time.Hour
	}
	a := &acceptInboundArgs{MsgInKey: keys.MsgIn, WakeInKey: keys.WakeMsgIn, Ctx: int64(d.ContextID), Dedup: dedup,
		TTL: int64(ttl.Seconds()), Caller: int64(m.CallerID), NowMs: now.UnixMilli()}
	fields := model.HashFields(m)
	for i := 0; i < len(fields); i += 2 {
		if fields[i] != "id" {
			a.Fields = append(a.Fields, fields[i], fields[i+1])
		}
	}
	r, err := a.run(ctx, d)
	if err != nil {
		return "", false, fmt.Errorf("accept inbound message: %w", err)
	}
	if r.Stored == 0 {
		return "", true, nil
	}
	return r.Key, false, nil
}

// InboundKey is the dedup key of a message that came from another node.
func InboundKey(sourcePK, originMsg string) string {
	return keys.Inbound(sourcePK, originMsg)
}

// MaterializeJob writes a job that another node sent, ready to queue.
func (d *DB) MaterializeJob(ctx context.Context, j *model.Job) (created bool, err error) {
	if j.Origin == nil {
		return false, errors.New("materialize: the job has no origin")
	}
	now := time.Now()
	j.ContextID = d.ContextID
	j.Status = model.JobDispatched
	j.CreatedAt, j.UpdatedAt, j.CreatedAtMs = now.Unix(), now.Unix(), now.UnixMilli()
	j.Worker, j.Error, j.ExitCode, j.Result, j.StartedAt, j.FinishedAt, j.StartedAtMs, j.FinishedAtMs = "", "", 0, map[string]string{}, 0, 0, 0, 0
	n, err := (&materializeArgs{JobKey: keys.Job(j.CallerID, j.ID), Caller: int64(j.CallerID), ID: int64(j.ID), OriginMsg: j.Origin.MsgKey,
		NowS: now.Unix(), NowMs: now.UnixMilli(), JobFields: model.HashFields(j)}).run(ctx, d)
	if err != nil {
		return false, scriptErr(err, fmt.Sprintf("materialize job %d:%d", j.CallerID, j.ID))
	}
	return n == 1, nil
}

// ApplyRemoteResult records, on the origin node, the end of a job that ran elsewhere.
func (d *DB) ApplyRemoteResult(ctx context.Context, j *model.Job, worker string) (bool, error) {
	res, _ := json.Marshal(j.Result)
	if j.Result == nil {
		res = []byte("{}")
	}
	a := &applyRemoteResultArgs{JobKey: keys.Job(j.CallerID, j.ID), Caller: int64(j.CallerID), ID: int64(j.ID), Attempt: int64(max(j.Attempt, 1)), St: string(j.Status)}
	a.Fields = []any{"result", string(res), "error", j.Error, "exit_code", j.ExitCode, "worker", worker,
		"started_at", j.StartedAt, "finished_at", j.FinishedAt, "started_at_ms", j.StartedAtMs, "finished_at_ms", j.FinishedAtMs,
		"updated_at", time.Now().Unix(), "fatal", boolArg(j.Fatal)}
	if len(j.ResultJSON) > 0 {
		a.Fields = append(a.Fields, "result_json", string(j.ResultJSON))
	}
	// The µs times, when the far node gave them: a read derives the s and ms ones
	// from them (without, it keeps those written here).
	if j.StartedAtUs != 0 {
		a.Fields = append(a.Fields, "started_at_us", j.StartedAtUs)
	}
	if j.FinishedAtUs != 0 {
		a.Fields = append(a.Fields, "finished_at_us", j.FinishedAtUs)
	}
	n, err := a.run(ctx, d)
	if err != nil {
		return false, fmt.Errorf("record remote result of job %d:%d: %w", j.CallerID, j.ID, err)
	}
	return n == 1, nil
}

// RemoteDue is a request message waiting for an acknowledgement or a result (on the
// node that sent it), or, with Ack, the acknowledgement a job from another node is
// owed unless its result goes back first (on the node that runs it).
type RemoteDue struct {
	ContextID uint32
	MsgKey    string
	Ack       bool   // an acknowledgement to send for the job JobKey
	JobKey    string // job:<caller>:<id>, with Ack
}

// ackDuePrefix marks an acknowledgement's entry in coord:remote_due ("<ctx>|ack|<job
// key>"); a message key never starts with it.
const ackDuePrefix = "ack|"

// AddRemoteDue schedules a check of a remote request at a time (in the DB 0 of the
// context's server, with the rest of its coordination).
func (s *Store) AddRemoteDue(ctx context.Context, ctxID uint32, msgKey string, at time.Time) error {
	return s.Coord(ctxID).ZAdd(ctx, keys.RemoteDue, redis.Z{Score: float64(at.UnixMilli()), Member: strconv.FormatUint(uint64(ctxID), 10) + "|" + msgKey}).Err()
}

// AddAckDue schedules the acknowledgement of a job from another node (jobKey, in
// context ctxID) at a time: sent then unless CancelAckDue came first (its result
// went back). Scheduling it again moves it.
func (s *Store) AddAckDue(ctx context.Context, ctxID uint32, jobKey string, at time.Time) error {
	return s.AddRemoteDue(ctx, ctxID, ackDuePrefix+jobKey, at)
}

// CancelAckDue drops the pending acknowledgement of a job from another node.
func (s *Store) CancelAckDue(ctx context.Context, ctxID uint32, jobKey string) error {
	return s.Coord(ctxID).ZRem(ctx, keys.RemoteDue, strconv.FormatUint(uint64(ctxID), 10)+"|"+ackDuePrefix+jobKey).Err()
}

// PopRemoteDue takes the checks that are due, from every server.
func (s *Store) PopRemoteDue(ctx context.Context, now time.Time, limit int) ([]RemoteDue, error) {
	var e errs
	var out []RemoteDue
	for _, m := range s.popDue(ctx, keys.RemoteDue, now, limit, &e) {
		c, k, ok := strings.Cut(m, "|")
		if !ok {
			continue
		}
		if job, ack := strings.CutPrefix(k, ackDuePrefix); ack {
			out = append(out, RemoteDue{ContextID: parseU32(c), Ack: true, JobKey: job})
			continue
		}
		out = append(out, RemoteDue{ContextID: parseU32(c), MsgKey: k})
	}
	if len(out) == 0 && e.first != nil {
		return nil, e.first
	}
	return out, nil
}

// NextRemoteDue returns when the next check is due (zero if none).
func (s *Store) NextRemoteDue(ctx context.Context) (time.Time, error) {
	return s.nextDue(ctx, keys.RemoteDue)
}

// AckMessage moves a request message sent to another node from dispatched to
// acknowledged (the far node queued its job); acked is false when it was not
// dispatched (gone, or acknowledged already).
func (d *DB) AckMessage(ctx context.Context, msgKey string) (acked bool, err error) {
	now := time.Now()
	n, err := (&ackMessageArgs{MessageKey: msgKey, NowS: now.Unix(), NowMs: now.UnixMilli()}).run(ctx, d)
	if err != nil {
		return false, fmt.Errorf("acknowledge %s: %w", msgKey, err)
	}
	return n == 1, nil
}
