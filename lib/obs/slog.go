package obs

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
)

// Slog returns a *slog.Logger that writes through the service's zerolog logger, for
// libraries that log with log/slog (lib/rrq).
func Slog(l zerolog.Logger) *slog.Logger { return slog.New(&slogHandler{l: l}) }

type slogHandler struct {
	l     zerolog.Logger
	attrs []slog.Attr
	group string
}

func (h *slogHandler) Enabled(_ context.Context, lvl slog.Level) bool {
	return h.l.GetLevel() <= zlevel(lvl)
}

func zlevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	}
	return zerolog.DebugLevel
}

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.l.WithLevel(zlevel(r.Level))
	add := func(a slog.Attr) bool {
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		switch v := a.Value.Resolve().Any().(type) {
		case error:
			// An error value marshals as {} (its fields are unexported): log its message.
			ev = ev.Str(key, v.Error())
		default:
			ev = ev.Interface(key, v)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	ev.Msg(r.Message)
	return nil
}

func (h *slogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &slogHandler{l: h.l, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...), group: h.group}
}

func (h *slogHandler) WithGroup(name string) slog.Handler {
	g := name
	if h.group != "" {
		g = h.group + "." + name
	}
	return &slogHandler{l: h.l, attrs: h.attrs, group: g}
}
