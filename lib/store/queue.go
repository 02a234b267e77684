package store

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// Reliable queues. Producers LPUSH an item onto a list of a context's DB and, in the
// same atomic step, wake tokens in DB 0 of the same server. A job queue's token is the
// context id, pushed onto the wake list of that queue of each runner id that may take
// the job (keys.WakeRunner: the runners of keys.Wakers, or a pinned queue's runner);
// the routers' lists (coord:wake:msg_out, msg_in) take the context id too. Consumers
// block on the wake lists of every queue they serve with one BLPOP per server (one
// connection per server, and a key list of the same size, for any number of contexts),
// then claim with a script that moves the item
// from the queue's right end (FIFO) into the consumer's processing list and gives it a
// lease in coord:leases. The consumer extends the lease while it works and acks the
// item when done. A consumer that dies leaves its items in its processing list; when
// their leases expire, RequeueExpired puts each back on its queue exactly once.

// Claim is an item a consumer holds: in its processing list, under a lease. Each
// claim has its own id, so that the same item claimed twice (a job queued again while
// a first run of it ends) never shares a lease.
type Claim struct {
	Queue, Consumer, Item, ID string
	// Reads: what a script's start reads, when the claim's reply held it (a claim of a
	// few jobs: lua/claim_start.lua); nil: the start reads it.
	Reads *StartReads `json:"-"`
	// Taken: made by a finish's take (Finish.Take): the job's started_at_us is its
	// dependency's end, not when this process went on to start it.
	Taken bool `json:"-"`
}

// StartReads is what a script's start reads besides its job, as stored (encoded
// fields, "" when absent): its context's job limits, its flow's env_vars, the results
// of its direct dependencies in the order of its Dependends.
type StartReads struct {
	JobDefaults, JobMax string
	FlowEnv             string
	DepResults          []string
}

// member is the claim's coord:leases member: "<consumer>\t<queue>\t<item>\t<id>".
func (c *Claim) member() string {
	return c.Consumer + "\t" + c.Queue + "\t" + c.Item + "\t" + c.ID
}

// newClaimID returns 16 random hex digits. A claim id only has to differ from the other
// claims of its item, so it comes from math/rand (no system call: a claim of 64 items
// makes 64 of them).
func newClaimID() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

// Enqueue pushes an item onto a queue of this DB and its wake tokens in DB 0,
// atomically.
func (d *DB) Enqueue(ctx context.Context, queue, item string) error {
	_, err := d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		EnqueueOn(ctx, p, d.ContextID, queue, item)
		return nil
	})
	if err != nil {
		return fmt.Errorf("enqueue on %s of context %d: %w", queue, d.ContextID, err)
	}
	return nil
}

// EnqueueOn queues Enqueue on a pipeline (or transaction) of the context's DB: one
// script, sent whole as an EVAL script (a transaction cannot load a function the
// server does not know and call it again), which leaves the connection's DB as it was.
func EnqueueOn(ctx context.Context, p redis.Pipeliner, ctxID uint32, queue, item string) {
	EnqueueManyOn(ctx, p, ctxID, queue, []any{item})
}

// EnqueueManyOn is EnqueueOn for several items of one queue (in this order), with one
// wake token each.
func EnqueueManyOn(ctx context.Context, p redis.Pipeliner, ctxID uint32, queue string, items []any) {
	c := (&enqueueArgs{QueueKey: queue, Ctx: int64(ctxID), Items: items}).call()
	p.Eval(ctx, c.Script.src, c.Keys, c.Args...)
}

