package main

import (
	"github.com/hero-coordinator/hero/lib/protoconv"
	"strings"
	"testing"
)

func TestParseLimits(t *testing.T) {
	l, err := parseLimits("--limits", "memory=512MiB, pids=64,cpu=500,file-size=1GiB,disk=2GiB,network=outbound")
	if err != nil || l.MemoryBytes != 512<<20 || l.Pids != 64 || l.CpuMillis != 500 || l.FileSizeBytes != 1<<30 || l.Network != "outbound" {
		t.Fatalf("%+v %v", l, err)
	}
	if got := limitsText(protoconv.LimitsFromPB(l)); got != "memory=512MiB,pids=64,cpu=500,file-size=1024MiB,disk=2048MiB,network=outbound" {
		t.Errorf("limitsText: %q", got)
	}
	if l, err := parseLimits("--job-max", ""); err != nil || limitsText(protoconv.LimitsFromPB(l)) != "" {
		t.Errorf("empty: %+v %v", l, err)
	}
	for in, want := range map[string]string{"mem=1G": `unknown limit "mem"`, "pids": "not key=value", "pids=x": "pids=x", "network=all": "want none or outbound", "memory=lots": "memory=lots"} {
		if _, err := parseLimits("--limits", in); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--limits") {
			t.Errorf("%q: %v (want %q)", in, err, want)
		}
	}
}
