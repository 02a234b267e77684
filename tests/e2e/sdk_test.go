package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/auth"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// The Go client's example program (sdk/go/example/producer) against the real stack,
// as actor 1 with its key and no operator secret, so every call is signed: it runs a
// job, submits one (twice with a unique key: the same job) and waits for it, submits
// a flow, watches it, waits for it, reads its logs and meets a typed not-found error.
func TestGoSDKExample(t *testing.T) {
	c := heroctlStack(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "producer")
	build := exec.Command("go", "build", "-o", bin, "./sdk/go/example/producer")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	key := filepath.Join(dir, "actor-1.pem")
	if err := auth.WritePrivateKey(key, harness.ActorKey(1), false); err != nil {
		t.Fatal(err)
	}
	p, err := harness.PKI()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{"HERO_ADDR=" + c.s.API.GRPCAddr, "HERO_ACTOR=1", "HERO_KEY=" + key, "HERO_CONTEXT=1", "HERO_TLS_CA=" + p.Files("api").CA}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the example failed: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		`(?m)^run: job \d+ finished: hello from Go$`,
		`(?m)^submit: job (\d+); again with its key: job \d+ \(existing true\)$`,
		`(?m)^wait: job \d+ finished: submitted from Go$`,
		`(?m)^submit: flow (\d+), jobs greet=\d+ shout=\d+$`,
		// (no "watch: job" line is asked for: the flow's two jobs, a step of a few
		// milliseconds each, may both end before the watch's first snapshot, which
		// then holds the flow ended; the SDK's own tests cover the events)
		`(?m)^watch: flow \d+ finished$`,
		`(?m)^wait: flow \d+ finished$`,
		`(?s)== job \d+ \(sh\) ==\ngreetings, producer\n== job \d+ \(sh\) ==\nHI!\n`,
		`(?m)^errors: job 4000000000 is not found: not found: `,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the example's output lacks %s:\n%s", want, out)
		}
	}
	if m := regexp.MustCompile(`submit: job (\d+); again with its key: job (\d+)`).FindStringSubmatch(out); m == nil || m[1] != m[2] {
		t.Errorf("the second submission with the unique key is not the first's job: %v", m)
	}
}