// Claim moves the oldest item of a queue into the consumer's processing list under a
// lease. It returns nil when the queue is empty.
func (d *DB) Claim(ctx context.Context, queue, consumer string, lease time.Duration) (*Claim, error) {
	exp := time.Now().Add(lease).UnixMilli()
	c := &Claim{Queue: queue, Consumer: consumer, ID: newClaimID()}
	item, err := (&claimArgs{QueueKey: queue, ProcKey: keys.Processing(consumer), LeasesKey: keys.Leases,
		Consumer: consumer, QueueName: queue, ExpiryMs: exp, Claim: c.ID}).run(ctx, d)
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim from %s of context %d: %w", queue, d.ContextID, err)
	}
	c.Item = item
	return c, nil
}

// RoutingJobFields are the fields of a job that ClaimMessages reads for a job request:
// what routing it needs (a remote runner's request needs the whole job: load it).
var RoutingJobFields = []string{"id", "caller_id", "context_id", "flow_id", "script_type", "runner_id", "attempt", "status", "function_name", "priority"}

// ClaimedMessage is a claimed message with what routing it needs.
type ClaimedMessage struct {
	*Claim
	Msg map[string]string // the message's hash; empty when the message is gone
	// For a job request: the RoutingJobFields of the job it carries (empty when the
	// job is gone) and the number of runners serving each script type
	// (coord:script_types).
	Job         map[string]string
	ScriptTypes map[string]string
	// Partial: Msg holds only the fields kind and job (a job result); Message reads
	// the whole hash.
	Partial bool
}

// Message returns the claimed message's whole hash, reading it if the claim returned
// only a part of it; empty when the message is gone.
func (d *DB) Message(ctx context.Context, cm *ClaimedMessage) (map[string]string, error) {
	if !cm.Partial {
		return cm.Msg, nil
	}
	h, err := d.HGetAll(ctx, cm.Item)
	if err != nil {
		return nil, fmt.Errorf("read message %s: %w", cm.Item, err)
	}
	cm.Msg, cm.Partial = h, false
	return h, nil
}

// Routed is a job request that ClaimMessages routed itself: its job key went onto
// Queue.
type Routed struct {
	Job, Queue string
}

// ClaimMessages claims up to max messages of a queue (oldest first) under leases and
// reads each, and for a job request its job's routing fields and the served script
// types, in one script; w names the queue's wake list, whose tokens for the messages
// beyond the one the caller holds it removes. With route, plain job requests (no pinned runner, a served
// script type) are routed by the script itself and returned as Routed, not claimed.
// It returns none when the queue is empty.
func (d *DB) ClaimMessages(ctx context.Context, queue, consumer string, lease time.Duration, max int, w Wake, route bool) ([]*ClaimedMessage, []Routed, error) {
	now := time.Now()
	exp := now.Add(lease).UnixMilli()
	wkey, wtoken, held := w.args()
	ids := make([]string, max)
	for i := range ids {
		ids[i] = newClaimID()
	}
	res, err := (&claimMessageArgs{QueueKey: queue, ProcKey: keys.Processing(consumer), LeasesKey: keys.Leases, WakeKey: wkey,
		Consumer: consumer, QueueName: queue, ExpiryMs: exp, Max: int64(max), Token: wtoken, Held: held, Route: route,
		Ctx: int64(d.ContextID), NowS: now.Unix(), Claims: ids}).run(ctx, d)
	if err == redis.Nil {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, &UnansweredClaimError{ClaimIDs: ids, Err: fmt.Errorf("claim from %s of context %d: %w", queue, d.ContextID, err)}
	}
	vals, _ := res.([]any)
	if len(vals) != 3 {
		return nil, nil, fmt.Errorf("claim from %s of context %d: unexpected reply %v", queue, d.ContextID, res)
	}
	types := flatMap(vals[0])
	items, _ := vals[1].([]any)
	out := make([]*ClaimedMessage, 0, len(items))
	for _, it := range items {
		e, _ := it.([]any)
		if len(e) != 5 {
			return nil, nil, fmt.Errorf("claim from %s of context %d: unexpected reply %v", queue, d.ContextID, res)
		}
		c := &Claim{Queue: queue, Consumer: consumer}
		c.Item, _ = e[0].(string)
		c.ID, _ = e[3].(string)
		partial, _ := e[4].(int64)
		out = append(out, &ClaimedMessage{Claim: c, Msg: flatMap(e[1]), Job: flatMap(e[2]), ScriptTypes: types, Partial: partial == 1})
	}
	flat, _ := vals[2].([]any)
	routed := make([]Routed, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		j, _ := flat[i].(string)
		q, _ := flat[i+1].(string)
		routed = append(routed, Routed{Job: j, Queue: q})
	}
	return out, routed, nil
}

