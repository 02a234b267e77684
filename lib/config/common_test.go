package config

import "testing"

func TestValidateDialTarget(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:9654", "scheduler:9654", "dns:///hero-scheduler-headless.hero.svc:9654", "a:1,b:2", "a:1, b:2"} {
		if err := ValidateDialTarget("scheduler-addr", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "scheduler", "dns:///scheduler", "a:1,", "a:1,b", ":9654"} {
		if err := ValidateDialTarget("scheduler-addr", bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}
