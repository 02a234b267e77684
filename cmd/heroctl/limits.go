package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hero-coordinator/hero/lib/bytesize"
	"github.com/hero-coordinator/hero/lib/model"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

// limitsUsage names what --limits, --job-defaults and --job-max take.
const limitsUsage = "memory=512MiB,pids=64,cpu=500,file-size=1GiB,disk=1GiB,network=none|outbound"

// parseLimits reads job limits: memory=512MiB,pids=64,cpu=500 (thousandths of a
// CPU),file-size=1GiB,disk=1GiB,network=outbound. "" is an empty set (it clears, in an
// update).
func parseLimits(flagName, s string) (*herov1.JobLimits, error) {
	l := &herov1.JobLimits{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, usageErr("%s: %q is not key=value (%s)", flagName, item, limitsUsage)
		}
		var err error
		switch k {
		case "memory":
			l.MemoryBytes, err = bytesize.Parse(v)
		case "file-size":
			l.FileSizeBytes, err = bytesize.Parse(v)
		case "disk":
			l.DiskBytes, err = bytesize.Parse(v)
		case "pids":
			l.Pids, err = strconv.ParseInt(v, 10, 64)
		case "cpu":
			l.CpuMillis, err = strconv.ParseInt(v, 10, 64)
		case "network":
			if v != "none" && v != "outbound" {
				err = fmt.Errorf("want none or outbound")
			}
			l.Network = v
		default:
			return nil, usageErr("%s: unknown limit %q (%s)", flagName, k, limitsUsage)
		}
		if err != nil {
			return nil, usageErr("%s: %s=%s: %v", flagName, k, v, err)
		}
	}
	return l, nil
}

// limitsText is the short form of limits for the human output ("" for none).
func limitsText(l *model.JobLimits) string {
	if l.IsZero() {
		return ""
	}
	return l.String()
}
