package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/model"
)

// The delivery states of job messages that the router records: each sets a message's
// status with the fields that go with it and updated_at, in one transaction with
// what goes with it (the message's claim released, an event).

// MessageSent records a request message handed to the transport for another node:
// status dispatched, the transport's id and destination, when its delivery began
// (dispatched) and when it was handed over (sent), and its claim released.
func (d *DB) MessageSent(ctx context.Context, cl *Claim, transportID, dst string, dispatched, sent time.Time) error {
	_, err := d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, cl.Item, "status", string(model.MessageDispatched), "transport_id", transportID, "transport_dst", dst,
			"dispatched_at_ms", dispatched.UnixMilli(), "sent_at_ms", sent.UnixMilli(), "updated_at", sent.Unix())
		AckOn(ctx, p, cl)
		return nil
	})
	return err
}

// MessageFailure is why a message failed, and what goes with the failure.
type MessageFailure struct {
	Reason  string
	At      time.Time
	Release *Claim // the message's claim, released with it; nil: it stays claimed
	Event   *Event // written with it (the job's failure); nil: none
}

// FailMessage records a message that failed: status error with its reason.
func (d *DB) FailMessage(ctx context.Context, msgKey string, f MessageFailure) error {
	_, err := d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, msgKey, "status", string(model.MessageError), "error", f.Reason, "updated_at", f.At.Unix())
		if f.Event != nil {
			AddEvent(ctx, p, f.Event)
		}
		if f.Release != nil {
			AckOn(ctx, p, f.Release)
		}
		return nil
	})
	return err
}

// ResultDelivered records the result of a request sent to another node, applied here:
// the request (requestKey) processed, with when its result arrived, and the result
// message (claimed by cl) processed, its claim released.
func (d *DB) ResultDelivered(ctx context.Context, requestKey string, cl *Claim, arrived time.Time) error {
	_, err := d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, requestKey, "status", string(model.MessageProcessed), "result_at_ms", arrived.UnixMilli(), "updated_at", arrived.Unix())
		p.HSet(ctx, cl.Item, "status", string(model.MessageProcessed), "updated_at", arrived.Unix())
		AckOn(ctx, p, cl)
		return nil
	})
	return err
}
