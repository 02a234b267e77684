package hero

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// SubmitOptions make a submission unique: while UniqueKey lasts (UniqueTTL, 1 s to 30
// days, required with a key), a submission with the same key returns the job it
// names instead of making a new one; such a submission is safe to retry, and is
// retried.
type SubmitOptions struct {
	UniqueKey string
	UniqueTTL time.Duration
	// RunAt or Delay (one of them) delays the job: it is stored scheduled and
	// dispatched then; Stop before then cancels it (docs/scheduling.md).
	RunAt time.Time
	Delay time.Duration
	// DebounceKey with Debounce (a window, 1 ms to 24 h): of the submissions with the
	// key within the window only the last runs, at the window's end; the others end
	// error, cancelled, naming the debounce. Not with RunAt or Delay.
	DebounceKey string
	Debounce    time.Duration
}

// delayFields are o's run_at and delay as the API takes them ("" when unset).
func (o SubmitOptions) delayFields() (runAt, delay string) {
	return timeField(o.RunAt), durationField(o.Delay)
}

func timeField(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func durationField(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

// Submitted is a submitted job; Existing says the unique key (or the job's chosen id)
// named a job that exists, which is returned instead of a new one.
type Submitted struct {
	Job      *model.Job `json:"job"`
	Existing bool       `json:"existing"`
	// Flow is the run of a flow's schedule (TriggerSchedule), whose Job is nil.
	Flow *model.Flow `json:"flow,omitempty"`
}

// SubmitItem is one job of SubmitBatch.
type SubmitItem struct {
	Job *model.Job
	SubmitOptions
}

// Submit creates a standalone job and queues it, and returns at once (job.submit):
// WaitJob waits for its end, CopyJobLogs reads its log.
//
// Concurrent submissions of one client share one stream (SubmitJobStream) when the
// connection is signed once or an operator secret is used; with a signature per call
// each is a SubmitJob call. Either way a submission is retried as a call is: on a
// transient fault when it has a unique key, and whenever the server's rate limit
// refused it.
func (c *Client) Submit(ctx context.Context, j *model.Job, o SubmitOptions) (*Submitted, error) {
	if o.UniqueKey != "" {
		ctx = retryable(ctx)
	}
	runAt, delay := o.delayFields()
	f := submitFields{contextID: c.cfg.Context, uniqueKey: o.UniqueKey, uniqueTTL: uint32(o.UniqueTTL / time.Second), runAt: runAt, delay: delay,
		debounceKey: o.DebounceKey, debounce: durationField(o.Debounce)}
	if c.streams != nil {
		req, err := appendSubmitRequest(nil, f, j) // the request as it travels (streamencode.go)
		if err != nil {                            // a string that is not UTF-8 (of a job with maps or limits: proto's encoding said so)
			return nil, wrap(status.Error(codes.Internal, "hero: the submission: "+err.Error()))
		}
		// CallTimeout bounds a submission without a deadline of its own as it bounds a
		// call, but without a context of its own: the stream's wait and the retries
		// stop at until (a context with a timer and its channel, made and stopped for
		// every submission, is a sizeable share of the client's CPU per submission).
		var until time.Time
		if _, ok := ctx.Deadline(); !ok {
			until = time.Now().Add(c.cfg.CallTimeout)
		}
		var out *Submitted
		err = c.retryingUntil(ctx, until, o.UniqueKey != "", func() error {
			var err error
			out, err = c.streams.submit(ctx, until, req)
			return err
		})
		if !errors.Is(err, errNoStream) {
			if err != nil {
				return nil, wrap(err)
			}
			return out, nil
		}
	}
	cctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.SubmitJob(cctx, &herov1.SubmitJobRequest{ContextId: f.contextID, Job: c.jobPB(j), UniqueKey: f.uniqueKey,
		UniqueTtlSeconds: f.uniqueTTL, RunAt: f.runAt, Delay: f.delay, DebounceKey: f.debounceKey, Debounce: f.debounce})
	if err != nil {
		return nil, wrap(err)
	}
	return &Submitted{Job: jobOf(r.Job), Existing: r.Existing}, nil
}

// SubmitBatch submits up to 1,000 jobs in one call and one Redis step: all of them,
// or (one refused) none. The answer lists them in order.
func (c *Client) SubmitBatch(ctx context.Context, items []SubmitItem) ([]Submitted, error) {
	req := &herov1.SubmitJobsRequest{ContextId: c.cfg.Context}
	unique := true
	for _, it := range items {
		runAt, delay := it.delayFields()
		req.Jobs = append(req.Jobs, &herov1.SubmitJobItem{Job: c.jobPB(it.Job), UniqueKey: it.UniqueKey, UniqueTtlSeconds: uint32(it.UniqueTTL / time.Second),
			RunAt: runAt, Delay: delay, DebounceKey: it.DebounceKey, Debounce: durationField(it.Debounce)})
		unique = unique && it.UniqueKey != ""
	}
	if unique {
		ctx = retryable(ctx)
	}
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	r, err := c.api.SubmitJobs(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]Submitted, len(r.Items))
	for i, it := range r.Items {
		out[i] = Submitted{Job: jobOf(it.Job), Existing: it.Existing}
	}
	return out, nil
}

// retryableKey marks a call that is safe to send again (a unique submission).
type retryableKey struct{}

func retryable(ctx context.Context) context.Context {
	return context.WithValue(ctx, retryableKey{}, true)
}
