package config

import (
	"os"
	"strings"
	"testing"
)

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

// --redis-sentinel-password-file is refused when no Redis URL names a Sentinel-managed
// master (it would be ignored) and taken when one does, the primary or a placed one.
func TestSentinelPasswordFileNeedsASentinelURL(t *testing.T) {
	pw := t.TempDir() + "/sentinel-password"
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url, placement string
		ok             bool
	}{
		{"redis://127.0.0.1:6379/0", "", false},
		{"redis://127.0.0.1:26379/0?master_name=hero", "", true},
		{"redis://127.0.0.1:6379/0", "2-9=redis://127.0.0.1:26379?master_name=other", true},
	} {
		f := NewFlagSet("test", "")
		var cm Common
		cm.RegisterFlags(f, "127.0.0.1:1", "127.0.0.1:2")
		cm.RedisURL, cm.RedisPlacement, cm.RedisSentinelPasswordFile = c.url, c.placement, pw
		err := cm.Validate()
		if (err == nil) != c.ok {
			t.Errorf("url %q placement %q: %v, want ok=%v", c.url, c.placement, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--redis-sentinel-password-file") {
			t.Errorf("the error does not name the flag: %v", err)
		}
	}
	var cm Common
	cm.RegisterFlags(NewFlagSet("test", ""), "127.0.0.1:1", "127.0.0.1:2")
	cm.RedisURL, cm.RedisSentinelPasswordFile = "redis://127.0.0.1:26379/0?master_name=hero", pw+".missing"
	if err := cm.Validate(); err == nil {
		t.Error("a missing password file was accepted")
	}
}
