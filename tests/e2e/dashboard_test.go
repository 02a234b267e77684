package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// servedMetrics reads the processes' /metrics: every sample's name with the label
// names it carries.
func servedMetrics(t *testing.T, procs ...*harness.Proc) map[string]map[string]bool {
	t.Helper()
	served := map[string]map[string]bool{}
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? `)
	for _, p := range procs {
		scrapeLines(t, p, func(line string) {
			m := sample.FindStringSubmatch(line)
			if m == nil {
				return
			}
			if served[m[1]] == nil {
				served[m[1]] = map[string]bool{}
			}
			for _, l := range labelRe.FindAllStringSubmatch(m[2], -1) {
				served[m[1]][l[1]] = true
			}
		})
	}
	return served
}

// dashboardQueries are the expressions of deploy/grafana/dashboards/hero.json.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "dashboards", "hero.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				seen[e] = true
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	out := make([]string, 0, len(seen))
	for e := range seen {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

// Labels Prometheus adds to every scraped series (the target's), and the histogram's.
var scrapeLabels = map[string]bool{"job": true, "instance": true, "le": true}

var (
	metricRe  = regexp.MustCompile(`\bhero_[a-z0-9_]+`)
	matcherRe = regexp.MustCompile(`\{([^}]*)\}`)
	matchName = regexp.MustCompile(`(\w+)\s*(?:=~|!~|!=|=)`)
	byRe      = regexp.MustCompile(`\bby \(([^)]*)\)`)
)

// dashboardProblems: the metrics an expression names that no service serves, and the
// labels it groups or filters by that its metric's samples do not carry.
func dashboardProblems(expr string, served map[string]map[string]bool) []string {
	var problems []string
	names := metricRe.FindAllString(expr, -1)
	var labels []string
	for _, m := range matcherRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range matchName.FindAllStringSubmatch(m[1], -1) {
			labels = append(labels, l[1])
		}
	}
	for _, m := range byRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			labels = append(labels, strings.TrimSpace(l))
		}
	}
	for _, name := range names {
		have, ok := served[name]
		if !ok {
			problems = append(problems, name+" is served by no service")
			continue
		}
		for _, l := range labels {
			if !scrapeLabels[l] && !have[l] {
				problems = append(problems, name+" has no label "+l)
			}
		}
	}
	return problems
}

// TestDashboardMetricsServed: after a finished flow, a failed one (a retry, a job
// cancelled because its dependency failed), a cancelled one and a failed API call,
// every metric a query of the Grafana dashboard names is served by one of the
// services, with every label the query groups or filters by. make compose-test runs
// the queries themselves against Prometheus; this catches a renamed metric or label
// without Docker.
func TestDashboardMetricsServed(t *testing.T) {
	st, c := newStack(t, harness.StackOptions{})
	createFlow(t, c, 30, nil,
		jobSpec{id: 1, typ: "sh", script: "echo ok"},
		jobSpec{id: 2, typ: "python", script: "print(2)", deps: []uint32{1}},
	)
	createFlow(t, c, 31, nil,
		jobSpec{id: 3, typ: "sh", script: "exit 3", retries: 1},
		jobSpec{id: 4, typ: "sh", script: "echo never", deps: []uint32{3}},
	)
	sleeper := newSleeper(t, "dash")
	createFlow(t, c, 32, nil, jobSpec{id: 5, typ: "sh", script: sleeper.script})
	for _, f := range []uint32{30, 31, 32} {
		c.MustCall(t, "flow.start", map[string]any{"context_id": ctx1, "id": f}, nil)
	}
	sleeper.pid(t, st)
	c.MustCall(t, "flow.cancel", map[string]any{"context_id": ctx1, "id": 32}, nil)
	for f, want := range map[uint32]string{30: "finished", 31: "error", 32: "error"} {
		if got := c.WaitFlow(t, ctx1, f, 60*time.Second); got.Status != want {
			t.Fatalf("flow %d: %+v, want %s", f, got, want)
		}
	}
	if err := c.Call("flow.load", map[string]any{"context_id": ctx1, "id": 999999}, nil); err == nil {
		t.Fatal("flow.load of a missing flow succeeded")
	}

	queries := dashboardQueries(t)
	if len(queries) < 10 {
		t.Fatalf("only %d queries in the dashboard", len(queries))
	}
	procs := []*harness.Proc{st.API, st.Scheduler, st.Router, st.Runner}
	var problems []string
	// Job ends reach the scheduler's counters a moment after the flow's status.
	ok := waitUntil(time.Minute, func() bool {
		served := servedMetrics(t, procs...)
		problems = problems[:0]
		for _, q := range queries {
			for _, p := range dashboardProblems(q, served) {
				problems = append(problems, q+": "+p)
			}
		}
		return len(problems) == 0
	})
	if !ok {
		t.Errorf("dashboard queries whose metrics or labels are not served:\n  %s", strings.Join(problems, "\n  "))
	}
}
