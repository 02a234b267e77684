package app

import "testing"

// The open files a process's listeners may need: both of supervisor-daemon's at
// their cap, one elsewhere, nothing without a cap.
func TestFilesNeeded(t *testing.T) {
	for _, tc := range []struct {
		max  int
		api  bool
		want uint64
	}{{4096, true, 2*4096 + 512}, {4096, false, 4096 + 512}, {0, true, 0}} {
		if got := filesNeeded(tc.max, tc.api); got != tc.want {
			t.Errorf("filesNeeded(%d, %v) = %d, want %d", tc.max, tc.api, got, tc.want)
		}
	}
}
