package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// keyKind names what a key of a context's database holds, for memoryByKind: the
// objects by their prefix, the coordinator's keys by theirs.
func keyKind(k string) string {
	for _, p := range []struct{ prefix, kind string }{
		{"job:", "job hashes"},
		{"message:", "messages"},
		{"flow:", "flow hash"},
		{"coord:dag:", "DAG hash"},
		{"coord:idx:jobs:", "job status index"},
		{"coord:idx:jobs", "job index"},
		{"coord:events", "events stream"},
		{"coord:flowmsgs:", "flow message set"},
		{"coord:flowres:", "flow results"},
		{"coord:log:", "logs"},
	} {
		if strings.HasPrefix(k, p.prefix) {
			return p.kind
		}
	}
	return "other"
}

// memoryByKind sums MEMORY USAGE (every element counted: SAMPLES 0) of every key of
// database db, by keyKind, and returns the sums per job of n, largest first, as one
// line ("job hashes 512 B, …").
func memoryByKind(b *testing.B, rc *redis.Client, n int) string {
	ctx := context.Background()
	sum := map[string]int64{}
	count := map[string]int{}
	var cursor uint64
	for {
		ks, next, err := rc.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			b.Fatal(err)
		}
		cmds, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range ks {
				p.MemoryUsage(ctx, k, 0)
			}
			return nil
		})
		if err != nil && err != redis.Nil {
			b.Fatal(err)
		}
		for i, c := range cmds {
			v, _ := c.(*redis.IntCmd).Result()
			sum[keyKind(ks[i])] += v
			count[keyKind(ks[i])]++
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	kinds := make([]string, 0, len(sum))
	var total int64
	for k, v := range sum {
		kinds = append(kinds, k)
		total += v
	}
	sort.Slice(kinds, func(i, j int) bool { return sum[kinds[i]] > sum[kinds[j]] })
	parts := []string{fmt.Sprintf("all keys %.0f B", float64(total)/float64(n))}
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %.0f B (%d keys)", k, float64(sum[k])/float64(n), count[k]))
	}
	return strings.Join(parts, ", ")
}

// memorySamples prints, for a look at where the bytes go, some keys of each kind: their
// size, encoding and content.
func memorySamples(b *testing.B, rc *redis.Client, flow uint32) {
	ctx := context.Background()
	seen := map[string]int{}
	var cursor uint64
	for {
		ks, next, err := rc.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range ks {
			kind := keyKind(k)
			if seen[kind] >= 3 {
				continue
			}
			seen[kind]++
			mu, _ := rc.MemoryUsage(ctx, k, 0).Result()
			enc, _ := rc.ObjectEncoding(ctx, k).Result()
			typ, _ := rc.Type(ctx, k).Result()
			fmt.Printf("SAMPLE %s %s: %d B, %s %s", kind, k, mu, typ, enc)
			switch typ {
			case "hash":
				h := rc.HGetAll(ctx, k).Val()
				fmt.Printf(", %d fields", len(h))
				if len(h) < 100 {
					fmt.Printf(": %q", h)
				}
			case "zset", "set":
				fmt.Printf(", %d members", rc.ZCard(ctx, k).Val()+rc.SCard(ctx, k).Val())
			case "stream":
				fmt.Printf(", %d entries; last 5: %v", rc.XLen(ctx, k).Val(), rc.XRevRangeN(ctx, k, "+", "-", 5).Val())
				info := rc.Do(ctx, "XINFO", "STREAM", k).Val()
				fmt.Printf("; %v", info)
			}
			fmt.Println()
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	fmt.Println("SAMPLE DAG fields of node 5000:", rc.HMGet(ctx, fmt.Sprintf("coord:dag:%d", flow), "s:5000", "a:5000", "d:5000", "e:5000").Val())
}

// memoryStats is MEMORY STATS's numeric items (the top-level ones and db.N's), by name.
func memoryStats(b *testing.B, rc *redis.Client) map[string]int64 {
	out := map[string]int64{}
	v, err := rc.Do(context.Background(), "MEMORY", "STATS").Result()
	if err != nil {
		b.Fatal(err)
	}
	var add func(prefix string, v any)
	add = func(prefix string, v any) {
		switch x := v.(type) {
		case int64:
			out[prefix] = x
		case map[any]any: // RESP3
			for k, val := range x {
				add(strings.TrimPrefix(prefix+"."+fmt.Sprint(k), "."), val)
			}
		case []any: // RESP2: name, value, …
			for k := 0; k+1 < len(x); k += 2 {
				add(strings.TrimPrefix(prefix+"."+fmt.Sprint(x[k]), "."), x[k+1])
			}
		}
	}
	add("", v)
	return out
}

// memoryStatsGrowth gives the items of MEMORY STATS that grew between before and after
// by more than a byte per job, per job: where used_memory's growth went beyond the
// keys' own MEMORY USAGE (the keyspace's tables, client buffers, the slow log, …).
func memoryStatsGrowth(before, after map[string]int64, n int) string {
	var parts []string
	for _, k := range []string{"total.allocated", "dataset.bytes", "overhead.total", "keys.count", "clients.normal", "clients.slaves", "replication.backlog", "aof.buffer", "lua.caches", "functions.caches"} {
		if d := after[k] - before[k]; k == "keys.count" || d > int64(n) || -d > int64(n) {
			parts = append(parts, fmt.Sprintf("%s %+.0f", k, float64(d)/float64(n)))
		}
	}
	for k, v := range after {
		if strings.HasPrefix(k, "db.") {
			if d := v - before[k]; d > int64(n) {
				parts = append(parts, fmt.Sprintf("%s %+.0f", k, float64(d)/float64(n)))
			}
		}
	}
	sort.Strings(parts[min(len(parts), 4):])
	return strings.Join(parts, ", ")
}
