package worker

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/config"
)

func TestWorkerConfig(t *testing.T) {
	specs, err := ParseSpecs(" local=/bin/sh ; w2=python3 -u;")
	if err != nil || len(specs) != 2 || specs[1].ID != "w2" || !reflect.DeepEqual(specs[1].Argv, []string{"python3", "-u"}) {
		t.Fatalf("%v %v", specs, err)
	}
	for _, bad := range []string{"local", "=sh", "a=", "a=sh;a=sh", "a b=sh"} {
		if _, err := ParseSpecs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	var c Config
	fs := config.NewFlagSet("runner", "")
	c.RegisterFlags(fs)
	env := map[string]string{"DISPATCHER_WORKERS": "local=/bin/sh", "DISPATCHER_DB": "3", "DISPATCHER_REPLY_TTL": "2h"}
	fs.SetEnvLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err := fs.Parse([]string{"--dispatcher-concurrency", "4"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.Enabled() || c.DB != 3 || c.Prefix != "hero:" || c.Concurrency != 4 || c.ReplyTTL != 2*time.Hour || len(c.Specs()) != 1 {
		t.Fatalf("%+v", c)
	}
	off := Config{Prefix: "hero:", Concurrency: 1}
	if err := off.Validate(); err != nil || off.Enabled() {
		t.Fatalf("empty workers: %v", err)
	}
	bad := Config{Workers: "x=sh", Prefix: "hero:", Concurrency: 1, ReplyTTL: time.Hour, StaleAfter: 15 * time.Second, LogDir: "/does/not/exist"}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--dispatcher-log-dir") {
		t.Fatalf("missing log dir: %v", err)
	}
}
