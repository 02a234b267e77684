package sandbox

import (
	"io"
	"strings"
	"testing"

	"github.com/hero-coordinator/hero/lib/config"
)

// parseFlags reads the sandbox's flags as a runner does (no environment).
func parseFlags(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	var c Config
	fs := config.NewFlagSet("runner", "")
	c.RegisterFlags(fs)
	fs.SetEnvLookup(func(string) (string, bool) { return "", false })
	if err := fs.Parse(args, io.Discard); err != nil {
		t.Fatal(err)
	}
	return &c, c.Validate()
}

// Each maximum is its default unless the operator sets it (a job may ask for less,
// not more); 0 says no maximum; a bad value is refused naming its flag.
func TestMaximaAreTheDefaultsUnlessSet(t *testing.T) {
	c, err := parseFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	def := c.Limits()
	def.Network = ""
	if c.Max() != def || c.Max().MemoryBytes != 1<<30 || c.Max().Pids != 512 || c.Max().FileSizeBytes != 1<<30 {
		t.Fatalf("maxima %+v, want the defaults %+v", c.Max(), c.Limits())
	}
	c, err = parseFlags(t, "--job-memory", "256MiB", "--job-pids", "64", "--job-cpu", "500", "--job-pids-max", "0", "--job-file-size-max", "2GiB")
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{MemoryBytes: 256 << 20, Pids: 0, CPUMillis: 500, FileSizeBytes: 2 << 30}
	if got := c.Max(); got.MemoryBytes != want.MemoryBytes || got.Pids != want.Pids || got.CPUMillis != want.CPUMillis || got.FileSizeBytes != want.FileSizeBytes {
		t.Fatalf("maxima %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ args []string }{
		{[]string{"--job-pids-max", "-1"}},
		{[]string{"--job-cpu-max", "many"}},
		{[]string{"--job-memory-max", "lots"}},
	} {
		if _, err := parseFlags(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.args[0]) {
			t.Errorf("%v: error %v, want one naming the flag", tc.args, err)
		}
	}
}
