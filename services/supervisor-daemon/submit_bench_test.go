package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/hero-coordinator/hero/lib/streambatch"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// BenchmarkSubmitPath: job.submit from 1 and from 32 concurrent callers through the
// service (no transport, no authentication: those are the same for every method)
// against a real Redis. Reports per submission: Redis's socket reads (its round trips
// with the callers), EVALSHAs, context reads (HGETALL), commands a caller sent or a
// script ran, and this process's CPU.
func BenchmarkSubmitPath(b *testing.B) {
	srv, st := submitStore(b)
	s := benchService(b, st)
	rc := srv.Client(b, 0)
	for _, callers := range []int{1, 32} {
		b.Run("callers="+strconv.Itoa(callers), func(b *testing.B) {
			before, cpu0 := redisStats(b, rc), cpuTime()
			b.ResetTimer()
			var next atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := s.jobSubmit(context.Background(), Principal{Actor: 2}, jobSubmitParams{ContextID: 1, Job: &jobIn{Script: "true", ScriptType: "sh"}}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			cpu, after := cpuTime()-cpu0, redisStats(b, rc)
			for _, m := range []string{"reads", "evalsha", "hgetall", "commands"} {
				b.ReportMetric(float64(after[m]-before[m])/float64(b.N), m+"/op")
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
		})
	}
}

// redisStats reads Redis's socket reads ("reads"), the commands callers sent or
// scripts ran ("commands") and the calls of each command (INFO stats, commandstats).
func redisStats(b *testing.B, rc *redis.Client) map[string]int64 {
	b.Helper()
	info, err := rc.Info(context.Background(), "stats", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			out["reads"], _ = strconv.ParseInt(v, 10, 64)
		}
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(v, 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
		out["commands"] += n
	}
	return out
}

// cpuTime is this process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCreateBatch: a JSON-RPC batch of 500 job.create requests (a flow's jobs,
// each naming its id, as figure (b) of docs/benchmarks.md creates them) through the
// service, without transport and authentication. Reports this process's CPU per job.
func BenchmarkCreateBatch(b *testing.B) {
	_, st := submitStore(b)
	s := benchService(b, st)
	const size = 500
	next := uint32(1)
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		raws := make([]json.RawMessage, size)
		for i := range raws {
			raws[i] = json.RawMessage(fmt.Sprintf(`{"context_id":1,"job":{"id":%d,"script":"true","script_type":"sh"}}`, next))
			next++
		}
		for i, a := range s.jobCreateBatch(context.Background(), Principal{Actor: 1}, raws) {
			if a.err != nil {
				b.Fatalf("job %d: %v", i, a.err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*size), "cpu-us/job")
}

// BenchmarkStreamSubmit: the submissions of a SubmitJobStream, 16 a batch message (as
// the Go client's flights bring them under load), through the stream's handling of a
// batch (the request's decoding, DecodeWire; streamSubmit: the checks, the group
// commit; the answers' encoding, answerMessages) against a real Redis, without
// transport and authentication. Reports this process's CPU per submission;
// -benchmem's figures are per batch of 16.
func BenchmarkStreamSubmit(b *testing.B) {
	_, st := submitStore(b)
	c := &coordinatorServer{s: benchService(b, st)}
	ctx := context.WithValue(context.Background(), principalKey{}, Principal{Actor: 2})
	const size = 16
	msg := streamBatch(b, size)
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		r := &streamRequest{}
		if err := r.DecodeWire(string(msg)); err != nil {
			b.Fatal(err)
		}
		items := make([]streamItem, len(r.batch))
		for i := range items {
			items[i] = streamItem{r: &r.batch[i]}
		}
		out := c.streamSubmit(ctx, items)
		for i, a := range out {
			if a.err != nil || a.job == nil {
				b.Fatalf("item %d: %+v", i, a)
			}
		}
		if _, err := answerMessages(out, true, streamInflight, streambatch.MaxBytes, func(int) {}); err != nil { // as the stream sends them
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*size), "cpu-us/job")
}

// streamBatch is the encoding of a SubmitJobStreamRequest batch of size submissions
// of a shell job to context 1, as a producer sends it.
func streamBatch(b *testing.B, size int) []byte {
	m := &herov1.SubmitJobStreamRequest{}
	for i := range size {
		m.Batch = append(m.Batch, &herov1.SubmitJobStreamRequest{Seq: uint64(i + 1), Submit: &herov1.SubmitJobRequest{ContextId: 1,
			Job: &herov1.Job{Script: "true", ScriptType: "sh", ContextId: 1}}})
	}
	msg, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	return msg
}

// BenchmarkStreamDecode: a SubmitJobStream's batch message of 16 submissions decoded
// into the submissions the stream checks, field by field (fast, DecodeWire) and the
// usual way (proto, proto.Unmarshal into the herov1 messages and requestOf).
// -benchmem's figures are per message.
func BenchmarkStreamDecode(b *testing.B) {
	msg := streamBatch(b, 16)
	b.Run("fast", func(b *testing.B) {
		for range b.N {
			var r streamRequest
			if err := r.DecodeWire(string(msg)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		for range b.N {
			var m herov1.SubmitJobStreamRequest
			if err := proto.Unmarshal(msg, &m); err != nil {
				b.Fatal(err)
			}
			var r streamRequest
			requestOf(&m, &r)
		}
	})
}

// BenchmarkCreateJobsGRPC: CreateJobs calls of 500 jobs each (a flow's jobs, each
// naming its id, as figure (b) of docs/benchmarks.md creates them over gRPC) through
// the service's gRPC method and the answer's encoding, without transport and
// authentication. Reports this process's CPU per job; -benchmem's figures are per
// call of 500.
func BenchmarkCreateJobsGRPC(b *testing.B) {
	_, st := submitStore(b)
	c := &coordinatorServer{s: benchService(b, st)}
	ctx := context.WithValue(context.Background(), principalKey{}, Principal{Actor: 1})
	const size = 500
	next := uint32(1)
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r := &herov1.CreateJobsRequest{ContextId: 1}
		for range size {
			r.Jobs = append(r.Jobs, &herov1.Job{Id: next, Script: "true", ScriptType: "sh"})
			next++
		}
		msg, err := proto.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		in := &herov1.CreateJobsRequest{}
		if err := proto.Unmarshal(msg, in); err != nil { // as the server's codec does
			b.Fatal(err)
		}
		out, err := c.CreateJobs(ctx, in)
		if err != nil {
			b.Fatal(err)
		}
		for i, it := range out.Items {
			if it.Error != nil {
				b.Fatalf("job %d: %v", i, it.Error)
			}
		}
		if _, err := proto.Marshal(out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N*size), "cpu-us/job")
}
