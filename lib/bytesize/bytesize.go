// Package bytesize reads sizes as the flags and heroctl spell them ("512MiB"). It is a
// package of its own so that what reads a size (heroctl) links nothing else with it.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse reads "512MiB", "2GiB", "64KiB", "1048576" (bytes); "" and "0" are 0.
func Parse(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(v), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (e.g. 512MiB, 2GiB)", s)
	}
	return n * mult, nil
}
