package worker

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
)

// workerMetrics are the worker side's metrics (the seed's "Metrics to Track"): jobs
// by status, errors by reason, run time, queue depths (a collector that asks Redis at
// scrape time), live worker processes and stale requeues.
type workerMetrics struct {
	jobs          *prometheus.CounterVec
	errors        *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	requeued      prometheus.Counter
	handedBack    prometheus.Counter
	finishRetries prometheus.Counter
}

func newWorkerMetrics(reg prometheus.Registerer, w *Worker) *workerMetrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	m := &workerMetrics{
		jobs: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_dispatcher_jobs_total",
			Help: "Hero Dispatcher jobs by worker id and the status this process gave them (started, finished, error)."}, []string{"worker_id", "status"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{Name: "hero_dispatcher_job_errors_total",
			Help: "Hero Dispatcher jobs that ended in error, by worker id and reason (exit_code, timeout, stopped_by_request, stopped, invalid, dependency_failed, log_path, start_error, unknown_job)."}, []string{"worker_id", "reason"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "hero_dispatcher_job_run_duration_seconds",
			Help:    "Run time of Hero Dispatcher jobs (all attempts), by worker id.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, []string{"worker_id"}),
		requeued: f.NewCounter(prometheus.CounterOpts{Name: "hero_dispatcher_stale_requeues_total",
			Help: "Jobs of worker processes that stopped heart-beating, put back on their work queue."}),
		handedBack: f.NewCounter(prometheus.CounterOpts{Name: "hero_dispatcher_handed_back_total",
			Help: "Jobs this process put back on their work queue at shutdown."}),
		finishRetries: f.NewCounter(prometheus.CounterOpts{Name: "hero_dispatcher_write_retries_total",
			Help: "Writes of a job's end or hand-back retried after a passing Redis fault."}),
	}
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "hero_dispatcher_jobs_running", Help: "Hero Dispatcher jobs this process holds now."}, func() float64 {
		return float64(w.core.Len())
	})
	reg.MustRegister(&queueCollector{w: w,
		depth: prometheus.NewDesc("hero_dispatcher_queue_length",
			"Length of a served worker id's queues: work (hero:work_queue:<id>), stop (hero:stop_queue:<id>), waiting (jobs waiting for dependencies).",
			[]string{"worker_id", "queue"}, nil),
		procs: prometheus.NewDesc("hero_dispatcher_worker_processes",
			"Worker processes of this implementation with a fresh heartbeat (worker availability).", nil, nil),
	})
	return m
}

// queueCollector reads the queue depths from Redis when scraped.
type queueCollector struct {
	w     *Worker
	depth *prometheus.Desc
	procs *prometheus.Desc
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.depth
	ch <- c.procs
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w := c.w
	type row struct {
		id                  string
		work, stop, waiting *redis.IntCmd
	}
	rows := make([]row, len(w.specs))
	var live *redis.IntCmd
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range w.specs {
			rows[i] = row{id: s.ID, work: p.LLen(ctx, w.keys.WorkQueue(s.ID)), stop: p.LLen(ctx, w.keys.StopQueue(s.ID)), waiting: p.ZCard(ctx, w.keys.Waiting(s.ID))}
		}
		cutoff := time.Now().Add(-w.p.StaleAfter).UnixMilli()
		live = p.ZCount(ctx, w.keys.Procs(), strconv.FormatInt(cutoff, 10), "+inf")
		return nil
	})
	if err != nil {
		return // Redis unreachable: no sample rather than a wrong one
	}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(r.work.Val()), r.id, "work")
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(r.stop.Val()), r.id, "stop")
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(r.waiting.Val()), r.id, "waiting")
	}
	ch <- prometheus.MustNewConstMetric(c.procs, prometheus.GaugeValue, float64(live.Val()))
}
