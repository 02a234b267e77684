package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// worker is asynq's worker process seen from the benchmark (worker.go has its side).
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ctl   chan string // its lines but "done …"
	mu    sync.Mutex
	wait  map[string]chan struct{} // (c)'s waiting calls by payload
	// check, when set, is called every 2 s while expect waits: an error ends the wait
	// (Redis refused asynq's user something, which asynq retries for ever).
	check func() error
}

// startWorker starts this program as asynq's worker process, with GOMAXPROCS=procs
// unless procs is "default", and waits until it serves.
func startWorker(cfg workerConfig, procs string) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-asynq-worker")
	cmd.Env = append(os.Environ(), workerEnv(cfg)...)
	if procs != "default" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+procs)
	}
	cmd.Stderr = os.Stderr
	w := &worker{cmd: cmd, ctl: make(chan string, 16), wait: map[string]chan struct{}{}}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go w.read(stdout)
	if _, err := w.expect("ready", time.Minute); err != nil {
		w.stop()
		return nil, err
	}
	return w, nil
}

// read hands each line of the worker's output on: a "done" to its waiting call,
// the others to ctl (closed when the output ends).
func (w *worker) read(r io.Reader) {
	defer close(w.ctl)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "done "); ok {
			w.mu.Lock()
			ch := w.wait[id]
			delete(w.wait, id)
			w.mu.Unlock()
			if ch != nil {
				close(ch)
			}
			continue
		}
		w.ctl <- line
	}
}

// await registers a call that waits for the task with payload id.
func (w *worker) await(id string) <-chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	w.wait[id] = ch
	w.mu.Unlock()
	return ch
}

// expect waits for a line that starts with prefix and returns it.
func (w *worker) expect(prefix string, timeout time.Duration) (string, error) {
	deadline := time.After(timeout)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if w.check != nil {
				if err := w.check(); err != nil {
					return "", err
				}
			}
		case line, ok := <-w.ctl:
			switch {
			case !ok:
				return "", errors.New("asynq's worker process ended")
			case strings.HasPrefix(line, "error "):
				return "", fmt.Errorf("asynq's worker process: %s", line)
			case strings.HasPrefix(line, prefix):
				return line, nil
			}
		case <-deadline:
			return "", fmt.Errorf("asynq's worker process: no %q in %s", prefix, timeout)
		}
	}
}

// count waits until n noop tasks have run in all.
func (w *worker) count(n int) error {
	if _, err := fmt.Fprintf(w.stdin, "count %d\n", n); err != nil {
		return err
	}
	_, err := w.expect("counted", 10*time.Minute)
	return err
}

// chain waits for the end of (d)'s chain and returns its hops (µs).
func (w *worker) chain() ([]float64, error) {
	line, err := w.expect("chain", 10*time.Minute)
	if err != nil {
		return nil, err
	}
	var hops []float64
	for _, f := range strings.Fields(line)[1:] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("asynq's worker process: %q", line)
		}
		hops = append(hops, v)
	}
	return hops, nil
}

func (w *worker) pid() int { return w.cmd.Process.Pid }

// stop ends the worker process: its input closes, it shuts asynq's server down; killed
// after 30 s.
func (w *worker) stop() {
	_ = w.stdin.Close()
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-done
	}
}
