package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// OptionalWorkers are runner flags that turn every optional worker on: the Hero
// Dispatcher worker (worker id "local", /bin/sh) and an executor pool of the example
// Go executor (script type "go").
func OptionalWorkers(binDir string) []string {
	return []string{"--dispatcher-workers", "local=/bin/sh",
		"--executors", "go;cmd=" + filepath.Join(binDir, ExampleExecutor) + ";size=1"}
}

// Procs returns the stack's running service processes.
func (s *Stack) Procs() []*Proc { return []*Proc{s.Scheduler, s.Router, s.Runner, s.API} }

// Exited returns what went wrong with the stack's processes: each one that exited,
// and each one whose log shows a panic.
func (s *Stack) Exited() []string {
	var out []string
	for _, p := range s.Procs() {
		select {
		case <-p.Done():
			out = append(out, fmt.Sprintf("%s exited (%v)", p.Name, p.exit))
		default:
		}
		if o := p.Output(); strings.Contains(o, "panic:") || strings.Contains(o, "goroutine ") && strings.Contains(o, "[running]") {
			out = append(out, p.Name+" panicked")
		}
	}
	return out
}

// LedgerLine is one line jobs append to a ledger file: "start|end <job> <attempt>".
type LedgerLine struct {
	Kind    string
	Job     string
	Attempt string
}

// Ledger is the script prefix of a job that records its start and end in the ledger
// file: it appends "start <ctx>:<caller>:<job> <attempt>" now and "end …" when the
// script exits 0. body runs in between.
func Ledger(file, body string) string {
	id := `$HERO_CONTEXT_ID:$HERO_CALLER_ID:$HERO_JOB_ID $HERO_ATTEMPT`
	return fmt.Sprintf("echo \"start %s\" >> %s\n%s\necho \"end %s\" >> %s\n", id, file, body, id, file)
}

// ReadLedger reads a ledger file.
func ReadLedger(file string) ([]LedgerLine, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []LedgerLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) == 3 {
			out = append(out, LedgerLine{Kind: p[0], Job: p[1], Attempt: p[2]})
		}
	}
	return out, sc.Err()
}