// flatMap reads a script's flat field/value list into a map.
func flatMap(v any) map[string]string {
	flat, _ := v.([]any)
	h := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		h[k] = val
	}
	return h
}

// Renewal is what a lease's renewal found.
type Renewal int

const (
	LeaseLost     Renewal = iota // gone: the item went back to its queue and was taken since, or its job ended
	LeaseExtended                // held, and extended
	// LeaseRetaken: a job's lease had expired and been swept (its holder frozen or cut
	// off from Redis past the lease), but no other claim had taken the job since: the
	// claim holds it again, its queued copy removed.
	LeaseRetaken
)

// ExtendLease pushes a held lease's expiry out (RenewLease); false means the lease was
// lost and the consumer should stop working on it.
func (d *DB) ExtendLease(ctx context.Context, c *Claim, lease time.Duration) (bool, error) {
	r, err := d.RenewLease(ctx, c, lease)
	return r != LeaseLost, err
}

// RenewLease pushes a held lease's expiry out. A job's claim whose lease expired and
// was swept, while its job still names the claim and is started (no other claim has
// taken it: the attempt the claim runs is still the job's latest), is taken back in
// the same step (LeaseRetaken): its lease and processing list entry return and the
// job leaves its queue. Any other lease that is gone is lost.
func (d *DB) RenewLease(ctx context.Context, c *Claim, lease time.Duration) (Renewal, error) {
	n, err := (&extendArgs{LeasesKey: keys.Leases, Member: c.member(), ExpiryMs: time.Now().Add(lease).UnixMilli(), Ctx: int64(d.ContextID)}).run(ctx, d)
	if err != nil {
		return LeaseLost, fmt.Errorf("extend lease of %s: %w", c.Item, err)
	}
	switch n {
	case 1:
		return LeaseExtended, nil
	case 2:
		return LeaseRetaken, nil
	}
	return LeaseLost, nil
}

// RoutedJob is a claimed job request and where its job goes.
type RoutedJob struct {
	Claim  *Claim
	Target string // the job queue
	Job    string // the job's key
}

// RouteClaimed acknowledges claimed job request messages (all claimed by one consumer)
// and pushes their jobs onto their queues, atomically; a message no longer held by its
// claim is skipped, so that calling it again after an error never queues a job twice.
// It returns how many it routed.
func (d *DB) RouteClaimed(ctx context.Context, jobs []RoutedJob) (int, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	a := &routeClaimedArgs{ProcKey: keys.Processing(jobs[0].Claim.Consumer), LeasesKey: keys.Leases, Ctx: int64(d.ContextID), NowS: time.Now().Unix(),
		Messages: make([]routeClaimedClaimed, len(jobs))}
	for i, j := range jobs {
		a.Messages[i] = routeClaimedClaimed{Key: j.Claim.Item, Member: j.Claim.member(), Target: j.Target, Job: j.Job}
	}
	routed, err := a.run(ctx, d)
	if err != nil {
		return 0, fmt.Errorf("route claimed job requests of context %d: %w", d.ContextID, err)
	}
	return int(routed), nil
}

// AckOn queues the commands that release a claimed item on a pipeline of its DB.
func AckOn(ctx context.Context, p redis.Pipeliner, c *Claim) {
	p.LRem(ctx, keys.Processing(c.Consumer), 1, c.Item)
	p.ZRem(ctx, keys.Leases, c.member())
}

