// Package obs holds what makes a service observable: its zerolog logger, its
// Prometheus registry and the admin HTTP server with /metrics, /healthz and /readyz.
package obs

import (
	"io"
	"time"

	"github.com/rs/zerolog"
)

// Stable log keys (docs/observability.md).
const (
	KeyService   = "service"
	KeyContextID = "context_id"
	KeyFlowID    = "flow_id"
	KeyJobID     = "job_id"
	KeyCallerID  = "caller_id"
	KeyMessage   = "message_key"
	KeyRunnerID  = "runner_id"
	KeyWorker    = "worker"
)

// NewLogger returns the service's JSON logger (or a console one for humans).
func NewLogger(w io.Writer, service, level, format string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str(KeyService, service).Logger()
}
