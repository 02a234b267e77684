package main

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// The test binary is also asynq's worker process (startWorker runs os.Executable with
// -asynq-worker).
func TestMain(m *testing.M) {
	if slices.Contains(os.Args[1:], "-asynq-worker") {
		if err := runWorker(); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAsynqSide runs asynq's side once, small and tuned (10 ms polls: the chain's 30
// hops take a fraction of a second), against a redis-server with the settings this
// stack's side has: the append-only file on, asynq logged in as its own ACL user, and
// no command or key refused to it (asynqRun checks Redis's ACL log).
func TestAsynqSide(t *testing.T) {
	redisPath, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH")
	}
	f, err := asynqRun(redisPath, params{n: 200, producers: 8, workers: 8, warmup: 20, procs: "1"}, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if f["redis_aof"] != 1 || f["redis_users"] != 2 {
		t.Errorf("redis_aof %v, redis_users %v: want the append-only file on and the users default and asynq", f["redis_aof"], f["redis_users"])
	}
	if f["redis_zset_listpack"] != 8 {
		t.Errorf("redis_zset_listpack %v: want zset-max-listpack-entries 8, as this stack's side runs Redis", f["redis_zset_listpack"])
	}
	if v, ok := f["redis_rdb_compression"]; !ok || v != 0 {
		t.Errorf("redis_rdb_compression %v (reported: %v): want rdbcompression no, as this stack's side runs Redis", v, ok)
	}
	for _, name := range []string{"a_jobs_per_s", "a_cpu_us_per_job", "a_aof_bytes_per_job", "c_run16_p50_ms", "c_run128_jobs_per_s", "d_hop_p50_us"} {
		if f[name] <= 0 {
			t.Errorf("%s = %v: want a figure", name, f[name])
		}
	}
	// The kernel's part is a part of every process's CPU, not added to it.
	if k := f["a_cpu_us_kernel"]; k <= 0 || k >= f["a_cpu_us_per_job"] {
		t.Errorf("a_cpu_us_kernel = %v with a_cpu_us_per_job %v: want the part of it in the kernel", k, f["a_cpu_us_per_job"])
	}
	// A hop waits for at most one poll (15 ms at 10 ms: half of it plus up to all of it)
	// after the enqueue; a minute would be no poll at all.
	if f["d_hop_p50_us"] > float64(time.Minute.Microseconds()) {
		t.Errorf("d_hop_p50_us = %v", f["d_hop_p50_us"])
	}
}
