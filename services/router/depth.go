package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// depthCollector reports the depth of msg_out, msg_in and every queue:<script_type>,
// summed over the contexts (the label stays bounded: one value per queue name). It
// reads only the contexts of coord:busy (those that may have items waiting): one
// ZRANGE per server when nothing waits, whatever the number of contexts.
type depthCollector struct {
	store *store.Store
	desc  *prometheus.Desc
}

func newDepthCollector(s *store.Store) *depthCollector {
	return &depthCollector{store: s, desc: prometheus.NewDesc("hero_queue_depth",
		"Items waiting in a queue, summed over all contexts (msg_out, msg_in, queue:<script_type>).", []string{"queue"}, nil)}
}

func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	totals := map[string]int64{keys.MsgOut: 0, keys.MsgIn: 0}
	for _, t := range model.ScriptTypes() {
		totals[keys.Queue(string(t))] = 0
	}
	ids, err := c.store.BusyContexts(ctx, time.Time{})
	if err != nil {
		return
	}
	for _, id := range ids {
		db, err := c.store.Ctx(id)
		if err != nil {
			continue
		}
		st, err := db.CheckBusy(ctx, false)
		if err != nil {
			continue
		}
		for q, n := range st.Lists {
			if _, ok := totals[q]; ok { // pinned queues are not reported
				totals[q] += n
			}
		}
	}
	for q, n := range totals {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), q)
	}
}
