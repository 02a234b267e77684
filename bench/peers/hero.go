package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// heroRun runs tests/e2e's BenchmarkPeers once (the e2e harness builds and starts the
// binaries against a redis-server from PATH, with the deployment's ACL users and an
// append-only file: HERO_E2E_REDIS=stack) and reads its "PEERS hero" lines.
func heroRun(root string, p params) (map[string]float64, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkPeers$", "-benchtime", "1x", "-timeout", "30m", "./")
	cmd.Dir = filepath.Join(root, "tests", "e2e")
	cmd.Env = append(os.Environ(), "HERO_BENCH=1", "HERO_BENCH_PEERS=1", "HERO_E2E_REDIS=stack",
		"HERO_PEERS_N="+strconv.Itoa(p.n), "HERO_PEERS_C="+strconv.Itoa(p.producers),
		"HERO_PEERS_WORKERS="+strconv.Itoa(p.workers), "HERO_PEERS_WARMUP="+strconv.Itoa(p.warmup),
		"GOWORK=") // this module runs with GOWORK=off; tests/e2e is a workspace module
	if p.procs != "default" {
		cmd.Env = append(cmd.Env, "HERO_TEST_GOMAXPROCS="+p.procs)
	}
	var outBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, tail(outBuf.String(), 40))
	}
	f := map[string]float64{}
	sc := bufio.NewScanner(&outBuf)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 4 && fields[0] == "PEERS" && fields[1] == "hero" {
			if v, err := strconv.ParseFloat(fields[3], 64); err == nil {
				f[fields[2]] = v
			}
		}
	}
	if len(f) == 0 {
		return nil, fmt.Errorf("no PEERS lines in the benchmark's output:\n%s", tail(outBuf.String(), 40))
	}
	return f, nil
}
