package grpcx

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Each call is counted under its method and its status code, and timed under its
// method, whether its series were resolved before (successes) or not (failures).
func TestMetricsCountEachCallByMethodAndCode(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	const submit, get = "/hero.v1.Coordinator/SubmitJob", "/hero.v1.Coordinator/GetJob"
	for range 3 {
		m.observe(submit, nil, time.Millisecond)
	}
	m.observe(submit, status.Error(codes.InvalidArgument, "bad"), time.Millisecond)
	m.observe(get, status.Error(codes.NotFound, "none"), time.Millisecond)
	m.observe(get, nil, time.Millisecond)
	for _, c := range []struct {
		method, code string
		want         float64
	}{{"SubmitJob", "OK", 3}, {"SubmitJob", "InvalidArgument", 1}, {"GetJob", "NotFound", 1}, {"GetJob", "OK", 1}} {
		if got := testutil.ToFloat64(m.handled.WithLabelValues(c.method, c.code)); got != c.want {
			t.Errorf("handled{method=%q,code=%q} = %v, want %v", c.method, c.code, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n != 2 {
		t.Errorf("%d duration series, want one per method (2)", n)
	}
	if got := m.duration.WithLabelValues("SubmitJob").(prometheus.Histogram); histogramCount(t, got) != 4 {
		t.Errorf("SubmitJob timed %d times, want 4", histogramCount(t, got))
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	pb := &dto.Metric{}
	if err := h.Write(pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount()
}