// AckMessageOn queues, on a pipeline of its DB, the commands that set a claimed
// message's status (and updated_at) and release the claim.
func AckMessageOn(ctx context.Context, p redis.Pipeliner, c *Claim, status model.MessageStatus) {
	p.HSet(ctx, c.Item, "status", string(status), "updated_at", time.Now().Unix())
	AckOn(ctx, p, c)
}

// Ack releases a claimed item: it leaves the processing list and its lease ends.
func (d *DB) Ack(ctx context.Context, c *Claim) error {
	_, err := d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		AckOn(ctx, p, c)
		return nil
	})
	return err
}

// Requeued is an item that went back to its queue after its lease expired.
type Requeued struct {
	Queue, Item string
}

// RequeueExpired returns items whose lease expired to their queues (each exactly once).
// A job keeps naming its claim: its holder, should it come back while no other claim
// has taken the job, still records the run's end or takes the lease back (RenewLease).
func (d *DB) RequeueExpired(ctx context.Context, now time.Time, limit int) ([]Requeued, error) {
	return d.requeue(ctx, now, limit, "", false)
}

// RequeueConsumer puts every item a consumer holds back on its queue, expired or not:
// a consumer that stops hands back what it holds (its jobs keep naming their claims:
// an end left for the restart may still be recorded).
func (d *DB) RequeueConsumer(ctx context.Context, consumer string) ([]Requeued, error) {
	return d.requeue(ctx, time.Now(), 0, consumer, false)
}

// RequeueRestarted is RequeueConsumer for a consumer restarted under the same name:
// the runs of its previous life are gone, so their jobs stop naming their claims.
func (d *DB) RequeueRestarted(ctx context.Context, consumer string) ([]Requeued, error) {
	return d.requeue(ctx, time.Now(), 0, consumer, true)
}

// ReleaseClaims puts the items of some claims of a consumer back on their queues at
// once: claims made by a call whose answer was lost (the consumer never learnt of
// them; without this they would wait out their lease), or whose job the consumer does
// not run. Their jobs stop naming them. Claims that were never made, or are gone, are
// skipped.
func (d *DB) ReleaseClaims(ctx context.Context, consumer string, claimIDs []string) ([]Requeued, error) {
	if len(claimIDs) == 0 {
		return nil, nil
	}
	return d.requeue(ctx, time.Now(), 0, consumer, true, claimIDs...)
}

// UnansweredClaimError is a claim call that failed: if the call reached Redis, the
// claims ClaimIDs may have been made (ReleaseClaims gives them back).
type UnansweredClaimError struct {
	ClaimIDs []string
	Err      error
}

func (e *UnansweredClaimError) Error() string { return e.Err.Error() }
func (e *UnansweredClaimError) Unwrap() error { return e.Err }

func (d *DB) requeue(ctx context.Context, now time.Time, limit int, consumer string, clear bool, claimIDs ...string) ([]Requeued, error) {
	vals, err := (&requeueArgs{LeasesKey: keys.Leases, NowMs: now.UnixMilli(), Limit: int64(limit), Ctx: int64(d.ContextID),
		Consumer: consumer, Clear: clear, Claims: claimIDs}).run(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("requeue leases of context %d: %w", d.ContextID, err)
	}
	out := make([]Requeued, 0, len(vals)/2)
	for i := 0; i+1 < len(vals); i += 2 {
		out = append(out, Requeued{vals[i], vals[i+1]})
	}
	return out, nil
}

// NextLeaseExpiry returns when the earliest lease of the DB expires (zero if none).
func (d *DB) NextLeaseExpiry(ctx context.Context) (time.Time, error) {
	var cmd *redis.ZSliceCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.ZRangeWithScores(ctx, keys.Leases, 0, 0)
		return nil
	}); err != nil {
		return time.Time{}, err
	}
	if len(cmd.Val()) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(cmd.Val()[0].Score)), nil
}

