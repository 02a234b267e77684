package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runSpec is one command of the suite and the label its lines carry.
type runSpec struct {
	label   string
	command string
}

// parseRuns reads 'LABEL: COMMAND' arguments.
func parseRuns(args []string) ([]runSpec, error) {
	if len(args) == 0 {
		return nil, errors.New("no command given: each argument is 'LABEL: COMMAND'")
	}
	runs := make([]runSpec, 0, len(args))
	seen := map[string]bool{}
	for _, a := range args {
		label, command, ok := strings.Cut(a, ": ")
		label, command = strings.TrimSpace(label), strings.TrimSpace(command)
		if !ok || label == "" || command == "" {
			return nil, fmt.Errorf("argument %q is not 'LABEL: COMMAND'", a)
		}
		if seen[label] {
			return nil, fmt.Errorf("label %q given twice", label)
		}
		seen[label] = true
		runs = append(runs, runSpec{label: label, command: command})
	}
	return runs, nil
}

// suite runs the commands, at most jobs at once, in the order given.
type suite struct {
	rep     *reporter
	jobs    int
	jsonDir string
}

func (s *suite) runAll(ctx context.Context, runs []runSpec) {
	sem := make(chan struct{}, s.jobs)
	var wg sync.WaitGroup
	for _, r := range runs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			s.rep.commandFailed(r.label, "not started: interrupted")
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.runOne(ctx, r)
		}()
	}
	wg.Wait()
}

// runOne runs one command and feeds its standard output to the reporter; its
// standard error is passed through, each line with the label.
func (s *suite) runOne(ctx context.Context, r runSpec) {
	start := time.Now()
	s.rep.started(r.label, r.command)
	cmd := exec.CommandContext(ctx, "bash", "-c", r.command)
	// Its own process group: an interrupt ends go test and the test binaries too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	errw := &lineWriter{emit: func(line string) { s.rep.stderrLine(r.label, line) }}
	cmd.Stderr = errw
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.rep.commandFailed(r.label, err.Error())
		return
	}
	var src io.Reader = out
	if s.jsonDir != "" {
		f, ferr := s.jsonFile(r.label)
		if ferr != nil {
			s.rep.commandFailed(r.label, ferr.Error())
			return
		}
		defer func() {
			if cerr := f.Close(); cerr != nil {
				s.rep.stderrLine(r.label, "closing its -json copy: "+cerr.Error())
			}
		}()
		src = io.TeeReader(out, f)
	}
	if err := cmd.Start(); err != nil {
		s.rep.commandFailed(r.label, err.Error())
		return
	}
	sc := bufio.NewScanner(src)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		s.rep.line(r.label, sc.Text())
	}
	if err := sc.Err(); err != nil {
		s.rep.stderrLine(r.label, "reading its output: "+err.Error())
		_, _ = io.Copy(io.Discard, src)
	}
	err = cmd.Wait()
	errw.flush()
	s.rep.ended(r.label, err, time.Since(start))
}

func (s *suite) jsonFile(label string) (*os.File, error) {
	if err := os.MkdirAll(s.jsonDir, 0o755); err != nil {
		return nil, err
	}
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == ':' {
			return '_'
		}
		return r
	}, label)
	return os.Create(filepath.Join(s.jsonDir, name+".json"))
}

// lineWriter calls emit for each complete line written to it, and for the rest at Close.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	emit func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.emit(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// flush emits what is left without a newline.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
		w.buf = nil
	}
}
