package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/store"
)

// depthCollector reports the depth of msg_out, msg_in and every queue:<script_type>,
// summed over the contexts (the label stays bounded: one value per queue name).
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
	ids, err := c.store.ContextIDs(ctx)
	if err != nil {
		return
	}
	for _, id := range ids {
		db, err := c.store.Ctx(id)
		if err != nil {
			continue
		}
		var types *redis.StringSliceCmd
		if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
			types = p.HKeys(ctx, keys.ScriptTypes)
			return nil
		}); err != nil {
			continue
		}
		names := []string{keys.MsgOut, keys.MsgIn}
		for _, t := range types.Val() {
			names = append(names, keys.Queue(t))
		}
		lens := make([]*redis.IntCmd, len(names))
		if _, err := db.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, n := range names {
				lens[i] = p.LLen(ctx, n)
			}
			return nil
		}); err != nil {
			continue
		}
		for i, n := range names {
			totals[n] += lens[i].Val()
		}
	}
	for q, n := range totals {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), q)
	}
}