// QueueLen returns the length of a list in this DB.
func (d *DB) QueueLen(ctx context.Context, queue string) (int64, error) {
	var cmd *redis.IntCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.LLen(ctx, queue)
		return nil
	}); err != nil {
		return 0, err
	}
	return cmd.Val(), nil
}

// WakeSet names wake lists in DB 0 of one server.
type WakeSet struct {
	Server *Server
	Keys   []string
}

// Woken is what a WaitWake took: the server and list a token came from, and the token.
// Key is "" when the wait timed out.
type Woken struct {
	Server     *Server
	Key, Token string
}

// Everywhere is the same wake lists on every server (the routers' lists, a runner
// process's stop list): each server's DB 0 has its own, for its own contexts.
func (s *Store) Everywhere(wakeKeys ...string) []WakeSet {
	out := make([]WakeSet, len(s.servers))
	for i, srv := range s.servers {
		out[i] = WakeSet{Server: srv, Keys: wakeKeys}
	}
	return out
}

// ServersOf returns the servers that hold any of the contexts, each once.
func (s *Store) ServersOf(ctxIDs []uint32) []*Server {
	var out []*Server
	for _, c := range ctxIDs {
		if srv := s.ServerFor(c); !slices.Contains(out, srv) {
			out = append(out, srv)
		}
	}
	return out
}

// WakeSetsOn is the same wake lists on each of the servers (a runner's: the lists of
// its queues, on every server that holds a context it serves).
func WakeSetsOn(servers []*Server, wakeKeys ...string) []WakeSet {
	out := make([]WakeSet, len(servers))
	for i, srv := range servers {
		out[i] = WakeSet{Server: srv, Keys: wakeKeys}
	}
	return out
}

// WaitWake blocks until a token arrives on any of the wake lists (or timeout) and
// returns it (Key "" on timeout). It takes one token. It returns ctx's error soon
// after ctx ends: each BLPOP also waits on a private list (keys.WakeStop) into which a
// token is pushed when the wait ends.
//
// Lists of several servers are waited on side by side, one BLPOP each (as many
// blocked connections as servers, whatever the number of contexts): the first token
// ends the wait, the other BLPOPs are ended by their stop lists, and a token one of
// them took meanwhile goes back onto its list (it stands for an item no one claimed).
func (s *Store) WaitWake(ctx context.Context, timeout time.Duration, sets ...WakeSet) (Woken, error) {
	live := sets[:0:0]
	for _, ws := range sets {
		if len(ws.Keys) > 0 {
			live = append(live, ws)
		}
	}
	switch len(live) {
	case 0:
		return Woken{}, errors.New("wait for wake-ups: no wake list")
	case 1:
		return live[0].Server.waitWake(ctx, timeout, live[0].Keys)
	}
	wctx, cancel := context.WithCancel(ctx)
	type result struct {
		w   Woken
		err error
	}
	results := make(chan result, len(live))
	for _, ws := range live {
		go func() {
			w, err := ws.Server.waitWake(wctx, timeout, ws.Keys)
			results <- result{w, err}
		}()
	}
	first := <-results
	cancel()
	if first.err == nil && first.w.Key != "" {
		// The others end soon (their stop lists); a token they took goes back.
		go func() {
			for range len(live) - 1 {
				if r := <-results; r.err == nil && r.w.Key != "" {
					r.w.giveBack(ctx)
				}
			}
		}()
		return first.w, nil
	}
	// A timeout, an error or ctx's end: every wait ends about now; a token one of them
	// took is still the answer.
	out, err := Woken{}, first.err
	for range len(live) - 1 {
		r := <-results
		switch {
		case r.err == nil && r.w.Key != "" && out.Key == "":
			out = r.w
		case r.err == nil && r.w.Key != "":
			r.w.giveBack(ctx)
		case r.err != nil && err == nil && !errors.Is(r.err, context.Canceled):
			err = r.err
		}
	}
	if out.Key != "" {
		return out, nil
	}
	if ctx.Err() != nil {
		return Woken{}, ctx.Err()
	}
	return Woken{}, err
}

