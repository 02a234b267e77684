package fault

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestTransient: what a Redis restart, a failover or a dropped connection returns is
// retried; what the caller or the data caused is not.
func TestTransient(t *testing.T) {
	// A real refused connection: a port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer func() { _ = rdb.Close() }()
	refused := rdb.Ping(context.Background()).Err()
	if refused == nil {
		t.Fatal("ping to a closed port succeeded")
	}
	for _, err := range []error{
		refused,
		fmt.Errorf("finish job 1:1:1: %w", refused),
		errors.New("LOADING Redis is loading the dataset in memory"),
		fmt.Errorf("claim from queue:sh of context 1: %w", errors.New("READONLY You can't write against a read only replica.")),
		errors.New("redis: Conn is in a bad state: EOF"),
		errors.New("UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"),
		context.DeadlineExceeded,
		fmt.Errorf("read: %w", net.ErrClosed),
		// a promoted replica without the store's functions, until the loader loads them
		fmt.Errorf("claim and start from queue:sh of context 3: %w", errors.New("ERR Function not found")),
	} {
		if !Transient(err) {
			t.Errorf("Transient(%v) = false, want true", err)
		}
	}
	for _, err := range []error{
		nil,
		context.Canceled,
		errors.New("ERR Error running script (call to f_x): user_script:1: WRONGTYPE"),
		errors.New("NOTFOUND flow 3"),
		redis.Nil,
	} {
		if Transient(err) {
			t.Errorf("Transient(%v) = true, want false", err)
		}
	}
}

// TestBackoff: delays double up to the cap, with jitter within a quarter.
func TestBackoff(t *testing.T) {
	b := Backoff{First: 100 * time.Millisecond, Max: 400 * time.Millisecond}
	for i, want := range []time.Duration{100, 200, 400, 400} {
		want *= time.Millisecond
		if d := b.Next(); d < want-want/8 || d > want+want/8 {
			t.Errorf("delay %d = %v, want %v ± 1/8", i, d, want)
		}
	}
	b.Reset()
	if d := b.Next(); d > 113*time.Millisecond {
		t.Errorf("after Reset: %v", d)
	}
}
