package store

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// IsUnavailable reports whether err means Redis could not be reached or could not
// serve for now (refused or broken connection, timeout, a server loading its data or
// read-only after a failover, an exhausted pool): a fault to retry, not a refusal.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted):
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY "} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return strings.Contains(err.Error(), "Conn is in a bad state")
}