// giveBack pushes a token taken by a wait that lost the race back onto its list. If
// that fails the token is lost, as when a consumer dies holding one: the consumers'
// idle claims are the safety net for that.
func (w Woken) giveBack(ctx context.Context) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = w.Server.fixed.LPush(c, w.Key, w.Token).Err()
}

// Discard removes every token like this one from its list (the tokens of a context
// that a consumer found it does not serve).
func (w Woken) Discard(ctx context.Context) error {
	if w.Server == nil || w.Key == "" {
		return nil
	}
	return w.Server.fixed.LRem(ctx, w.Key, 0, w.Token).Err()
}

// waitWake is WaitWake on the lists of this server.
func (srv *Server) waitWake(ctx context.Context, timeout time.Duration, wakeKeys []string) (Woken, error) {
	if err := ctx.Err(); err != nil {
		return Woken{}, err
	}
	stopKey := keys.WakeStop(newClaimID())
	pushed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(pushed)
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		p := srv.fixed.TxPipeline()
		p.LPush(c, stopKey, "stop")
		p.Expire(c, stopKey, time.Minute) // never left behind, whatever happens next
		_, _ = p.Exec(c)
	})
	lists := make([]string, 0, len(wakeKeys)+1)
	lists = append(append(lists, wakeKeys...), stopKey)
	res, err := srv.fixed.BLPop(ctx, timeout, lists...).Result()
	if !stop() {
		// ctx ended: its token may still be on its way or left in the list.
		<-pushed
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = srv.fixed.Del(c, stopKey).Err()
		cancel()
		if err == nil && res[0] != stopKey {
			return Woken{Server: srv, Key: res[0], Token: res[1]}, nil // a real token came first: the caller handles it
		}
		return Woken{}, ctx.Err()
	}
	if err == redis.Nil {
		return Woken{}, nil
	}
	if err != nil {
		return Woken{}, err
	}
	return Woken{Server: srv, Key: res[0], Token: res[1]}, nil
}

// ParseWakeRunner splits a runner's wake list name "coord:wake:runner:<id>:<queue>"
// (keys.WakeRunner).
func ParseWakeRunner(k string) (runnerID uint32, queue string, ok bool) {
	rest, found := strings.CutPrefix(k, keys.WakeRunnerPrefix)
	if !found {
		return 0, "", false
	}
	r, q, found := strings.Cut(rest, ":")
	if !found || q == "" {
		return 0, "", false
	}
	n, err := strconv.ParseUint(r, 10, 32)
	if err != nil {
		return 0, "", false
	}
	return uint32(n), q, true
}

// SweepLeases returns the items of expired leases in the contexts to their queues,
// calling moved for each. The services run it on a ticker: a safety net for consumers
// that died (live ones extend their leases). For grace after a passing Redis fault
// (LastFault) it requeues nothing: leases ran out while nobody could extend them, and
// their live holders (finishing a job, writing its end) get a lease's time to do so,
// instead of losing the job to a second run. It returns false when it held back.
func (s *Store) SweepLeases(ctx context.Context, ctxIDs []uint32, now time.Time, grace time.Duration, moved func(ctxID uint32, r Requeued)) bool {
	if time.Since(s.LastFault()) < grace {
		return false
	}
	for _, id := range ctxIDs {
		db, err := s.Ctx(id)
		if err != nil {
			continue
		}
		items, err := db.RequeueExpired(ctx, now, 1000)
		if err != nil {
			continue
		}
		for _, it := range items {
			moved(id, it)
		}
	}
	return true
}

// BusyState is what a context has waiting (the lengths of its lists that are not
// empty, by name) and held (its leases).
type BusyState struct {
	Lists  map[string]int64
	Leases int64
}

