package keys

import "testing"

// ParseJobKey and ParseMessageKey take exactly the keys Job and Message make.
func TestParseKeys(t *testing.T) {
	for _, tc := range []struct {
		key        string
		caller, id uint32
		ok         bool
	}{
		{"job:1:2", 1, 2, true},
		{"job:0:0", 0, 0, true},
		{"job:4294967295:4294967295", 1<<32 - 1, 1<<32 - 1, true},
		{"job:4294967296:1", 0, 0, false},
		{"job:12345678901:1", 0, 0, false},
		{"job:01:2", 0, 0, false},
		{"job:1:02", 0, 0, false},
		{"job:+1:2", 0, 0, false},
		{"job:-1:2", 0, 0, false},
		{"job: 1:2", 0, 0, false},
		{"job:1:2 ", 0, 0, false},
		{"job:1:2:3", 0, 0, false},
		{"job:1:", 0, 0, false},
		{"job::2", 0, 0, false},
		{"job:1", 0, 0, false},
		{"job:", 0, 0, false},
		{"jobs:1:2", 0, 0, false},
		{"message:1:2", 0, 0, false},
		{"job:1:2x", 0, 0, false},
	} {
		c, id, err := ParseJobKey(tc.key)
		if (err == nil) != tc.ok || c != tc.caller || id != tc.id {
			t.Errorf("ParseJobKey(%q) = %d, %d, %v; want %d, %d, ok %v", tc.key, c, id, err, tc.caller, tc.id, tc.ok)
		}
		if tc.ok && Job(c, id) != tc.key {
			t.Errorf("Job(%d, %d) = %q, want %q", c, id, Job(c, id), tc.key)
		}
	}
	if c, id, err := ParseMessageKey("message:7:900"); err != nil || c != 7 || id != 900 {
		t.Errorf("ParseMessageKey: %d %d %v", c, id, err)
	}
	for _, k := range []string{"job:7:900", "message:7", "message:07:900", "message:7:900:1"} {
		if _, _, err := ParseMessageKey(k); err == nil {
			t.Errorf("ParseMessageKey(%q) took it", k)
		}
	}
}
