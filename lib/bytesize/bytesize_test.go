package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "0": 0, "1048576": 1 << 20, "64KiB": 64 << 10, "512MiB": 512 << 20, "2GiB": 2 << 30,
		"1TiB": 1 << 40, "3K": 3 << 10, "3M": 3 << 20, "3G": 3 << 30, " 7 MiB ": 7 << 20} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"MiB", "-1", "1.5GiB", "12X", "ten"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