// CheckBusy reads what the context has waiting or held. With tidy it also keeps
// coord:busy true: the context leaves it when it has nothing, or joins it (data
// written before the index existed) when it has something. The check and the change
// are one script: an item pushed meanwhile marks the context again after it.
func (d *DB) CheckBusy(ctx context.Context, tidy bool) (BusyState, error) {
	a := &checkBusyArgs{MsgOutKey: keys.MsgOut, MsgInKey: keys.MsgIn, LeasesKey: keys.Leases, RunnersKey: keys.RunnerIndex, BusyKey: keys.Busy,
		Ctx: int64(d.ContextID), Tidy: tidy}
	for _, t := range model.ScriptTypes() {
		a.Types = append(a.Types, string(t))
	}
	r, err := a.run(ctx, d)
	if err != nil {
		return BusyState{}, fmt.Errorf("check the queues of context %d: %w", d.ContextID, err)
	}
	st := BusyState{Lists: map[string]int64{}, Leases: r.Leases}
	flat := r.Lists
	for i := 0; i+1 < len(flat); i += 2 {
		q, _ := flat[i].(string)
		n, _ := flat[i+1].(int64)
		st.Lists[q] = n
	}
	return st, nil
}

// BusyContexts returns the contexts of every server that are in coord:busy (that may
// have work waiting or held), one ZRANGE per server whatever the number of contexts.
// A member older than before is returned; a zero before returns every member.
func (s *Store) BusyContexts(ctx context.Context, before time.Time) ([]uint32, error) {
	max := "+inf"
	if !before.IsZero() {
		max = strconv.FormatInt(before.UnixMilli(), 10)
	}
	var out []uint32
	for _, srv := range s.servers {
		vals, err := srv.fixed.ZRangeByScore(ctx, keys.Busy, &redis.ZRangeBy{Min: "-inf", Max: max}).Result()
		if err != nil {
			return nil, fmt.Errorf("list busy contexts on %s: %w", srv.Name, err)
		}
		for _, v := range vals {
			// Only the contexts placed on this server: an entry of another is stale.
			if n, err := strconv.ParseUint(v, 10, 32); err == nil && n > 0 && s.ServerFor(uint32(n)) == srv {
				out = append(out, uint32(n))
			}
		}
	}
	return out, nil
}

// SweepBusy is the shared lease sweep: on each server whose sweep lock (keys.SweepLock,
// held for every) this caller takes, it checks every context of coord:busy (CheckBusy
// with tidy: a context with nothing waiting or held leaves the index) and returns the
// items of expired leases to their queues (RequeueExpired), calling moved for each.
// Replicas of the services share the sweep: one of them sweeps a server per period.
// It holds back after a passing fault, as SweepLeases does. It returns false when it
// held back.
func (s *Store) SweepBusy(ctx context.Context, owner string, every time.Duration, now time.Time, grace time.Duration, moved func(ctxID uint32, r Requeued)) bool {
	if time.Since(s.LastFault()) < grace {
		return false
	}
	for _, srv := range s.servers {
		ok, err := srv.fixed.SetNX(ctx, keys.SweepLock, owner, every).Result()
		if err != nil || !ok {
			continue
		}
		vals, err := srv.fixed.ZRange(ctx, keys.Busy, 0, -1).Result()
		if err != nil {
			continue
		}
		for _, v := range vals {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil || n == 0 || s.ServerFor(uint32(n)) != srv {
				continue
			}
			db, err := s.Ctx(uint32(n))
			if err != nil {
				continue
			}
			st, err := db.CheckBusy(ctx, true)
			if err != nil || st.Leases == 0 {
				continue
			}
			items, err := db.RequeueExpired(ctx, now, 1000)
			if err != nil {
				continue
			}
			for _, it := range items {
				moved(uint32(n), it)
			}
		}
	}
	return true
}
