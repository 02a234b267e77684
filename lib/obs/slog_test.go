package obs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/rs/zerolog"
)

// An error passed to a slog logger is logged with its message, not as {}.
func TestSlogErrorMessage(t *testing.T) {
	var buf bytes.Buffer
	l := Slog(zerolog.New(&buf))
	l.Warn("restart", "reason", fmt.Errorf("process 7 exited: %w", errors.New("exit status 1")), "n", 2)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["reason"] != "process 7 exited: exit status 1" || m["n"] != float64(2) {
		t.Fatalf("logged %s", buf.String())
	}
}
