// Command producer shows the Go client (sdk/go) at work: it runs a job, submits one
// (twice with a unique key) and waits for it, submits a flow with a parameter,
// watches it to its end, waits for it, reads its logs and tells a missing job by its
// error. It reads the environment heroctl reads
// (HERO_ADDR, HERO_ACTOR with its key, HERO_CONTEXT, HERO_TLS_CA, …):
//
//	export HERO_ADDR=127.0.0.1:9653 HERO_ACTOR=1 HERO_CONTEXT=1 HERO_TLS_CA=pki/ca.pem
//	go run ./sdk/go/example/producer
//
// The actor needs the executor role in the context, and a runner that serves sh.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hero-coordinator/hero/lib/model"
	hero "github.com/hero-coordinator/hero/sdk/go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := hero.ConfigFromEnv()
	if err != nil {
		return err
	}
	c, err := hero.Dial(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()

	// 1. Run one job and wait for its output.
	j, err := c.RunJob(ctx, &model.Job{ScriptType: model.ScriptSh, Script: "echo hello from Go", Timeout: 60}, time.Minute)
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	fmt.Printf("run: job %d %s: %s", j.ID, j.Status, j.Result["output"])

	// 2. Submit a job and return at once; a second submission with the same unique
	// key names the same job. Then wait for its end.
	uniq := hero.SubmitOptions{UniqueKey: fmt.Sprintf("example-%d", time.Now().UnixNano()), UniqueTTL: time.Hour}
	sub, err := c.Submit(ctx, &model.Job{ScriptType: model.ScriptSh, Script: "echo submitted from Go", Timeout: 60}, uniq)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	again, err := c.Submit(ctx, &model.Job{ScriptType: model.ScriptSh, Script: "echo never runs", Timeout: 60}, uniq)
	if err != nil {
		return fmt.Errorf("submit again: %w", err)
	}
	fmt.Printf("submit: job %d; again with its key: job %d (existing %v)\n", sub.Job.ID, again.Job.ID, again.Existing)
	if j, err = c.WaitJob(ctx, 0, sub.Job.ID); err != nil {
		return fmt.Errorf("wait for job %d: %w", sub.Job.ID, err)
	}
	fmt.Printf("wait: job %d %s: %s", j.ID, j.Status, j.Result["output"])

	// 3. Submit a flow of two jobs, the second after the first, with a parameter in
	// the flow's environment; watch it to its end.
	spec := hero.FlowSpec{Env: map[string]string{"NAME": "producer"}, Jobs: []hero.FlowJob{
		{Name: "greet", Job: model.Job{ScriptType: model.ScriptSh, Script: `echo "greetings, $NAME"; echo "WORD=hi" >> "$HERO_RESULT_FILE"`}},
		{Name: "shout", Depends: []string{"greet"}, Job: model.Job{ScriptType: model.ScriptSh,
			Script: `for v in $(env | grep '^HERO_DEP_.*_WORD=' | cut -d= -f2); do w=$v; done; echo "$w!" | tr a-z A-Z`}},
	}}
	sf, err := c.SubmitFlow(ctx, spec)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Printf("submit: flow %d, jobs greet=%d shout=%d\n", sf.Flow.ID, sf.Jobs["greet"], sf.Jobs["shout"])
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dag, err := c.WatchFlow(wctx, sf.Flow.ID, func(u hero.FlowUpdate) {
		if u.Event != nil {
			fmt.Printf("watch: job %d %s\n", u.Event.JobID, strings.TrimPrefix(u.Event.Type, "job."))
		}
	})
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	fmt.Printf("watch: flow %d %s\n", dag.Flow.ID, dag.Flow.Status)

	// 4. Wait for it (it has ended: the answer comes at once) and read its logs.
	f, err := c.WaitFlow(ctx, sf.Flow.ID, time.Minute)
	if err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	fmt.Printf("wait: flow %d %s\n", f.ID, f.Status)
	if err := c.CopyFlowLogs(ctx, f.ID, os.Stdout, false); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	if f.Status != model.FlowFinished {
		return fmt.Errorf("flow %d ended %s: %s", f.ID, f.Status, f.Error)
	}

	// 5. Errors are typed.
	if _, err := c.GetJob(ctx, 0, 4_000_000_000); errors.Is(err, hero.ErrNotFound) {
		fmt.Println("errors: job 4000000000 is not found:", err)
	} else {
		return fmt.Errorf("a missing job: %v", err)
	}
	return nil
}
