package e2e

import (
	"bufio"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
	"github.com/hero-coordinator/hero/tests/e2e/harness"
)

// apiSeries is one sample of hero_api_requests_total.
type apiSeries struct{ transport, method, code string }

var apiSeriesRe = regexp.MustCompile(`^hero_api_requests_total\{([^}]*)\} (\S+)$`)
var labelRe = regexp.MustCompile(`(\w+)="([^"]*)"`)

// apiRequests reads hero_api_requests_total off the API's /metrics.
func apiRequests(t *testing.T, api *harness.Proc) map[apiSeries]float64 {
	t.Helper()
	out := map[apiSeries]float64{}
	scrapeLines(t, api, func(line string) {
		m := apiSeriesRe.FindStringSubmatch(line)
		if m == nil {
			return
		}
		labels := map[string]string{}
		for _, l := range labelRe.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[apiSeries{labels["transport"], labels["method"], labels["code"]}] += v
	})
	return out
}

// scrapeLines calls each with every line of a process's /metrics.
func scrapeLines(t *testing.T, p *harness.Proc, each func(line string)) {
	t.Helper()
	resp, err := http.Get("http://" + p.AdminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		each(sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestAPIMetricCodes: hero_api_requests_total spells its code label one way on both
// transports, as gRPC codes (OK, NotFound, …; never JSON-RPC's own "ok"), so that the
// dashboard's "API errors" panel (code!="OK") counts exactly the calls that failed.
func TestAPIMetricCodes(t *testing.T) {
	st, c := newStack(t, harness.StackOptions{})
	before := apiRequests(t, st.API)
	c.MustCall(t, "context.load", map[string]any{"id": ctx1}, nil)
	if err := c.Call("flow.load", map[string]any{"context_id": ctx1, "id": 999999}, nil); err == nil {
		t.Fatal("JSON-RPC flow.load of a missing flow succeeded")
	}
	api := c.API(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := api.GetContext(ctx, &herov1.GetContextRequest{Id: ctx1}); err != nil {
		t.Fatalf("gRPC GetContext: %v", err)
	}
	if _, err := api.GetFlow(ctx, &herov1.GetFlowRequest{ContextId: ctx1, Id: 999999}); status.Code(err) != codes.NotFound {
		t.Fatalf("gRPC GetFlow of a missing flow: %v, want NotFound", err)
	}

	// The four calls above are counted (before each answer goes out; waited for all
	// the same).
	var after map[apiSeries]float64
	counted := func() bool {
		after = apiRequests(t, st.API)
		return total(after)-total(before) >= 4
	}
	if !waitUntil(time.Minute, counted) {
		t.Fatalf("hero_api_requests_total did not count the four calls: %v", after)
	}
	for _, s := range []apiSeries{
		{"jsonrpc", "context.load", "OK"}, {"jsonrpc", "flow.load", "NotFound"},
		{"grpc", "GetContext", "OK"}, {"grpc", "GetFlow", "NotFound"},
	} {
		if after[s]-before[s] != 1 {
			t.Errorf("hero_api_requests_total%+v rose by %v, want 1", s, after[s]-before[s])
		}
	}
	grpcCodes := map[string]bool{}
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		grpcCodes[code.String()] = true
	}
	var failed float64
	for s, v := range after {
		if !grpcCodes[s.code] {
			t.Errorf("hero_api_requests_total%+v: code %q is not a gRPC code's name", s, s.code)
		}
		if s.code != "OK" {
			failed += v - before[s]
		}
	}
	// The two missing flows are the only failures since before: what the dashboard's
	// "API errors" panel shows.
	if failed != 2 {
		t.Errorf("calls counted with code!=\"OK\" since the test's calls began: %v, want 2 (%v)", failed, after)
	}
}

func total(m map[apiSeries]float64) float64 {
	var n float64
	for _, v := range m {
		n += v
	}
	return n
}
