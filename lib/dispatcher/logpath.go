package dispatcher

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// LogPathError says why a job's log_path is refused.
type LogPathError struct {
	Path   string
	LogDir string
	Reason string
}

func (e *LogPathError) Error() string {
	if e.LogDir == "" {
		return fmt.Sprintf("log_path %q refused: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("log_path %q refused: %s (log directory %s)", e.Path, e.Reason, e.LogDir)
}

// CleanLogDir makes a log directory absolute and resolves its symlinks, so that
// confinement checks compare real paths. "" stays "" (no log directory).
func CleanLogDir(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	return real, nil
}

// ResolveLogPath checks that a log_path lies inside logDir (lexically: an absolute
// path under it, or a relative path, taken relative to it) and returns it relative to
// logDir. Symlinks are checked when the file is opened, through os.Root.
func ResolveLogPath(logDir, p string) (string, error) {
	if logDir == "" {
		return "", &LogPathError{Path: p, Reason: "this worker has no log directory configured"}
	}
	if strings.ContainsRune(p, 0) {
		return "", &LogPathError{Path: p, LogDir: logDir, Reason: "it contains a NUL byte"}
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(logDir, abs)
	}
	abs = filepath.Clean(abs)
	rel, err := filepath.Rel(logDir, abs)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", &LogPathError{Path: p, LogDir: logDir, Reason: "it is outside the log directory"}
	}
	return rel, nil
}

// OpenLogFile creates (truncates) a job's log file inside logDir, making its parent
// directories; a symlink that leads out of logDir is refused (os.Root).
func OpenLogFile(logDir, p string) (*os.File, error) {
	rel, err := ResolveLogPath(logDir, p)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(logDir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = root.Close() }()
	if d := filepath.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return nil, &LogPathError{Path: p, LogDir: logDir, Reason: "cannot create its directory: " + rootErr(err)}
		}
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, &LogPathError{Path: p, LogDir: logDir, Reason: "cannot open it: " + rootErr(err)}
	}
	return f, nil
}

// readLogFile reads up to max bytes of a log file inside logDir.
func readLogFile(logDir, p string, max int) (string, bool, error) {
	rel, err := ResolveLogPath(logDir, p)
	if err != nil {
		return "", false, err
	}
	root, err := os.OpenRoot(logDir)
	if err != nil {
		return "", false, err
	}
	defer func() { _ = root.Close() }()
	f, err := root.Open(rel)
	if err != nil {
		return "", false, &LogPathError{Path: p, LogDir: logDir, Reason: "cannot read it: " + rootErr(err)}
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return "", false, err
	}
	if len(b) > max {
		return string(b[:max]), true, nil
	}
	return string(b), false, nil
}

// rootErr shortens an os.Root error to its cause ("path escapes from parent", "no
// such file or directory").
func rootErr(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
