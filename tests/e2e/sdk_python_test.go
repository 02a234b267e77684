package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// pythonWithCryptography returns a python3 that imports cryptography (Debian's
// python3-cryptography lives in /usr/bin/python3's path, which a python3 earlier on
// PATH may not share).
func pythonWithCryptography(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if path, err := exec.LookPath(py); err == nil && exec.Command(path, "-c", "import cryptography").Run() == nil {
			return path
		}
	}
	t.Fatal("a python3 with the cryptography module is needed for the Python SDK (apt-get install python3-cryptography; make deps)")
	return ""
}

// TestPythonProducerSDK runs sdk/python's unit tests and its producer example against
// the real stack, signed as actor 1 with its key file: the example submits a diamond,
// watches its events, waits for it, runs a job, submits one twice under a unique key
// (one job) and waits for it, and meets a typed NotFound. The flow it
// made is then read back here: finished, with the diamond's total, started by actor 1.
func TestPythonProducerSDK(t *testing.T) {
	py := pythonWithCryptography(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sdk := filepath.Join(root, "sdk", "python")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, py, filepath.Join(sdk, "test_hero_client.py")).CombinedOutput(); err != nil {
		t.Fatalf("python3 sdk/python/test_hero_client.py: %v\n%s", err, out)
	}

	st, c := newStack(t, harness.StackOptions{})
	key := filepath.Join(t.TempDir(), "actor-1.pem")
	if err := auth.WritePrivateKey(key, harness.ActorKey(1), false); err != nil {
		t.Fatal(err)
	}
	pki, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, py, filepath.Join(sdk, "examples", "producer_example.py"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"HERO_API_URL=" + harness.APIURL(st.API), "HERO_TLS_CA=" + pki.Files("api").CA,
		"HERO_ACTOR=1", "HERO_CONTEXT=" + strconv.Itoa(ctx1), "HERO_KEY=" + key}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("producer_example.py: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"event flow.started", "event job.finished", "event flow.finished", "finished: TOTAL=483", ": 42", "finished (submitted twice, one job)", "not found, as expected", "producer example: ok"} {
		if !strings.Contains(text, want) {
			t.Errorf("the example's output lacks %q:\n%s", want, text)
		}
	}
	m := regexp.MustCompile(`submitted flow (\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no flow id in the example's output:\n%s", text)
	}
	id, _ := strconv.ParseUint(m[1], 10, 32)
	var f harness.Flow
	c.MustCall(t, "flow.load", map[string]any{"context_id": ctx1, "id": id}, &f)
	if f.Status != "finished" || f.Result[strconv.FormatUint(uint64(f.Jobs[len(f.Jobs)-1]), 10)+".TOTAL"] != "483" || len(f.Jobs) != 4 {
		t.Errorf("the example's flow: %+v", f)
	}
	started := false
	for _, e := range events(t, c) {
		if fid, _ := e["flow_id"].(float64); e["type"] == "flow.started" && uint64(fid) == id {
			started = e["actor"] == "1"
		}
	}
	if !started {
		t.Error("no flow.started event by actor 1 (signed) for the example's flow")
	}
}
